/**
 * `npm start` / `npm run start:prod`: the control plane from one bundled file (dist/bundle/
 * kurrent.js, made by `npm run build`) with V8's code cache beside it (kurrent.js.cache).
 *
 * Why: start-up was mostly module loading (bench:boot profile: ~1,600 files of Nest, Fastify,
 * Swagger and class-validator resolved, read and compiled on every start). One file skips the
 * resolution; the code cache skips most of the compiling. Node 20 has no built-in compile cache
 * (module.enableCompileCache is Node 22), so this does what it does for one file. A cache made by
 * another Node version or other V8 flags is rejected by V8 and written again after start-up.
 *
 * Only Node built-ins here: this file runs before anything else is loaded.
 */
import * as fs from 'node:fs';
import Module from 'node:module';
import * as path from 'node:path';
import * as vm from 'node:vm';

const file = path.join(__dirname, '..', '..', 'bundle', 'kurrent.js');
const cacheFile = `${file}.cache`;
const unbundled = path.join(__dirname, 'server.js');

const mtime = (f: string): number | null => {
  try {
    return fs.statSync(f).mtimeMs;
  } catch {
    return null;
  }
};

/**
 * The bundle is made from dist/src by `npm run build`. Any later `nest build` (start:agent,
 * `npm run store`, the tests) empties dist/ and compiles dist/src again: the bundle is then
 * missing, or older than the code beside it. Either way the unbundled code (the same code, a
 * slower start) is what runs, never a stale bundle and never a refusal.
 */
function bundleIsCurrent(): boolean {
  const b = mtime(file);
  const src = mtime(unbundled);
  return b !== null && (src === null || b >= src);
}

function load(): { exports: { start: () => Promise<void> }; script: vm.Script; cacheUsed: boolean } {
  let source: string;
  try {
    source = fs.readFileSync(file, 'utf8');
  } catch {
    process.stderr.write(`kurrent: ${file} is missing: run \`npm run build\` first\n`);
    process.exit(2);
  }
  let cachedData: Buffer | undefined;
  try {
    cachedData = fs.readFileSync(cacheFile);
  } catch {
    cachedData = undefined;
  }
  const script = new vm.Script(Module.wrap(source), { filename: file, cachedData });
  const m = new Module(file, module);
  m.filename = file;
  m.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(path.dirname(file));
  (script.runInThisContext() as (...a: unknown[]) => void).call(m.exports, m.exports, Module.createRequire(file), m, file, path.dirname(file));
  m.loaded = true;
  return { exports: m.exports as { start: () => Promise<void> }, script, cacheUsed: cachedData !== undefined && !script.cachedDataRejected };
}

/** Written beside the bundle atomically; a read-only install simply runs without it. */
function writeCache(script: vm.Script): void {
  try {
    const tmp = `${cacheFile}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, script.createCachedData());
    fs.renameSync(tmp, cacheFile);
  } catch {
    /* not writable: next start compiles again */
  }
}

if (!bundleIsCurrent() && mtime(unbundled) !== null && !process.argv.includes('--write-code-cache')) {
  process.stderr.write(`kurrent: ${path.relative(process.cwd(), file)} is missing or older than dist/src (a nest build ran after npm run build): starting unbundled; \`npm run build\` restores the faster start\n`);
  void (require(unbundled) as { start: () => Promise<void> }).start();
} else {
  main();
}

function main(): void {
  const { exports: server, script, cacheUsed } = load();
  if (process.argv.includes('--write-code-cache')) {
    // `npm run build`: the modules' top-level code has run (and been compiled): cache it and stop.
    writeCache(script);
    process.exit(0);
  } else {
    void server.start();
    // After start-up more functions are compiled, so the cache written then covers them too.
    if (!cacheUsed) setTimeout(() => writeCache(script), 3000).unref();
  }
}
