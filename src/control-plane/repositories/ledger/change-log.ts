import { Logger } from '@nestjs/common';
import { crc32 } from 'node:zlib';
import type { FileSystem } from '../../../shared/files/file-system';
import { LedgerFileError } from '../../../shared/files/ledger-map';

/** One committed transaction: the full new value of every changed key (null = deleted). */
export interface ChangeRecord {
  seq: number;
  /** devices.yml keys (MAC) -> record or null. */
  d?: Record<string, unknown>;
  /** workers.yml keys (worker_id) -> record or null. */
  w?: Record<string, unknown>;
  /** Audit entries of the commit (with their ids): recovered at start if they never reached operations.jsonl. */
  a?: { id: number; [field: string]: unknown }[];
  /**
   * SHA-256 of devices.yml and workers.yml as the process knew them when it appended this record
   * (on the first record after a checkpoint, and after a hand edit was picked up): at start, a file
   * matching none of them was edited while the control plane was stopped.
   */
  b?: { d: string; w: string };
  /**
   * The value each key had before its first change since the last checkpoint (null: absent), so a
   * start can tell a YAML entry the checkpoint left as it was from one an operator edited.
   */
  p?: { d?: Record<string, unknown>; w?: Record<string, unknown> };
}

const hex8 = (n: number) => (n >>> 0).toString(16).padStart(8, '0');

/**
 * state/ledger.wal: the ledger's redo log. Every commit is one line, `<crc32> <json>`, appended
 * and fdatasync'ed before the commit is acknowledged; that append is the commit point. The YAML
 * files are checkpoints of it: once both are rewritten the log is emptied. Records carry whole
 * values, so replaying a record twice (a kill during a checkpoint) gives the same state.
 *
 * A torn last line (a kill or a full disk during the append, never acknowledged) is cut at
 * start; damage before the last line is a start error naming the line.
 */
export class ChangeLog<R extends { seq: number } = ChangeRecord> {
  private readonly log = new Logger('ChangeLog');
  /** Bytes and records in the log since the last checkpoint. */
  bytes = 0;
  count = 0;
  seq = 0;

  constructor(
    readonly file: string,
    private readonly fs: FileSystem,
    /** Mode of the file when an append creates it (0600 for a log that carries secrets). */
    private readonly mode = 0o644,
  ) {}

  /** Reads the log at start; cuts a torn tail (unless readOnly); throws LedgerFileError for damage before it. */
  loadSync(readOnly = false): R[] {
    const text = this.fs.readTextSync(this.file);
    this.bytes = 0;
    this.count = 0;
    if (!text) return [];
    const out: R[] = [];
    const lines = text.split('\n');
    let lastNonEmpty = lines.length - 1;
    while (lastNonEmpty >= 0 && lines[lastNonEmpty] === '') lastNonEmpty--;
    let good = 0; // byte length of the valid prefix
    for (let i = 0; i < lines.length; i++) {
      const l = lines[i];
      const last = i === lines.length - 1;
      if (last && l === '') break; // the text ended with '\n'
      const rec = parseLine(l) as R | null;
      const tornTail = i >= lastNonEmpty;
      if (!rec) {
        if (tornTail) {
          this.log.warn(`${this.file}:${i + 1}: torn last record (never acknowledged), cut at start`);
          break;
        }
        throw new LedgerFileError(this.file, i + 1, 'damaged change-log record (checksum or JSON); restore the file or remove the record by hand');
      }
      if (last) {
        // Complete JSON but no newline: the append did not finish, so it was never acknowledged.
        this.log.warn(`${this.file}:${i + 1}: record without its newline (never acknowledged), cut at start`);
        break;
      }
      if (rec.seq <= this.seq) throw new LedgerFileError(this.file, i + 1, `sequence ${rec.seq} does not increase`);
      this.seq = rec.seq;
      out.push(rec);
      good += Buffer.byteLength(l, 'utf8') + 1;
    }
    if (!readOnly && good < Buffer.byteLength(text, 'utf8')) this.fs.truncateSync(this.file, good);
    this.bytes = good;
    this.count = out.length;
    return out;
  }

  /**
   * Appends one record durably (buffered: without fdatasync, for what may be lost in a power cut).
   * Call under the owner's lock; a failure leaves the log as it was.
   */
  append(rec: R, buffered = false): Promise<void> {
    return this.appendMany([rec], buffered);
  }

  /**
   * Appends records (seq in order) in one write and one fdatasync, each its own line: a kill
   * mid-write keeps the whole lines before the torn one. Call under the owner's lock; a failure
   * leaves the log as it was.
   */
  async appendMany(recs: readonly R[], buffered = false): Promise<void> {
    if (!recs.length) return;
    const lines = recs.map(lineOf);
    if (buffered) await this.fs.appendBuffered(this.file, lines, this.mode);
    else await this.fs.appendDurable(this.file, lines, this.mode);
    this.seq = recs[recs.length - 1].seq;
    for (const l of lines) this.bytes += l.length;
    this.count += recs.length;
  }

  /**
   * Drops the first `bytes` of the log (the records a checkpoint taken at that length holds) and
   * keeps those appended since: the rest is written to a new file renamed over the log, so a kill
   * leaves the whole log (replayed onto the checkpoint: records carry whole values) or the rest.
   * Call under the owner's lock.
   */
  async dropFirst(bytes: number): Promise<void> {
    if (bytes >= this.bytes) return this.reset();
    if (bytes <= 0) return;
    const rest = (this.fs.readBytesSync(this.file) ?? Buffer.alloc(0)).subarray(bytes);
    // Exactly what was appended since: whole lines (appends are cut back when they fail).
    if (rest.length !== this.bytes - bytes) throw new Error(`${this.file} is ${bytes + rest.length} bytes, ${this.bytes} expected`);
    await this.fs.writeAtomic(this.file, rest, this.mode);
    let lines = 0;
    for (let i = rest.indexOf(10); i !== -1; i = rest.indexOf(10, i + 1)) lines++;
    this.bytes = rest.length;
    this.count = lines;
  }

  /** Empties the log once a checkpoint holds everything in it. */
  async reset(): Promise<void> {
    if (this.bytes === 0 && this.count === 0) return;
    await this.fs.truncate(this.file, 0);
    this.bytes = 0;
    this.count = 0;
  }
}

/** A record's line: its JSON's CRC-32, a space, the JSON, a newline. */
function lineOf(rec: { seq: number }): Buffer {
  const json = JSON.stringify(rec);
  return Buffer.from(`${hex8(crc32(json))} ${json}\n`, 'utf8');
}

function parseLine(l: string): { seq: number } | null {
  const sp = l.indexOf(' ');
  if (sp !== 8) return null;
  const json = l.slice(9);
  if (hex8(crc32(json)) !== l.slice(0, 8)) return null;
  try {
    const r = JSON.parse(json) as { seq: number };
    if (typeof r !== 'object' || r === null || !Number.isSafeInteger(r.seq)) return null;
    return r;
  } catch {
    return null;
  }
}
