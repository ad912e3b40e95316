import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { LedgerFileError } from '../../../shared/files/ledger-map';
import { Clock } from '../../common/clock';
import { AppConfig } from '../../config/app-config';
import { AuditEntry, AuditFields, AuditPage, AuditPruned, AuditQuery, AuditRepository, newEntry, TxAudit } from './audit.repository';

/** A closed part of the trail: `operations.<first id>-<last id>.jsonl` beside operations.jsonl. */
interface Segment {
  first: number;
  last: number;
  file: string;
}
const SEGMENT = /^operations\.(\d+)-(\d+)\.jsonl$/;

/**
 * The file audit trail (state/operations.jsonl). Ids keep increasing across restarts: the last id
 * is read back from the file's tail at start. A torn last line (a kill or a full disk mid-append)
 * is cut at start and logged, never glued to the next entry.
 *
 * Appends are group-committed: entries queued while one write + fdatasync runs go out together in
 * the next. A failed append is cut back to the previous length and its entries stay queued, in id
 * order, and are retried (every second, and before any newer entry) until the disk takes them
 * again; record() still resolves then, because the change it describes is already committed. So
 * an entry is lost only if the process dies while the disk is full.
 */
@Injectable()
export class FileAuditRepository extends AuditRepository implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Audit');
  readonly file: string;
  private lastId = 0;
  /** In id order. line null: a slot reserved by a ledger commit whose change-log record is not yet durable. */
  private pending: { id: number; line: string | null; done: () => void }[] = [];
  /** Every entry up to this id is in the file. */
  private durableId = 0;
  private loaded: Promise<void> | null = null;
  private writing: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private failing = false;
  /** Closed segments, oldest first. */
  private segments: Segment[] = [];
  private readonly segmentBytes: number;
  private activeBytes = 0;
  /** Reads under way: a segment is neither closed nor dropped under them. */
  private readers = 0;
  private pruning: Promise<unknown> | null = null;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    private readonly clock: Clock,
  ) {
    super();
    this.file = path.join(config.stateDir, 'operations.jsonl');
    this.segmentBytes = config.auditSegmentBytes ?? 64 * 1024 * 1024;
  }

  /** Idempotent: the ledger repository calls it first, to recover the entries its change log carries. */
  onModuleInit(): Promise<void> {
    return (this.loaded ??= this.load());
  }

  private async load(): Promise<void> {
    const dir = path.dirname(this.file);
    for (const name of await this.fs.listDir(dir)) {
      const m = SEGMENT.exec(name);
      if (m) this.segments.push({ first: Number(m[1]), last: Number(m[2]), file: path.join(dir, name) });
    }
    this.segments.sort((a, b) => a.first - b.first);
    await this.loadTail();
    // A kill right after a segment was closed leaves operations.jsonl missing: ids go on after it.
    this.lastId = Math.max(this.lastId, this.segments.at(-1)?.last ?? 0);
    this.durableId = this.lastId;
    this.activeBytes = this.fs.statSync(this.file)?.size ?? 0;
  }

  private async loadTail(): Promise<void> {
    const tail = this.fs.readTailSync(this.file, 64 * 1024);
    if (!tail) return;
    const total = this.fs.statSync(this.file)?.size ?? 0;
    if (!tail.endsWith('\n')) {
      const cut = tail.lastIndexOf('\n');
      const keep = total - Buffer.byteLength(cut < 0 ? tail : tail.slice(cut + 1), 'utf8');
      if (cut < 0 && total > tail.length) {
        throw new LedgerFileError(this.file, 1, 'last audit line is longer than 64 KiB and unterminated');
      }
      this.fs.truncateSync(this.file, keep);
      this.log.warn(`${this.file}: cut a torn last line (${total - keep} bytes, never acknowledged)`);
    }
    // The highest id in the tail: unparsable lines (glued by an old writer, edited by hand) are
    // skipped by GET /operations and only their ids are taken into account here.
    const lines = (cutTail(tail) ?? '').split('\n').filter((l) => l.trim() !== '');
    for (const l of lines) {
      let id: unknown;
      try {
        id = (JSON.parse(l) as { id?: unknown }).id;
      } catch {
        for (const m of l.matchAll(/"id":(\d+)/g)) this.lastId = Math.max(this.lastId, Number(m[1]));
        continue;
      }
      if (typeof id === 'number' && Number.isSafeInteger(id) && id > this.lastId) this.lastId = id;
    }
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    await this.drain().catch(() => undefined);
  }

  record(op: string, fields: AuditFields = {}): Promise<AuditEntry> {
    const entry = { id: ++this.lastId, ...newEntry(this.clock.isoNow(), op, fields) } as AuditEntry;
    for (const t of this.taps) t(entry);
    const line = JSON.stringify(entry) + '\n';
    return new Promise((resolve) => {
      this.pending.push({ id: entry.id, line, done: () => resolve(entry) });
      this.kick();
    });
  }

  // ---- Entries carried by a ledger commit: ids are reserved before the change-log record is
  // written (the record carries the entries), the slots hold back every later entry until the
  // record is durable, then they go out in id order. A kill in between is repaired at start from
  // the change log (recover); a commit that fails cancels its slots (the ids are skipped).

  /** Reserves ids for a commit's entries, in order, and returns them (their slots wait for fill). */
  reserve(items: TxAudit[]): AuditEntry[] {
    return items.map(({ op, fields }) => {
      const entry = { id: ++this.lastId, ...newEntry(this.clock.isoNow(), op, fields) } as AuditEntry;
      this.pending.push({ id: entry.id, line: null, done: () => undefined });
      return entry;
    });
  }

  /** The commit is durable: its entries go out; resolves once they are on disk (or queued for retry). */
  fill(entries: AuditEntry[]): Promise<void> {
    const ids = new Map(entries.map((e) => [e.id, e]));
    const waits: Promise<void>[] = [];
    for (const p of this.pending) {
      const e = ids.get(p.id);
      if (!e || p.line !== null) continue;
      p.line = JSON.stringify(e) + '\n';
      waits.push(new Promise((resolve) => (p.done = resolve)));
      for (const t of this.taps) t(e);
    }
    this.kick();
    return Promise.all(waits).then(() => undefined);
  }

  /** The commit failed: its slots are dropped. */
  cancel(entries: AuditEntry[]): void {
    const ids = new Set(entries.map((e) => e.id));
    this.pending = this.pending.filter((p) => !ids.has(p.id));
    this.kick();
  }

  /** Other logs that carry entries of their commits (the credential log): read by recover. */
  private readonly carriers: (() => AuditEntry[])[] = [];

  /**
   * Registers another log whose commits carry their entries (reserve/fill). Its entries are
   * recovered by the same recover call as the ledger's, so the file stays in id order when a
   * kill left entries of both behind.
   */
  addCarrier(carried: () => AuditEntry[]): void {
    this.carriers.push(carried);
  }

  /**
   * At start, under the state lock (the ledger calls it): the entries of committed changes that
   * never reached the file, from the change log (entries) and every carrier, in id order.
   */
  async recover(entries: AuditEntry[]): Promise<number> {
    await this.onModuleInit();
    const all = new Map<number, AuditEntry>();
    for (const e of [...entries, ...this.carriers.flatMap((c) => c())]) all.set(e.id, e);
    const queued = new Set(this.pending.map((p) => p.id));
    const missing = [...all.values()].filter((e) => e.id > this.durableId && !queued.has(e.id));
    if (!missing.length) return 0;
    // Queued like any entry: in id order, ahead of every later one, and on a full disk kept and
    // retried (the logs that carry them keep them until durableThrough says they are written).
    this.lastId = Math.max(this.lastId, ...missing.map((e) => e.id));
    const done = missing.map((e) => new Promise<void>((resolve) => this.pending.push({ id: e.id, line: JSON.stringify(e) + '\n', done: resolve })));
    this.pending.sort((x, y) => x.id - y.id);
    this.log.warn(`${missing.length} audit entr(ies) of committed changes recovered from the change logs`);
    this.kick();
    await Promise.all(done);
    return missing.length;
  }

  /** True once every entry up to id is in the file (waits for the write under way). */
  async durableThrough(id: number): Promise<boolean> {
    for (let i = 0; i < 3 && this.durableId < id && this.writing; i++) await this.writing;
    return this.durableId >= id;
  }

  async restore(entries: AuditEntry[]): Promise<void> {
    await this.drain();
    if (!entries.length) return;
    const data = entries.map((e) => JSON.stringify(e) + '\n').join('');
    await this.fs.appendDurable(this.file, data);
    this.activeBytes += Buffer.byteLength(data);
    this.lastId = Math.max(this.lastId, ...entries.map((e) => e.id));
    this.durableId = this.lastId;
  }

  /** Waits until every queued entry was written or failed (and stays queued). */
  private async drain(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private kick(): void {
    if (this.writing || !this.pending.length || this.pending[0].line === null) return;
    this.writing = this.writeBatch().finally(() => {
      this.writing = null;
      if (this.pending.length && !this.failing) this.kick();
    });
  }

  private async writeBatch(): Promise<void> {
    // The filled prefix: a reserved slot holds back every later entry (ids reach the file in order).
    let n = 0;
    while (n < this.pending.length && this.pending[n].line !== null) n++;
    const batch = this.pending.slice(0, n);
    try {
      const data = batch.map((b) => b.line).join('');
      await this.fs.appendDurable(this.file, data);
      this.activeBytes += Buffer.byteLength(data);
      this.pending.splice(0, batch.length);
      this.durableId = Math.max(this.durableId, batch[batch.length - 1].id);
      if (this.failing) this.log.log(`audit log writable again; ${batch.length} queued entr(ies) written`);
      this.failing = false;
      for (const b of batch) b.done();
      if (this.activeBytes >= this.segmentBytes) await this.closeSegment();
    } catch (err) {
      if (!this.failing) this.log.error({ err }, `audit append failed; ${batch.length} entr(ies) kept in order and retried`);
      this.failing = true;
      // The change each entry describes is committed: do not fail its request, retry the entry.
      for (const b of batch) b.done();
      for (const b of batch) b.done = () => undefined;
      if (!this.retryTimer) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          this.failing = false;
          this.kick();
        }, 1000);
        this.retryTimer.unref?.();
      }
    }
  }

  /**
   * Closes operations.jsonl as a segment (only between writes, and not under a read: the next
   * write tries again). Its first id is read from its first line; its last is the last written.
   */
  private async closeSegment(): Promise<void> {
    if (this.readers > 0 || this.pruning) return;
    try {
      let first: number | null = null;
      for await (const line of this.fs.readLines(this.file)) {
        first = parseLine(line)?.id ?? null;
        if (first !== null) break;
      }
      if (first === null) return;
      const seg = { first, last: this.durableId, file: path.join(path.dirname(this.file), `operations.${first}-${this.durableId}.jsonl`) };
      await this.fs.renameDurable(this.file, seg.file);
      this.segments.push(seg);
      this.activeBytes = 0;
    } catch (err) {
      this.log.warn(`audit segment not closed (tried again after the next write): ${(err as Error).message}`);
    }
  }

  /**
   * Drops the oldest segments whose every entry is older than `before` and at or below
   * `keepAbove`; operations.jsonl itself is never dropped. Skipped (null) while a read runs.
   */
  prune(before: number, keepAbove: number): Promise<AuditPruned | null> {
    if (this.readers > 0 || this.pruning) return Promise.resolve(null);
    const run = (async (): Promise<AuditPruned | null> => {
      await this.onModuleInit();
      let from: number | null = null;
      let through = 0;
      while (this.segments.length) {
        const seg = this.segments[0];
        if (seg.last > keepAbove) break;
        const last = lastEntry(await this.fs.readRange(seg.file, Math.max(0, (this.fs.statSync(seg.file)?.size ?? 0) - WINDOW), WINDOW));
        const at = last ? Date.parse(last.ts) : NaN;
        if (!(at < before)) break;
        await this.fs.removeDurable(seg.file);
        this.segments.shift();
        from ??= seg.first;
        through = seg.last;
      }
      return from === null ? null : { from_id: from, through_id: through };
    })();
    this.pruning = run.finally(() => (this.pruning = null));
    return run;
  }

  /** One process owns the files: its own holds are all there are. */
  async publishHold(): Promise<void> {}

  /**
   * GET /operations without reading the audit from its start: ids grow with the position in the
   * file, so `since` is found by bisecting byte offsets (a few 64 KiB reads whatever the length),
   * and `tail` reads backwards from the end until it has its N matches.
   */
  async list(opts: AuditQuery & { since: number; limit: number }): Promise<AuditPage> {
    this.readers++;
    try {
      while (this.pruning) await this.pruning;
      await this.drain();
      const match = entryFilter(opts);
      // The trail in order: closed segments, then operations.jsonl.
      const files = [...this.segments.filter((s) => s.last > opts.since).map((s) => s.file), this.file];
      const entries = opts.tail ? await this.lastMatches(files, opts.tail, opts.since, match) : await this.firstMatches(files, opts.limit, opts.since, match);
      return { next_cursor: entries.length ? entries[entries.length - 1].id : opts.since, entries };
    } finally {
      this.readers--;
    }
  }

  private async firstMatches(files: string[], limit: number, since: number, match: (e: AuditEntry) => boolean): Promise<AuditEntry[]> {
    const entries: AuditEntry[] = [];
    for (const [i, file] of files.entries()) {
      const from = i === 0 && since > 0 ? await this.offsetBefore(file, since) : 0;
      let first = from > 0;
      for await (const line of this.fs.readLines(file, from)) {
        // A start inside a line: its rest is not an entry.
        if (first) {
          first = false;
          continue;
        }
        const e = parseLine(line);
        if (!e || !(e.id > since) || !match(e)) continue;
        entries.push(e);
        if (entries.length >= limit) return entries;
      }
    }
    return entries;
  }

  /** A byte offset at or before the line of the first entry with an id above `since` (0: the start). */
  private async offsetBefore(file: string, since: number): Promise<number> {
    const size = this.fs.statSync(file)?.size ?? 0;
    let lo = 0; // every entry before lo has id <= since
    let hi = size;
    while (hi - lo > WINDOW) {
      const mid = Math.floor((lo + hi) / 2);
      const id = firstIdAfter(await this.fs.readRange(file, mid, WINDOW));
      // Unknown (no whole line in the window): look further left, never skip an entry.
      if (id !== null && id <= since) lo = mid;
      else hi = mid;
    }
    return lo;
  }

  /** The last `n` matches above `since`, oldest first, read backwards from the end of the trail. */
  private async lastMatches(files: string[], n: number, since: number, match: (e: AuditEntry) => boolean): Promise<AuditEntry[]> {
    const out: AuditEntry[] = [];
    for (const file of [...files].reverse()) {
      if (await this.readBackwards(file, n, since, match, out)) break;
    }
    return out.reverse();
  }

  /** Adds matches newest first to `out` until it holds n; true once an entry at or below `since` is met. */
  private async readBackwards(file: string, n: number, since: number, match: (e: AuditEntry) => boolean, out: AuditEntry[]): Promise<boolean> {
    let end = this.fs.statSync(file)?.size ?? 0;
    let carry = Buffer.alloc(0); // the start of a line whose beginning lies further left
    while (end > 0 && out.length < n) {
      const start = Math.max(0, end - WINDOW);
      const buf = Buffer.concat([await this.fs.readRange(file, start, end - start), carry]);
      end = start;
      const cut = start > 0 ? buf.indexOf(10) + 1 : 0;
      if (start > 0 && cut === 0) {
        carry = buf; // no line break in this window: one long line, keep reading left
        continue;
      }
      carry = buf.subarray(0, cut);
      const lines = buf.subarray(cut).toString('utf8').split('\n');
      for (let i = lines.length - 1; i >= 0 && out.length < n; i--) {
        const e = parseLine(lines[i]);
        if (!e) continue;
        if (!(e.id > since)) return true;
        if (match(e)) out.push(e);
      }
    }
    return out.length >= n;
  }
}

/** Bytes per read when bisecting or reading backwards. */
const WINDOW = 64 * 1024;

function parseLine(line: string): AuditEntry | null {
  if (!line.trim()) return null;
  try {
    const e = JSON.parse(line) as AuditEntry;
    return typeof e?.id === 'number' ? e : null;
  } catch {
    return null;
  }
}

/** The last readable entry in `buf` (the tail of a file). */
function lastEntry(buf: Buffer): AuditEntry | null {
  const lines = buf.toString('utf8').split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    const e = parseLine(lines[i]);
    if (e) return e;
  }
  return null;
}

/** The id of the first whole, readable line after the first line break of `buf`; null if none. */
function firstIdAfter(buf: Buffer): number | null {
  let at = buf.indexOf(10) + 1;
  while (at > 0 && at < buf.length) {
    const nl = buf.indexOf(10, at);
    if (nl < 0) return null;
    const e = parseLine(buf.subarray(at, nl).toString('utf8'));
    if (e) return e.id;
    at = nl + 1;
  }
  return null;
}

/** The filters of GET /operations, each matched against the entry's own field or its batch list. */
function entryFilter(q: AuditQuery): (e: AuditEntry) => boolean {
  const { mac, worker_id: worker, agent, op } = q;
  const family = op?.endsWith('.*') ? op.slice(0, -1) : undefined;
  return (e) =>
    (!mac || e.mac === mac || (Array.isArray(e.macs) && e.macs.includes(mac))) &&
    (!worker || e.worker_id === worker || (Array.isArray(e.worker_ids) && e.worker_ids.includes(worker))) &&
    (!agent || e.agent === agent) &&
    (!op || (family ? typeof e.op === 'string' && e.op.startsWith(family) : e.op === op));
}

/** The tail without a torn (unterminated) last line. */
function cutTail(tail: string): string | null {
  if (tail.endsWith('\n')) return tail;
  const cut = tail.lastIndexOf('\n');
  return cut < 0 ? null : tail.slice(0, cut + 1);
}
