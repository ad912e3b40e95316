/**
 * Part of `npm run build` (after `nest build`): bundles the control plane into dist/bundle/kurrent.js
 * and writes V8's code cache beside it (see src/start.ts for why). The storage agent, the CLI and
 * the tests keep running the unbundled dist/ files.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { buildSync } from 'esbuild';

const root = path.resolve(__dirname, '..', '..');
const out = path.join(root, 'dist/bundle/kurrent.js');

buildSync({
  entryPoints: [path.join(root, 'dist/src/server.js')],
  outfile: out,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  // Class names are data here (Nest tokens, DTO names that key the OpenAPI schemas).
  keepNames: true,
  logLevel: 'warning',
  external: [
    // Optional Nest packages, required only when used (never here).
    '@nestjs/microservices',
    '@nestjs/microservices/*',
    '@nestjs/websockets',
    '@nestjs/websockets/*',
    '@nestjs/platform-express',
    '@fastify/view',
    '@fastify/cors',
    'class-transformer/storage',
    // Serves its files from its own directory (found through __dirname).
    'swagger-ui-dist',
  ],
});

// Same V8 flags as `npm run start:prod`, or V8 rejects the cache (it is then written at start).
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
const flags = pkg.scripts['start:prod'].split(/\s+/).filter((w) => w.startsWith('--'));
const r = spawnSync(process.execPath, [...flags, path.join(root, 'dist/src/start.js'), '--write-code-cache'], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
