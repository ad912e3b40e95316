import 'reflect-metadata';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { NestFastifyApplication } from '@nestjs/platform-fastify';
import { loadAgentConfig } from '../src/storage-agent/agent-config';
import { buildAgentOpenApi, createAgentApp } from '../src/storage-agent/agent.factory';
import { buildOpenApi, createApp } from '../src/control-plane/app.factory';
import { loadConfig } from '../src/control-plane/config/app-config';

/** Deep copy with object keys sorted, so the committed spec diffs cleanly. */
export function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    return Object.fromEntries(
      Object.keys(v as object)
        .sort()
        .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
}

/** Builds an app in a scratch directory (never initialised: nothing is read or written) and renders its spec. */
async function render<A extends NestFastifyApplication>(create: (cwd: string) => Promise<A>, build: (app: A) => object): Promise<string> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-openapi-'));
  const app = await create(scratch);
  try {
    return JSON.stringify(sortKeys(build(app)), null, 2) + '\n';
  } finally {
    await app.close();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** The control plane's OpenAPI document as committed (sorted keys, trailing newline). */
export const renderControlPlaneSpec = () =>
  render((cwd) => createApp(loadConfig({ IPXE_CP_LOG_LEVEL: 'silent' }, cwd), { quiet: true }), buildOpenApi);

/** The storage agent's OpenAPI document. */
export const renderAgentSpec = () =>
  render((cwd) => createAgentApp(loadAgentConfig({ IPXE_AGENT_LOG_LEVEL: 'silent' }, cwd), { quiet: true }), buildAgentOpenApi);

if (require.main === module) {
  void (async () => {
    const dir = process.argv[2] ?? path.resolve('openapi');
    fs.mkdirSync(dir, { recursive: true });
    for (const [file, render] of [
      ['control-plane.openapi.json', renderControlPlaneSpec],
      ['agent.openapi.json', renderAgentSpec],
    ] as const) {
      fs.writeFileSync(path.join(dir, file), await render());
      process.stdout.write(`wrote ${path.join(dir, file)}\n`);
    }
  })();
}
