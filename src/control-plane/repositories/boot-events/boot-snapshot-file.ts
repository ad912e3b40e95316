import { Injectable } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { LineSplitter } from '../../../shared/files/line-splitter';
import { AppConfig } from '../../config/app-config';

/** The first line of a snapshot: when and by which control plane it was written, and where in the store it stands. */
export interface BootSnapshotHeader {
  kurrent_boot_snapshot: 1;
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
 * state/boot-timelines.snapshot: the boot timelines a clean shutdown left, one line each after a
 * header, for either engine (a control plane's own state directory). It is taken (read and
 * removed) by the next start, so it never outlives the events it stands for: a start that used it
 * and later crashed replays the store, as before.
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

  /** Not durable: a power cut that loses it costs a replay, and the events' own file is not fsynced either. */
  async write(header: BootSnapshotHeader, lines: readonly string[]): Promise<void> {
    // On PostgreSQL nothing else may have made the state directory.
    this.fs.mkdirpSync(path.dirname(this.file));
    await this.fs.writeAtomic(this.file, JSON.stringify(header) + '\n' + lines.join('\n') + '\n', 0o600, { durable: false });
  }

  /**
   * Reads the snapshot, if there is one, and removes it whatever happens. Each line goes to `take`
   * only once `accept` said yes to the header; a torn last line fails the whole snapshot (an
   * exception, like one from `take`). Returns the header it used, or null.
   */
  async take(accept: (h: BootSnapshotHeader) => Promise<boolean>, take: (line: string) => void): Promise<BootSnapshotHeader | null> {
    try {
      const head = (await this.fs.readRange(this.file, 0, HEADER_MAX)).toString('utf8');
      const nl = head.indexOf('\n');
      if (nl < 0) return null; // none, or not ours
      const header = JSON.parse(head.slice(0, nl)) as BootSnapshotHeader;
      if (header?.kurrent_boot_snapshot !== 1 || typeof header.at !== 'number' || typeof header.node !== 'string') throw new Error('not a snapshot header');
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
