import { Injectable } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { LineSplitter } from '../../../shared/files/line-splitter';
import { AppConfig } from '../../config/app-config';
import { BootEvent, BootEventPrune, BootEventRepository, PruneFilter } from './boot-event.repository';

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

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    super();
    this.file = path.join(config.stateDir, 'boot-events.jsonl');
  }

  /**
   * The events of the file, a torn last line (a crash mid-append, never acknowledged) skipped.
   * Read in chunks and parsed line by line: after a day of boots at 100,000 seats the file is tens
   * of MB, and one Buffer and one string of it cost more than the parse. `whole`: the bytes up to
   * the last line end.
   */
  private async read(take: (e: BootEvent) => void): Promise<{ torn: boolean; lines: number; whole: number }> {
    let lines = 0;
    let bytes = 0;
    let whole = 0;
    const splitter = new LineSplitter((line) => {
      if (!line) return;
      lines++;
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
    });
    // No splitter.end(): what follows the last '\n' is torn, even when it parses (cut just before
    // its line end), and load truncates it, so it must not be applied either.
    return { torn: whole !== bytes, lines, whole };
  }

  private async rewrite(events: BootEvent[]): Promise<void> {
    await this.fs.writeAtomic(this.file, events.map((e) => JSON.stringify(e) + '\n').join(''));
    this.lines = events.length;
    this.oldest = events.length ? events[0].at : Infinity;
  }

  async load(since: number, apply: (e: BootEvent) => void): Promise<void> {
    let oldest = Infinity;
    const { torn, lines, whole } = await this.read((e) => {
      if (oldest === Infinity) oldest = e.at;
      if (e.at >= since) apply(e);
    });
    this.lines = lines;
    this.oldest = oldest;
    // The next append must start a line of its own.
    if (torn) await this.fs.truncate(this.file, whole);
  }

  async append(events: BootEvent[]): Promise<void> {
    if (!events.length) return;
    // Not fdatasynced: boot telemetry survives a crash of the process, and a power cut may lose its
    // last seconds; an fsync every batch competed with the ledger's and cost a third of a boot storm (bench).
    await this.fs.appendBuffered(this.file, events.map((e) => JSON.stringify(e) + '\n').join(''));
    this.lines += events.length;
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
