import 'reflect-metadata';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadAgentConfig } from '../src/agent/agent-config';
import { buildAgentOpenApi, createAgentApp } from '../src/agent/agent.factory';
import { buildOpenApi, createApp } from '../src/app.factory';
import { loadConfig } from '../src/config/app-config';

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

/** The control plane's OpenAPI document as committed (sorted keys, trailing newline). */
export async function renderControlPlaneSpec(): Promise<string> {
  // The app is built but never initialised: no state is read or written.
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-openapi-'));
  const app = await createApp(loadConfig({ IPXE_CP_LOG_LEVEL: 'silent' }, scratch), { quiet: true });
  try {
    return JSON.stringify(sortKeys(buildOpenApi(app)), null, 2) + '\n';
  } finally {
    await app.close();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** The storage agent's OpenAPI document (built, never initialised: no backend is touched). */
export async function renderAgentSpec(): Promise<string> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-openapi-'));
  const app = await createAgentApp(loadAgentConfig({ IPXE_AGENT_LOG_LEVEL: 'silent' }, scratch), { quiet: true });
  try {
    return JSON.stringify(sortKeys(buildAgentOpenApi(app)), null, 2) + '\n';
  } finally {
    await app.close();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

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
