/**
 * Part of `npm run build` (after `nest build`): bundles the control plane into dist/bundle/kurrent.js,
 * writes V8's code cache beside it (see src/start.ts for why) and the OpenAPI document it serves
 * (PREBUILT_SPEC: rendered here as `npm run openapi` renders the committed one, so the bundle never
 * builds it at run time). The storage agent, the CLI and the tests keep running the unbundled
 * dist/ files.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { buildSync } from 'esbuild';
import { asciiOnly, NODE_BUNDLE } from './bundle-options';

const root = path.resolve(__dirname, '..', '..');
const out = path.join(root, 'dist/bundle/kurrent.js');
const spec = path.join(root, 'dist/bundle/control-plane.openapi.json');

// A document of an earlier build must not outlive its bundle if this one fails half way.
rmSync(spec, { force: true });

const built = buildSync({ ...NODE_BUNDLE, entryPoints: [path.join(root, 'dist/src/control-plane/server.js')], outfile: out, write: false });
if (built.outputFiles.length !== 1) throw new Error(`bundle: esbuild made ${built.outputFiles.length} files, one expected`);
mkdirSync(path.dirname(out), { recursive: true });
writeFileSync(out, asciiOnly(built.outputFiles[0].text));

// Same V8 flags as `npm run start:prod`, or V8 rejects the cache (it is then written at start).
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
const flags = pkg.scripts['start:prod'].split(/\s+/).filter((w) => w.startsWith('--'));
const r = spawnSync(process.execPath, [...flags, path.join(root, 'dist/src/control-plane/start.js'), '--write-code-cache'], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);

void (async () => {
  // Loaded only now: it brings the whole app's modules (and their decorators' metadata) with it.
  const { renderControlPlaneSpec } = await import('./openapi');
  writeFileSync(spec, await renderControlPlaneSpec());
})().catch((e: unknown) => {
  process.stderr.write(`bundle: the OpenAPI document was not written: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
