import { Injectable } from '@nestjs/common';
import * as path from 'node:path';
import { AtomicFileWriter, FileSystem } from '../../../shared/files/file-system';
import { LineSplitter } from '../../../shared/files/line-splitter';
import { AppConfig } from '../../config/app-config';

/** The first line of a snapshot: when and by which control plane it was written, and where in the store it stands. */
export interface BootSnapshotHeader {
  /**
   * 2: written after a prune too, while the writer goes on appending (its own events after the
   * position are not in it). An older release takes only 1 and replays a 2 (a downgrade must not
   * skip those events); 1, written only at a clean stop, reads the same here.
   */
  kurrent_boot_snapshot: 1 | 2;
  /** Written at (ms). */
  at: number;
  /** The control plane that wrote it: its own events after `cursor` are in it already. */
  node: string;
  /** The engine's position in the store: every event before it is in the snapshot. */
  cursor: unknown;
}

/** Header lines longer than this are not ours. */
const HEADER_MAX = 64 * 1024;
/**
 * The first line as written: the header padded with spaces (JSON allows them) to this length with
 * its newline. A position is ~1 KB at most (a file's last event line is the longest part).
 */
const HEADER_ROOM = 16 * 1024;

/** A snapshot being written (BootSnapshotFile.open): lines, then the header with the position; or abort. */
export class BootSnapshotWriter {
  constructor(
    private readonly w: AtomicFileWriter,
    private readonly at: number,
    private readonly node: string,
  ) {}

  /** Appends timeline lines. A MAC written again later stands for that timeline (the last line wins). */
  add(lines: readonly string[]): Promise<void> {
    return lines.length ? this.w.write(lines.join('\n') + '\n') : Promise.resolve();
  }

  /** Writes the header with the store's position and puts the snapshot in place. */
  async commit(cursor: unknown): Promise<void> {
    const header: BootSnapshotHeader = { kurrent_boot_snapshot: 2, at: this.at, node: this.node, cursor };
    const text = Buffer.from(JSON.stringify(header));
    if (text.length >= HEADER_ROOM) {
      await this.w.abort();
      throw new Error(`the snapshot header needs ${text.length} bytes, more than the ${HEADER_ROOM - 1} kept for it`);
    }
    await this.w.writeAt(0, text);
    await this.w.commit();
  }

  abort(): Promise<void> {
    return this.w.abort();
  }
}

/**
 * state/boot-timelines.snapshot: the boot timelines, one line each after a header, for either
 * engine (a control plane's own state directory), written after every prune and at a clean
 * shutdown. It is taken (read and removed) by the next start, so it never outlives the events it
 * stands for: a start that used it and crashed before its first prune replays the store.
 */
@Injectable()
export class BootSnapshotFile {
  private readonly file: string;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    this.file = path.join(config.stateDir, 'boot-timelines.snapshot');
  }

  /**
   * Starts a snapshot written at `at` by `node`: its lines are written as they come (100,000
   * timelines are tens of MB, more than one string should hold), the header last, into room kept
   * for it at the top, since the store's position is known only once the lines are. Not durable: a
   * power cut that loses it costs a replay, and the events' own file is not fsynced either.
   */
  async open(at: number, node: string): Promise<BootSnapshotWriter> {
    // On PostgreSQL nothing else may have made the state directory.
    this.fs.mkdirpSync(path.dirname(this.file));
    const w = await this.fs.openAtomic(this.file, 0o600);
    try {
      await w.write(Buffer.alloc(HEADER_ROOM, ' ').fill('\n', HEADER_ROOM - 1));
    } catch (e) {
      await w.abort();
      throw e;
    }
    return new BootSnapshotWriter(w, at, node);
  }

  /**
   * Reads the snapshot, if there is one, and removes it whatever happens. Each line goes to `take`
   * only once `accept` said yes to the header; a torn last line fails the whole snapshot (an
   * exception, like one from `take`). Returns the header it used, or null.
   */
  async take(accept: (h: BootSnapshotHeader) => Promise<boolean>, take: (line: string) => void): Promise<BootSnapshotHeader | null> {
    // A write that a kill cut short left its temp file (tens of MB at 100,000 seats; on PostgreSQL
    // nothing else sweeps this directory).
    this.fs.removeStaleTempsOf(this.file);
    try {
      const head = (await this.fs.readRange(this.file, 0, HEADER_MAX)).toString('utf8');
      const nl = head.indexOf('\n');
      if (nl < 0) return null; // none, or not ours
      const header = JSON.parse(head.slice(0, nl)) as BootSnapshotHeader;
      if ((header?.kurrent_boot_snapshot !== 1 && header?.kurrent_boot_snapshot !== 2) || typeof header.at !== 'number' || typeof header.node !== 'string') throw new Error('not a snapshot header');
      if (!(await accept(header))) return null;
      let end = 0;
      let bytes = 0;
      const lines = new LineSplitter((line) => {
        if (line) take(line);
      });
      await this.fs.readChunks(
        this.file,
        (chunk) => {
          bytes += chunk.length;
          if (chunk[chunk.length - 1] === 10) end = bytes;
          lines.push(chunk);
        },
        1 << 20,
        Buffer.byteLength(head.slice(0, nl + 1)),
      );
      if (end !== bytes) throw new Error('the snapshot ends in a torn line');
      return header;
    } finally {
      await this.fs.removeDurable(this.file);
    }
  }
}
