import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * The two processes stay apart (issue 23): the storage agent (src/storage-agent) and the control
 * plane (src/control-plane) import only themselves and src/shared (HTTP conventions, grammars,
 * the file primitives, the agent's contract DTOs); shared code imports no process; the CLI is a
 * client (shared code and the generated client). Read from the imports of every source file, so
 * a crossing fails the build.
 */

const src = path.join(__dirname, '../../src');
const rel = (f: string) => path.relative(src, f).split(path.sep).join('/');

type Part = 'storage-agent' | 'control-plane' | 'shared' | 'client' | 'cli' | 'unplaced';
function partOf(file: string): Part {
  const top = file.split('/')[0];
  return (['storage-agent', 'control-plane', 'shared', 'client', 'cli'] as const).find((p) => p === top) ?? 'unplaced';
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

/** What each part may import besides itself. */
const MAY_IMPORT: Record<Part, Part[]> = {
  'storage-agent': ['shared'],
  'control-plane': ['shared'],
  shared: [],
  client: [],
  cli: ['shared', 'client'],
  unplaced: [],
};

function allowed(from: Part, to: string): boolean {
  const toPart = partOf(to);
  return toPart === from || MAY_IMPORT[from].includes(toPart);
}

describe('dependency rules between the processes', () => {
  const all = files(src).map((f) => ({ file: rel(f), imports: imports(f) }));

  it('reads every source file and its relative imports', () => {
    expect(all.length).toBeGreaterThan(100);
    expect(all.find((f) => f.file === 'storage-agent/agent.module.ts')?.imports).toContain('shared/http/redaction.ts');
  });

  it('every source file lives in one of the parts', () => {
    expect(all.filter((f) => partOf(f.file) === 'unplaced').map((f) => f.file)).toEqual([]);
  });

  it('no import crosses a process boundary', () => {
    const crossings = all.flatMap((f) => f.imports.filter((t) => !allowed(partOf(f.file), t)).map((t) => `${f.file} (${partOf(f.file)}) -> ${t} (${partOf(t)})`));
    expect(crossings).toEqual([]);
  });

  it('no code outside the repositories knows which storage engine runs', () => {
    const engineFile = (t: string) => /^control-plane\/repositories\/(pg\/|.*\/(file|pg)-[^/]+\.ts$)/.test(t);
    // The module that picks the engine imports them all (so the pattern does match engine files).
    expect(all.find((f) => f.file === 'control-plane/repositories/repositories.module.ts')!.imports.filter(engineFile).length).toBeGreaterThanOrEqual(12);
    const outside = all.filter((f) => !f.file.startsWith('control-plane/repositories/'));
    expect(outside.length).toBeGreaterThan(50);
    expect(outside.flatMap((f) => f.imports.filter(engineFile).map((t) => `${f.file} -> ${t}`))).toEqual([]);
    const pgUsers = all.filter((f) => /from 'pg'/.test(fs.readFileSync(path.join(src, f.file), 'utf8'))).map((f) => f.file);
    expect(pgUsers.length).toBeGreaterThan(0);
    expect(pgUsers.filter((f) => !f.startsWith('control-plane/repositories/'))).toEqual([]);
  });

  it('the rule does catch a crossing', () => {
    expect(allowed('storage-agent', 'control-plane/app.module.ts')).toBe(false);
    expect(allowed('control-plane', 'storage-agent/backends/lio.backend.ts')).toBe(false);
    expect(allowed('control-plane', 'shared/agent-contract/luns.dto.ts')).toBe(true);
    expect(allowed('shared', 'control-plane/config/app-config.ts')).toBe(false);
    expect(allowed('cli', 'control-plane/app.module.ts')).toBe(false);
  });
});
