import { createHash, type Hash } from 'node:crypto';
import { LineCounter, parseDocument, isMap, isScalar } from 'yaml';
import { decodeText, sameStamp, type AtomicFileWriter, type FileStamp, type FileSystem } from './file-system';
import { LineSplitter } from './line-splitter';
import { ownString } from '../string-pool';

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

/**
 * How a file's own checkpoints seal it, so that a start can take its entries without validating
 * each again. A checkpoint writes only records that passed the validator; a line among its
 * header comments names the grammar (the validators' version) and the SHA-256 of every byte
 * below that line. A start that finds the seal intact, under the grammar it runs, takes every
 * entry through `adopt` alone; any other file (a hand edit, another grammar, damage) is validated
 * entry by entry as before. At 100,000 seats the validation and the objects it rebuilds cost
 * ~0.4 s of a ~2.3 s start (bench:scale). In the header, the seal is a comment to any YAML reader
 * and to an older Kurrent's fast path alike.
 */
export interface Seal<T> {
  /** Bumped whenever the validator accepts or normalises differently (see records.ts). */
  grammar: number;
  /** A sealed record as JSON.parse made it, with only strings shared (content never changes). */
  adopt: (key: string, value: T) => T;
}

const SEAL_PREFIX = '# sealed by Kurrent: ';
const SEAL = /^# sealed by Kurrent: grammar (\d+), sha256 of the lines below ([0-9a-f]{64})$/;
const sealLine = (grammar: number, sha: string) => `${SEAL_PREFIX}grammar ${grammar}, sha256 of the lines below ${sha}\n`;

const ENTRY = /^ {2}("(?:[^"\\]|\\.)*"): (\{.*\})\s*$/;

/**
 * One ledger file (`state/devices.yml`, `state/workers.yml`): a YAML mapping under one root key.
 *
 * Written as one JSON-flow line per record (valid YAML 1.2): serialising reuses each record's
 * cached line, and loading takes a line-by-line JSON fast path, so a 10,000-entry ledger loads
 * and saves in milliseconds instead of the seconds a generic YAML round trip costs. Any other
 * YAML a human writes by hand is still accepted through the full parser.
 */
export type FileCheck<T> =
  | { kind: 'same' }
  | { kind: 'corrupt'; error: LedgerFileError }
  | { kind: 'changed'; theirs: Map<string, T>; text: string; stamp: FileStamp | null };

export interface MergeResult<T> {
  merged: Map<string, T>;
  /** Keys whose value differs from what memory held before the merge. */
  changed: string[];
  /** Keys both the hand edit and the control plane changed since the last checkpoint (the edit wins). */
  conflicts: string[];
}

/**
 * Line-cache values that are no line (a line is never empty): the record moved by telemetry since
 * the last checkpoint (MOVED), or it did not move through the last one, which rendered it without
 * keeping the line (QUIET: the next one keeps it). See lineOf.
 */
const MOVED = '';
const QUIET = ' ';

export class LedgerMap<T extends object> {
  private map = new Map<string, T>();
  /**
   * Each record's JSON, serialised once for the saves until it changes. A string, not a Buffer: a
   * short Buffer is a slice of Node's shared 8 KB pool, so the lines re-made after a storm's
   * telemetry kept ~4,000 slabs of other requests' garbage alive (36 MB for 21 MB of lines at
   * 100,000 seats), besides a 96-byte Buffer object each.
   */
  private lines = new Map<string, string>();
  /**
   * The records as the file on disk holds them (after our last load or write), by reference:
   * records are not mutated in place (touchInPlace aside, see inPlace), so `map.get(k) ===
   * base.get(k)` means "unchanged since the file was written". It is the common ancestor when a
   * hand edit is merged.
   */
  private base = new Map<string, T>();
  /**
   * Keys whose record was updated in place (telemetry) since the file was last loaded or merged:
   * their base entry may be that same object, newer than the file, so a merge compares the file's
   * copy with it by `facts` (what touchInPlace does not change). Over-inclusion only means a hand
   * edit of that telemetry alone is not taken; it is never cleared by a checkpoint, whose
   * snapshot may hold records touched while it was written.
   */
  private readonly inPlace = new Set<string>();
  private stamp: FileStamp | null = null;
  /** The stamp of the file that was found corrupt: not parsed again until it changes. */
  private corruptStamp: FileStamp | null = null;
  /** Bumped when membership or any record changes through a transaction or reload. */
  version = 0;
  private dirty = new Set<string>();
  /** Keys changed by report telemetry (outside a transaction) that the change log does not hold yet. */
  get dirtyKeys(): Set<string> {
    return this.dirty;
  }

  /**
   * The dirty keys, handed over whole to the telemetry flush that logs them; touches from here on
   * go to a new set. Copying them and deleting each once logged rebuilt the set's table as it
   * shrank, twice a second, and a storm's tables outlive the young generation (~25 MB of old
   * garbage in a 20 s storm at 100,000 seats). A touch while they are logged lands in the new set,
   * so the next flush logs it too.
   */
  takeDirty(): Set<string> {
    const taken = this.dirty;
    this.dirty = new Set();
    return taken;
  }

  /** Keys taken by takeDirty whose logging failed: dirty again. */
  restoreDirty(keys: Iterable<string>): void {
    for (const k of keys) this.dirty.add(k);
  }
  /** Memory holds something the file does not (a checkpoint is due). */
  stale = false;
  /** Set when a hand edit made the file unreadable; every write refuses until it is fixed. */
  corrupt: LedgerFileError | null = null;

  constructor(
    readonly file: string,
    private readonly root: string,
    private readonly header: string,
    private readonly validate: Validator<T>,
    private readonly fs: FileSystem,
    /** A record without the fields touchInPlace may change (default: all of it). */
    private readonly facts: (v: T) => string = (v) => JSON.stringify(v),
    /** Set: checkpoints seal the file, and a start takes a sealed file without validating it. */
    private readonly seal?: Seal<T>,
  ) {}

  /** Whether the last loadSync took the file through its seal (not validating each entry). */
  loadedSealed = false;

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

  /** SHA-256 of the file's text as this process last read, wrote or adopted it ('' when absent). */
  knownSha = '';
  /**
   * Loaded from its file, whose checkpoints render the lines (the file store). A map filled
   * otherwise (PostgreSQL) renders none, and a touch leaves its line cache alone (markMoved).
   */
  private fromFile = false;

  /**
   * What knownSha holds for these bytes: the SHA-256 of the whole file, or for a map that seals
   * its files and a file with a seal line in its header, of what follows that line (what a
   * checkpoint can hash as it writes; the comments above it carry no record).
   */
  private contentSha(bytes: Buffer): string {
    if (!this.seal) return sha256(bytes);
    const check = new SealCheck();
    check.push(bytes);
    return check.result()?.sha ?? sha256(bytes);
  }

  /** Loads the file (missing = empty); throws LedgerFileError naming file and line. */
  loadSync(): void {
    this.fromFile = true;
    // Read in chunks, hashed and cut into lines as they come (no 45 MB Buffer or string at 100,000
    // entries). A file our fast path does not take (a hand-written YAML layout) is read again whole.
    const hash = createHash('sha256');
    // With a seal, entries are checked once the whole file is read (the seal covers every byte).
    const sealed = this.seal ? new SealCheck() : null;
    const fast = new FastParse<T>(this.file, this.root, this.validate, this.seal);
    const lines = new LineSplitter((l) => fast.line(l));
    const found = this.fs.readChunksSync(this.file, (chunk) => {
      sealed?.push(chunk);
      // A file with a seal line is known by the hash below it (contentSha): one hash of its bytes, not two.
      if (!sealed?.found) hash.update(chunk);
      if (!fast.failed) lines.push(chunk);
    });
    let m: Map<string, T>;
    this.loadedSealed = false;
    if (!found) {
      this.knownSha = '';
      m = new Map();
    } else {
      lines.end();
      const seal = sealed?.result() ?? null;
      const held = !fast.failed && seal !== null && seal.grammar === this.seal!.grammar;
      fast.finish(held);
      this.loadedSealed = held;
      this.knownSha = seal?.sha ?? hash.digest('hex');
      const fastResult = fast.result();
      if (fastResult) m = fastResult;
      else {
        // One read for both the hash and the parse: they must describe the same bytes.
        const bytes = this.fs.readBytesSync(this.file);
        this.knownSha = bytes === null ? '' : this.contentSha(bytes);
        m = bytes === null ? new Map<string, T>() : this.parse(decodeText(bytes));
      }
    }
    this.map = m;
    this.base = new Map(m);
    this.inPlace.clear();
    this.lines.clear();
    this.dirtyKeys.clear();
    this.stale = false;
    this.version++;
    this.stamp = this.fs.statSync(this.file);
    this.corrupt = null;
  }

  /** Validates a record of the change log against this file's grammar. */
  check(key: string, value: unknown): T {
    const r = this.validate(key, value);
    if (!r.ok) throw new Error(`${JSON.stringify(key)}: ${r.error}`);
    return r.value;
  }

  /** Whether a stamp taken of the file (asynchronously) says it changed since our last load or write. */
  differs(st: FileStamp | null): boolean {
    if (sameStamp(st, this.stamp)) return false;
    return !(this.corrupt && this.corruptStamp && sameStamp(st, this.corruptStamp));
  }

  /** Has someone written the file since our last load or write? Reads and parses it if so. */
  checkFile(): FileCheck<T> {
    const st = this.fs.statSync(this.file);
    if (sameStamp(st, this.stamp)) return { kind: 'same' };
    if (this.corrupt && this.corruptStamp && sameStamp(st, this.corruptStamp)) return { kind: 'corrupt', error: this.corrupt };
    const text = this.fs.readTextSync(this.file);
    try {
      return { kind: 'changed', theirs: text === null ? new Map() : this.parse(text), text: text ?? '', stamp: st };
    } catch (e) {
      if (!(e instanceof LedgerFileError)) throw e;
      this.markCorrupt(e, st);
      return { kind: 'corrupt', error: e };
    }
  }

  /** Blocks writes until the file changes again (a parse error or a broken invariant). */
  markCorrupt(error: LedgerFileError, stamp: FileStamp | null = this.fs.statSync(this.file)): void {
    this.corrupt = error;
    this.corruptStamp = stamp;
  }

  /**
   * Three-way merge of a hand-edited file (theirs) with memory (ours) against the last written
   * content (base), key by key: a key only one side changed takes that side; a key both changed
   * takes the hand edit (the operator's explicit intent) and is reported as a conflict.
   */
  merge(theirs: Map<string, T>): MergeResult<T> {
    const merged = new Map<string, T>();
    const changed: string[] = [];
    const conflicts: string[] = [];
    const keys = new Set<string>([...this.map.keys(), ...theirs.keys(), ...this.base.keys()]);
    const same = (a: T | undefined, b: T | undefined) => a === b || (a !== undefined && b !== undefined && JSON.stringify(a) === JSON.stringify(b));
    for (const k of keys) {
      const b = this.base.get(k);
      const o = this.map.get(k);
      const t = theirs.get(k);
      let v: T | undefined;
      // A record touched in place is its own base: the file's copy is "unchanged" when its facts are.
      if (this.inPlace.has(k) && o === b && t !== undefined && b !== undefined ? this.facts(t) === this.facts(b) : same(t, b)) v = o;
      else if (same(o, b)) v = t;
      else {
        v = t;
        if (!same(t, o)) conflicts.push(k);
      }
      if (v !== undefined) merged.set(k, v === t && o !== undefined && same(t, o) ? o : v);
      if (!same(v, o)) changed.push(k);
    }
    return { merged, changed, conflicts };
  }

  /** Makes a merged hand edit current; the file now holds `theirs`. */
  adopt(merged: Map<string, T>, theirs: Map<string, T>, stamp: FileStamp | null, changed: string[], text: string): void {
    this.knownSha = this.contentSha(Buffer.from(text));
    this.map = merged;
    this.base = theirs;
    this.inPlace.clear();
    this.stamp = stamp;
    for (const k of changed) this.lines.delete(k);
    this.corrupt = null;
    this.stale = true;
    this.version++;
  }

  /** Telemetry update outside the write lock; logged by the next telemetry flush. */
  touch(key: string, value: T): void {
    this.map.set(key, value);
    this.markMoved(key);
    this.dirtyKeys.add(key);
    this.stale = true;
  }

  /**
   * Telemetry that changes one field of the record in memory, in place: every boot of a known
   * machine moves its last_seen, and a clone per report would leave the old copy, long promoted,
   * as old-generation garbage (issue 27). Logged by the next telemetry flush like touch().
   */
  touchInPlace(key: string, current: T, update: (record: T) => void): void {
    if (this.map.get(key) !== current) throw new Error(`touchInPlace: ${key} is not the record in memory`);
    // Kept until the next load: a copy of the key, not a view of the request's query (ownString).
    if (!this.inPlace.has(key)) this.inPlace.add(ownString(key));
    update(current);
    this.markMoved(key);
    this.dirtyKeys.add(key);
    this.stale = true;
  }

  /**
   * Telemetry another control plane already made durable (PostgreSQL), applied to the record in
   * memory: nothing for this process to write, so neither dirty nor stale. `update` changes it in
   * place and must leave what caches key on by identity (search texts: fingerprint, uuid) alone;
   * a record whose fingerprint or uuid moved is replaced (refreshed) instead.
   */
  refreshInPlace(key: string, current: T, update: (record: T) => void): void {
    if (this.map.get(key) !== current) throw new Error(`refreshInPlace: ${key} is not the record in memory`);
    update(current);
    this.markMoved(key);
  }

  /** Like refreshInPlace, for a new record object (see there). */
  refresh(key: string, value: T): void {
    if (!this.map.has(key)) throw new Error(`refresh: ${key} is not in memory`);
    this.map.set(key, value);
    this.markMoved(key);
  }

  /**
   * Marks the record's line stale without dropping its entry (see lineOf). Not on a map that
   * renders no lines (PostgreSQL): an entry per touched device would sit there until the next
   * load (~5 MB after a storm at 100,000 seats). On the file store also before the first
   * checkpoint, so that checkpoint keeps no line of a record a storm is moving.
   */
  private markMoved(key: string): void {
    if (this.fromFile || this.lines.has(key)) this.lines.set(key, MOVED);
  }

  /** A change-log record's value for key, applied at start (replay). */
  replay(key: string, value: T | undefined): void {
    this.lines.delete(key);
    if (value === undefined) this.map.delete(key);
    else this.map.set(key, value);
    this.stale = true;
    this.version++;
  }

  render(changes?: Map<string, T | undefined>): Buffer {
    const out = new TextChunks();
    out.add(`${this.root}:\n`);
    let count = 0;
    for (const [k, v] of this.map) {
      if (changes?.has(k)) {
        const nv = changes.get(k);
        if (nv !== undefined) {
          out.line(k, JSON.stringify(nv));
          count++;
        }
        continue;
      }
      out.line(k, this.lineOf(k, v));
      count++;
    }
    if (changes) {
      for (const [k, v] of changes) {
        if (!this.map.has(k) && v !== undefined) {
          out.line(k, JSON.stringify(v));
          count++;
        }
      }
    }
    if (count === 0) return Buffer.from(`${this.header}\n${this.root}: {}\n`);
    const body = out.bytes();
    return Buffer.concat([Buffer.from(`${this.header}\n${this.seal ? sealLine(this.seal.grammar, sha256(body)) : ''}`), body]);
  }

  /**
   * Checkpoint: writes memory atomically. The base becomes what was rendered; a telemetry touch
   * that lands during the write keeps the file stale.
   */
  async checkpoint(): Promise<void> {
    const snapshot = new Map(this.map);
    // Telemetry touched from here on (the render lets it in between slices) keeps the file stale.
    this.stale = false;
    try {
      const w = await this.fs.openAtomic(this.file, 0o644);
      let sha: string;
      try {
        sha = await this.writeInSlices(snapshot, w);
      } catch (e) {
        await w.abort();
        throw e;
      }
      // Re-checked right before the rename: a hand edit that lands while this is written is
      // merged by the caller and the checkpoint written again, never replaced.
      await w.commit({ durable: true, unchangedSince: this.stamp });
      this.knownSha = sha;
    } catch (e) {
      this.stale = true;
      throw e;
    }
    this.stamp = this.fs.statSync(this.file);
    // inPlace is kept: a record touched in place during the write is in the snapshot, newer than the file.
    this.base = snapshot;
  }

  /**
   * Writes the checkpoint's text (render's) to `w` and returns its SHA-256, CHECKPOINT_SLICE
   * records a turn of the event loop: at 100,000 devices one turn took ~0.5 s and the GC after it
   * as much again, and every boot answer waited (a storm's p99, a fleet-wide push's). Each slice's
   * bytes go to the file before the next is rendered: the 45 MB of a 100,000-device file were held
   * until the end, once a second in a storm (its telemetry), garbage outside the heap that only a
   * full GC gave back (bench:scale, RSS after the storm). Iterates the snapshot; a line is kept in
   * the cache only while its record is still the one in memory (telemetry may land meanwhile).
   */
  private async writeInSlices(snapshot: Map<string, T>, w: AtomicFileWriter): Promise<string> {
    const hash = createHash('sha256');
    if (snapshot.size === 0) {
      const bytes = Buffer.from(`${this.header}\n${this.root}: {}\n`);
      await w.write(bytes);
      return hash.update(bytes).digest('hex');
    }
    const out = new TextChunks(hash);
    let sealAt = -1;
    if (this.seal) {
      // The seal's hash is that of the bytes below it, known once they are written: its digits are written over then.
      const head = Buffer.from(`${this.header}\n${sealLine(this.seal.grammar, '0'.repeat(64))}`);
      await w.write(head);
      sealAt = head.length - 65;
      out.add(`${this.root}:\n`);
    } else out.add(`${this.header}\n${this.root}:\n`);
    let n = 0;
    for (const [k, v] of snapshot) {
      if (++n % CHECKPOINT_SLICE === 0) {
        for (const part of out.take()) await w.write(part);
        await new Promise((r) => setImmediate(r));
      }
      out.line(k, this.lineOf(k, v));
    }
    for (const part of out.chunks()) await w.write(part);
    const sha = hash.digest('hex');
    if (sealAt >= 0) await w.writeAt(sealAt, Buffer.from(sha));
    return sha;
  }

  /**
   * The record's JSON line, from the cache when it holds it. A line is kept only for a record that
   * did not move through a whole checkpoint: in a storm each seat's last_seen moves again within
   * seconds, and each line kept for it lived until that touch, outlived the young generation and
   * died in the old one (~60 MB in a 20 s storm at 100,000 seats, bench:scale). A moved
   * record's entry stays in the map (MOVED, then QUIET) rather than being deleted and added
   * again, so the map's table is not rebuilt as it shrinks and grows. Nothing is cached for a
   * record that is no longer the one in memory (a checkpoint iterates its snapshot across awaits).
   */
  private lineOf(k: string, v: T): string {
    const cached = this.lines.get(k);
    if (cached !== undefined && cached !== MOVED && cached !== QUIET) return cached;
    const json = JSON.stringify(v);
    if (this.map.get(k) !== v) return json;
    if (cached === MOVED) this.lines.set(k, QUIET);
    else this.lines.set(k, json);
    return json;
  }

  /** Makes committed changes visible in memory (after the change log holds them). */
  apply(changes: Map<string, T | undefined>): void {
    for (const [k, v] of changes) {
      this.lines.delete(k);
      if (v === undefined) this.map.delete(k);
      else this.map.set(k, v);
    }
    if (changes.size) this.stale = true;
    this.version++;
  }

  private parse(text: string): Map<string, T> {
    return this.parseFast(text) ?? this.parseYaml(text);
  }

  /** Our own format: header comments, `root:` line, then one `  "key": {json}` per line. */
  private parseFast(text: string): Map<string, T> | null {
    const fast = new FastParse<T>(this.file, this.root, this.validate);
    for (const l of text.split('\n')) if (!fast.line(l)) return null;
    return fast.result();
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

/** The 1-based line where key's entry starts in a ledger file's text (for error messages). */
export function lineOfKey(text: string, key: string): number {
  const lines = text.split('\n');
  const quoted = JSON.stringify(key);
  for (let i = 0; i < lines.length; i++) {
    const t = lines[i].trimStart();
    if (t.startsWith(`${quoted}:`) || t.startsWith(`${key}:`) || t.startsWith(`'${key}':`)) return i + 1;
  }
  return 1;
}



const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest('hex');


/**
 * The fast path of a ledger file, fed line by line: header comments, `root:` (or `root: {}`), then
 * one `  "key": {json}` per line. failed: not our layout (the caller parses it as YAML); a bad entry
 * throws LedgerFileError naming its line.
 */
class FastParse<T> {
  failed = false;
  private readonly out = new Map<string, T>();
  private state: 'head' | 'empty' | 'body' = 'head';
  private lineNo = 0;
  /** With a seal: each entry's line, to validate them all by finish() when the seal does not hold. */
  private readonly lineNos: number[] | null;

  constructor(
    private readonly file: string,
    private readonly root: string,
    private readonly validate: Validator<T>,
    /** Set: entries are taken through seal.adopt as they come and validated (or not) by finish(). */
    private readonly seal?: Seal<T>,
  ) {
    this.lineNos = seal ? [] : null;
  }

  /** False once the text is not our layout. */
  line(l: string): boolean {
    if (this.failed) return false;
    this.lineNo++;
    if (this.state === 'head') {
      if (l.startsWith('#') || l.trim() === '') return true;
      if (l === `${this.root}: {}`) this.state = 'empty';
      else if (l === `${this.root}:`) this.state = 'body';
      else this.failed = true;
      return !this.failed;
    }
    if (l.trim() === '') return true;
    if (this.state === 'empty') {
      this.failed = true;
      return false;
    }
    // `  "key": {json}`: a key without escapes (every MAC and worker id) is cut out with
    // indexOf, which at 10,000 lines costs a fraction of the regular expression it replaces.
    let keyText: string;
    let valueText: string;
    const end = l.indexOf('": {', 3);
    if (l.startsWith('  "') && end > 0 && l.lastIndexOf('\\', end) < 0) {
      keyText = l.slice(2, end + 1);
      valueText = l.slice(end + 3);
    } else {
      const m = ENTRY.exec(l);
      if (!m) {
        this.failed = true;
        return false;
      }
      [, keyText, valueText] = m;
    }
    let key: string;
    let value: unknown;
    try {
      key = JSON.parse(keyText);
      value = JSON.parse(valueText);
    } catch {
      this.failed = true;
      return false;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      this.failed = true;
      return false;
    }
    if (this.out.has(key)) throw new LedgerFileError(this.file, this.lineNo, `duplicate key ${JSON.stringify(key)}`);
    if (this.lineNos) {
      // adopt only shares strings: validating the adopted value later gives what validating it now would.
      this.out.set(key, this.seal!.adopt(key, value as T));
      this.lineNos.push(this.lineNo);
      return true;
    }
    const r = this.validate(key, value);
    if (!r.ok) throw new LedgerFileError(this.file, this.lineNo, `${JSON.stringify(key)}: ${r.error}`);
    this.out.set(key, r.value);
    return true;
  }

  /** With a seal, once the file is read: unless it held, every entry is validated now, in file order, as line() would have. */
  finish(sealHeld: boolean): void {
    if (!this.lineNos || this.failed || sealHeld) return;
    let i = 0;
    for (const [key, value] of this.out) {
      const r = this.validate(key, value);
      if (!r.ok) throw new LedgerFileError(this.file, this.lineNos[i], `${JSON.stringify(key)}: ${r.error}`);
      this.out.set(key, r.value);
      i++;
    }
  }

  /** The entries, or null when the text was not our layout. */
  result(): Map<string, T> | null {
    return this.failed ? null : this.out;
  }
}

/**
 * A file read in chunks: its seal line, looked for among the comments that open it (in the first
 * chunk), and the SHA-256 of every byte after that line. The chunks may be reused by the reader.
 */
class SealCheck {
  private readonly hash = createHash('sha256');
  private state: 'first' | 'after' | 'none' = 'first';
  private line = '';

  /** A seal line was found (after the first chunk): the file is hashed from below it. */
  get found(): boolean {
    return this.state === 'after';
  }

  push(chunk: Buffer): void {
    if (this.state === 'after') this.hash.update(chunk);
    if (this.state !== 'first') return;
    this.state = 'none';
    // Comment lines from the start; the seal is one of them, before the root key.
    for (let start = 0; start < chunk.length && chunk[start] === 35 /* # */; ) {
      const nl = chunk.indexOf(10, start);
      if (nl < 0) return;
      if (chunk.toString('latin1', start, start + SEAL_PREFIX.length) === SEAL_PREFIX) {
        this.line = chunk.toString('latin1', start, nl);
        this.state = 'after';
        this.hash.update(chunk.subarray(nl + 1));
        return;
      }
      start = nl + 1;
    }
  }

  /** The seal line's grammar (null: not a well-formed seal, or its hash is not that of the bytes below it) and those bytes' SHA-256; null without a seal line. */
  result(): { grammar: number | null; sha: string } | null {
    if (this.state !== 'after') return null;
    const sha = this.hash.digest('hex');
    const m = SEAL.exec(this.line);
    return { grammar: m && m[2] === sha ? Number(m[1]) : null, sha };
  }
}

/** Records a checkpoint renders per turn of the event loop. */
const CHECKPOINT_SLICE = 500;

/** Text encoded a chunk at a time (~64 KB each): one rope and one Buffer per chunk, not per line. */
class TextChunks {
  private readonly parts: Buffer[] = [];
  private chunk = '';

  /** hash: fed each chunk's bytes as it is cut. */
  constructor(private readonly hash?: Hash) {}

  add(text: string): void {
    this.chunk += text;
    if (this.chunk.length >= 65_536) this.cut();
  }

  /** One ledger line: `  "key": {json}`. */
  line(key: string, json: string): void {
    this.add(`  ${JSON.stringify(key)}: ${json}\n`);
  }

  bytes(): Buffer {
    this.cut();
    return Buffer.concat(this.parts);
  }

  /** The chunks themselves, the text not yet cut included (a checkpoint writes them as they are: no 45 MB copy in one turn). */
  chunks(): Buffer[] {
    this.cut();
    return this.take();
  }

  /** The chunks cut so far, handed over (the text not yet cut stays). */
  take(): Buffer[] {
    return this.parts.splice(0);
  }

  private cut(): void {
    if (this.chunk.length) {
      const part = Buffer.from(this.chunk, 'utf8');
      this.parts.push(part);
      this.hash?.update(part);
    }
    this.chunk = '';
  }
}
