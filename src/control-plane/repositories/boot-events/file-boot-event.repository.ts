import { Injectable } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { LineSplitter } from '../../../shared/files/line-splitter';
import { AppConfig } from '../../config/app-config';
import { BootEvent, BootEventPrune, BootEventRepository, PruneFilter } from './boot-event.repository';
import { BootSnapshotFile } from './boot-snapshot-file';

/** Where a snapshot stands in the file: its length then, and what is needed to go on without reading what came before. */
interface FilePosition {
  /** The file itself: a rewrite (a prune, a restored backup) is another inode. */
  ino: number | null;
  bytes: number;
  /** The line that ended there (another file of the same length is not this one). */
  last: string;
  lines: number;
  oldest: number | null;
}

/**
 * Files (one control plane per state directory): state/boot-events.jsonl, one event per line,
 * each batch appended (without fdatasync: see append). Pruning rewrites the file atomically with the events it
 * keeps, and only once the file holds twice what the timelines hold, so the cost stays proportional
 * to the events written. A torn last line (a crash mid-append) is skipped on load.
 */
@Injectable()
export class FileBootEventRepository extends BootEventRepository {
  private readonly file: string;
  /** Lines in the file and the time of its oldest event: what decides whether a prune rewrites it. */
  private lines = 0;
  private oldest = Infinity;
  /** The file's length in whole lines, and its last line: the position a snapshot records. */
  private bytes = 0;
  private lastLine = '';

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    snapshots: BootSnapshotFile,
  ) {
    super(snapshots);
    this.file = path.join(config.stateDir, 'boot-events.jsonl');
  }

  /**
   * The events of the file, a torn last line (a crash mid-append, never acknowledged) skipped.
   * Read in chunks and parsed line by line: after a day of boots at 100,000 seats the file is tens
   * of MB, and one Buffer and one string of it cost more than the parse. `whole`: the bytes up to
   * the last line end.
   */
  private async read(take: (e: BootEvent) => void, from = 0): Promise<{ torn: boolean; lines: number; whole: number; last: string }> {
    let lines = 0;
    let bytes = from;
    let whole = from;
    let last = '';
    const splitter = new LineSplitter((line) => {
      if (!line) return;
      lines++;
      last = line;
      try {
        const e = JSON.parse(line) as BootEvent;
        if (typeof e.at === 'number' && typeof e.mac === 'string' && typeof e.stage === 'string') take(e);
      } catch {
        // not an event (a line the file should not hold): skipped
      }
    });
    await this.fs.readChunks(this.file, (chunk) => {
      const nl = chunk.lastIndexOf(10);
      if (nl !== -1) whole = bytes + nl + 1;
      bytes += chunk.length;
      splitter.push(chunk);
    }, 1 << 20, from);
    // No splitter.end(): what follows the last '\n' is torn, even when it parses (cut just before
    // its line end), and load truncates it, so it must not be applied either.
    return { torn: whole !== bytes, lines, whole, last };
  }

  private async rewrite(events: BootEvent[]): Promise<void> {
    const lines = events.map((e) => JSON.stringify(e));
    const text = lines.map((l) => l + '\n').join('');
    await this.fs.writeAtomic(this.file, text);
    this.lines = events.length;
    this.oldest = events.length ? events[0].at : Infinity;
    this.bytes = Buffer.byteLength(text);
    this.lastLine = lines.length ? lines[lines.length - 1] : '';
  }

  async load(since: number, apply: (e: BootEvent) => void): Promise<void> {
    // One control plane writes the file: every event after the snapshot's position came after its
    // lines (commitSnapshot), whichever node wrote it.
    const resume = this.resumeAfter?.cursor as FilePosition | undefined;
    this.resumeAfter = null;
    let oldest = resume?.oldest ?? Infinity;
    const { torn, lines, whole, last } = await this.read((e) => {
      if (oldest === Infinity) oldest = e.at;
      if (e.at >= since) apply(e);
    }, resume?.bytes ?? 0);
    this.lines = lines + (resume?.lines ?? 0);
    this.oldest = oldest;
    this.bytes = whole;
    this.lastLine = last || (resume?.last ?? '');
    // The next append must start a line of its own.
    if (torn) await this.fs.truncate(this.file, whole);
  }

  protected position(): FilePosition {
    return { ino: this.fs.statSync(this.file)?.ino ?? null, bytes: this.bytes, last: this.lastLine, lines: this.lines, oldest: this.oldest === Infinity ? null : this.oldest };
  }

  /**
   * The same file (inode) still holds, at the recorded length, the line that ended there: only
   * appended to since. (An edit in place that keeps every length is not seen: the file is ours.)
   */
  protected async stands(cursor: unknown): Promise<boolean> {
    const c = cursor as FilePosition;
    if (!c || !Number.isSafeInteger(c.bytes) || c.bytes < 0 || typeof c.last !== 'string' || !Number.isSafeInteger(c.lines) || !(c.oldest === null || typeof c.oldest === 'number')) return false;
    if (c.bytes === 0) return c.lines === 0;
    if ((await this.fs.stat(this.file))?.ino !== c.ino) return false;
    const want = Buffer.from(c.last + '\n');
    if (want.length > c.bytes) return false;
    return (await this.fs.readRange(this.file, c.bytes - want.length, want.length)).equals(want);
  }

  async append(events: BootEvent[]): Promise<void> {
    if (!events.length) return;
    // Not fdatasynced: boot telemetry survives a crash of the process, and a power cut may lose its
    // last seconds; an fsync every batch competed with the ledger's and cost a third of a boot storm (bench).
    const lines = events.map((e) => JSON.stringify(e));
    const text = lines.map((l) => l + '\n').join('');
    await this.fs.appendBuffered(this.file, text);
    this.lines += events.length;
    this.bytes += Buffer.byteLength(text);
    this.lastLine = lines[lines.length - 1];
    if (this.oldest === Infinity) this.oldest = events[0].at;
  }

  pull(): Promise<BootEvent[]> {
    return Promise.resolve([]);
  }

  /**
   * Rewrites the file with what keptByPrune keeps, once it holds more than 10,000 lines and either
   * an event past the retention or more than twice the events the timelines hold.
   */
  async prune(p: BootEventPrune): Promise<void> {
    if (this.lines < 10_000 || (this.oldest >= p.before && this.lines <= 2 * p.held)) return;
    const f = new PruneFilter(p);
    await this.read((e) => f.push(e));
    await this.rewrite(f.result());
  }
}
