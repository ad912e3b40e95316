import { LineCounter, parseDocument, isMap, isScalar } from 'yaml';
import type { FileStamp, FileSystem } from './file-system';

export class LedgerFileError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    detail: string,
  ) {
    super(`${file}:${line}: ${detail}`);
  }
}

export type Validator<T> = (key: string, value: unknown) => { ok: true; value: T } | { ok: false; error: string };

const ENTRY = /^ {2}("(?:[^"\\]|\\.)*"): (\{.*\})\s*$/;

/**
 * One ledger file (`state/devices.yml`, `state/workers.yml`): a YAML mapping under one root key.
 *
 * Written as one JSON-flow line per record (valid YAML 1.2): serialising reuses each record's
 * cached line, and loading takes a line-by-line JSON fast path, so a 10,000-entry ledger loads
 * and saves in milliseconds instead of the seconds a generic YAML round trip costs. Any other
 * YAML a human writes by hand is still accepted through the full parser.
 */
export class LedgerMap<T extends object> {
  private map = new Map<string, T>();
  /** Each record's serialised line, UTF-8 encoded once: a save is one Buffer.concat. */
  private lines = new Map<string, Buffer>();
  private stamp: FileStamp | null = null;
  /** Bumped when membership or any record changes through a transaction or reload. */
  version = 0;
  /** Records changed outside a transaction (report telemetry) that still need a flush. */
  dirty = false;
  /** Set when a hand edit made the file unreadable; mutations refuse until it is fixed. */
  corrupt: LedgerFileError | null = null;

  constructor(
    readonly file: string,
    private readonly root: string,
    private readonly header: string,
    private readonly validate: Validator<T>,
    private readonly fs: FileSystem,
  ) {}

  get size(): number {
    return this.map.size;
  }
  get(key: string): T | undefined {
    return this.map.get(key);
  }
  has(key: string): boolean {
    return this.map.has(key);
  }
  values(): IterableIterator<T> {
    return this.map.values();
  }
  entries(): IterableIterator<[string, T]> {
    return this.map.entries();
  }

  /** Loads the file (missing = empty); throws LedgerFileError naming file and line. */
  loadSync(): void {
    const text = this.fs.readTextSync(this.file);
    this.replace(text === null ? new Map() : this.parse(text));
    this.stamp = this.fs.statSync(this.file);
    this.corrupt = null;
  }

  /** Reloads if someone edited the file by hand since our last read or write. */
  refreshIfChanged(): boolean {
    const st = this.fs.statSync(this.file);
    if (sameStamp(st, this.stamp)) return false;
    try {
      const text = this.fs.readTextSync(this.file);
      this.replace(text === null ? new Map() : this.parse(text));
      this.corrupt = null;
    } catch (e) {
      if (!(e instanceof LedgerFileError)) throw e;
      this.corrupt = e;
    }
    this.stamp = st;
    return true;
  }

  /** Telemetry update outside the write lock; persisted by the next flush. */
  touch(key: string, value: T): void {
    this.map.set(key, value);
    this.lines.delete(key);
    this.dirty = true;
  }

  render(changes?: Map<string, T | undefined>): Buffer {
    const parts: Buffer[] = [Buffer.from(`${this.header}\n${this.root}:\n`)];
    let count = 0;
    const line = (k: string, v: T) => Buffer.from(`  ${JSON.stringify(k)}: ${JSON.stringify(v)}\n`);
    for (const [k, v] of this.map) {
      if (changes?.has(k)) {
        const nv = changes.get(k);
        if (nv !== undefined) {
          parts.push(line(k, nv));
          count++;
        }
        continue;
      }
      let l = this.lines.get(k);
      if (l === undefined) {
        l = line(k, v);
        this.lines.set(k, l);
      }
      parts.push(l);
      count++;
    }
    if (changes) {
      for (const [k, v] of changes) {
        if (!this.map.has(k) && v !== undefined) {
          parts.push(line(k, v));
          count++;
        }
      }
    }
    if (count === 0) return Buffer.from(`${this.header}\n${this.root}: {}\n`);
    return Buffer.concat(parts);
  }

  /** Writes the given content (from render) atomically and remembers the file's stamp. */
  async write(content: Buffer): Promise<void> {
    await this.fs.writeAtomic(this.file, content);
    this.stamp = this.fs.statSync(this.file);
  }

  /** Makes committed changes visible in memory (after the file write succeeded). */
  apply(changes: Map<string, T | undefined>): void {
    for (const [k, v] of changes) {
      this.lines.delete(k);
      if (v === undefined) this.map.delete(k);
      else this.map.set(k, v);
    }
    this.version++;
  }

  private replace(m: Map<string, T>): void {
    this.map = m;
    this.lines.clear();
    this.dirty = false;
    this.version++;
  }

  private parse(text: string): Map<string, T> {
    return this.parseFast(text) ?? this.parseYaml(text);
  }

  /** Our own format: header comments, `root:` line, then one `  "key": {json}` per line. */
  private parseFast(text: string): Map<string, T> | null {
    const lines = text.split('\n');
    const out = new Map<string, T>();
    let i = 0;
    while (i < lines.length && (lines[i].startsWith('#') || lines[i].trim() === '')) i++;
    if (i >= lines.length) return out;
    if (lines[i] === `${this.root}: {}`) {
      for (let j = i + 1; j < lines.length; j++) if (lines[j].trim() !== '') return null;
      return out;
    }
    if (lines[i] !== `${this.root}:`) return null;
    for (let j = i + 1; j < lines.length; j++) {
      const l = lines[j];
      if (l.trim() === '') continue;
      const m = ENTRY.exec(l);
      if (!m) return null;
      let key: string;
      let value: unknown;
      try {
        key = JSON.parse(m[1]);
        value = JSON.parse(m[2]);
      } catch {
        return null;
      }
      if (out.has(key)) throw new LedgerFileError(this.file, j + 1, `duplicate key ${JSON.stringify(key)}`);
      const r = this.validate(key, value);
      if (!r.ok) throw new LedgerFileError(this.file, j + 1, `${JSON.stringify(key)}: ${r.error}`);
      out.set(key, r.value);
    }
    return out;
  }

  private parseYaml(text: string): Map<string, T> {
    const lc = new LineCounter();
    const doc = parseDocument(text, { lineCounter: lc, uniqueKeys: true, prettyErrors: false });
    if (doc.errors.length) {
      const e = doc.errors[0];
      // Errors found at end of input point past the last line; name the last line instead.
      const lastLine = text.replace(/\s+$/, '').split('\n').length;
      throw new LedgerFileError(this.file, Math.min(lc.linePos(e.pos[0]).line, lastLine), e.message.split('\n')[0]);
    }
    const out = new Map<string, T>();
    const top = doc.contents;
    if (top === null || (isScalar(top) && top.value === null)) return out;
    if (!isMap(top)) throw new LedgerFileError(this.file, 1, `expected a mapping with key "${this.root}"`);
    const rootPair = top.items.find((p) => isScalar(p.key) && p.key.value === this.root);
    if (!rootPair) throw new LedgerFileError(this.file, 1, `missing top-level key "${this.root}"`);
    const body = rootPair.value;
    if (body === null || (isScalar(body) && body.value === null)) return out;
    if (!isMap(body)) {
      const pos = (body as { range?: number[] }).range?.[0] ?? 0;
      throw new LedgerFileError(this.file, lc.linePos(pos).line, `"${this.root}" must be a mapping`);
    }
    for (const pair of body.items) {
      const keyNode = pair.key as { range?: number[]; toJSON?: () => unknown } | null;
      const line = lc.linePos(keyNode?.range?.[0] ?? 0).line;
      const key = isScalar(pair.key) ? String(pair.key.value) : null;
      if (key === null) throw new LedgerFileError(this.file, line, 'keys must be scalars');
      const value = pair.value === null ? null : (pair.value as { toJSON(): unknown }).toJSON();
      const r = this.validate(key, value);
      if (!r.ok) throw new LedgerFileError(this.file, line, `${JSON.stringify(key)}: ${r.error}`);
      out.set(key, r.value);
    }
    return out;
  }
}

function sameStamp(a: FileStamp | null, b: FileStamp | null): boolean {
  if (a === null || b === null) return a === b;
  return a.mtimeMs === b.mtimeMs && a.size === b.size && a.ino === b.ino;
}
