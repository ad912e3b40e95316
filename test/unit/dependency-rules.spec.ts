import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * The two processes stay apart (issue 23): the storage agent (src/agent) imports only itself and
 * what both share; the control plane reaches the agent only through its contract (the agent's
 * DTOs); the shared code imports no process; the CLI is a client (shared code and the generated
 * client). Read from the imports of every source file, so a crossing fails the build.
 */

const src = path.join(__dirname, '../../src');
const rel = (f: string) => path.relative(src, f).split(path.sep).join('/');

/** What both processes may use: conventions, grammars, errors, the file primitives, generated clients. */
const SHARED = [/^common\//, /^client\//, /^store\/file-system\.ts$/, /^store\/ledger-map\.ts$/, /^store\/storage-error\.ts$/];
const AGENT_CONTRACT = /^agent\/.+\/dto\/[^/]+\.ts$/;

type Part = 'agent' | 'shared' | 'cli' | 'control-plane';
function partOf(file: string): Part {
  if (file.startsWith('agent/')) return 'agent';
  if (file.startsWith('cli/')) return 'cli';
  if (SHARED.some((r) => r.test(file))) return 'shared';
  return 'control-plane';
}

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

function imports(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)) {
    let target = path.resolve(path.dirname(file), m[1]);
    if (fs.existsSync(`${target}.ts`)) target = `${target}.ts`;
    else if (fs.existsSync(path.join(target, 'index.ts'))) target = path.join(target, 'index.ts');
    out.push(rel(target));
  }
  return out;
}

function allowed(from: Part, to: string): boolean {
  const toPart = partOf(to);
  switch (from) {
    case 'agent':
      return toPart === 'agent' || toPart === 'shared';
    case 'shared':
      return toPart === 'shared';
    case 'cli':
      return toPart === 'cli' || toPart === 'shared';
    case 'control-plane':
      return toPart !== 'agent' || AGENT_CONTRACT.test(to);
  }
}

describe('dependency rules between the processes', () => {
  const all = files(src).map((f) => ({ file: rel(f), imports: imports(f) }));

  it('reads every source file and its relative imports', () => {
    expect(all.length).toBeGreaterThan(100);
    expect(all.find((f) => f.file === 'agent/agent.module.ts')?.imports).toContain('common/redaction.ts');
  });

  it('no import crosses a process boundary', () => {
    const crossings = all.flatMap((f) => f.imports.filter((t) => !allowed(partOf(f.file), t)).map((t) => `${f.file} (${partOf(f.file)}) -> ${t} (${partOf(t)})`));
    expect(crossings).toEqual([]);
  });

  it('the rule does catch a crossing', () => {
    expect(allowed('agent', 'app.module.ts')).toBe(false);
    expect(allowed('control-plane', 'agent/backends/lio.backend.ts')).toBe(false);
    expect(allowed('control-plane', 'agent/luns/dto/luns.dto.ts')).toBe(true);
    expect(allowed('shared', 'config/app-config.ts')).toBe(false);
  });
});
