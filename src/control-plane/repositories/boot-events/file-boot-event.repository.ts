import { Injectable } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { AppConfig } from '../../config/app-config';
import { BootEvent, BootEventRepository } from './boot-event.repository';

/**
 * Files (one control plane per state directory): state/boot-events.jsonl, one event per line,
 * each batch appended with fdatasync. Pruning rewrites the file atomically with the events it
 * keeps, and only once the file holds twice what is kept, so the cost stays proportional to the
 * events written. A torn last line (a crash mid-append) is skipped on load.
 */
@Injectable()
export class FileBootEventRepository extends BootEventRepository {
  private readonly file: string;
  /** Lines in the file and the oldest retained time, to decide when a rewrite pays. */
  private lines = 0;
  private kept: BootEvent[] = [];

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    super();
    this.file = path.join(config.stateDir, 'boot-events.jsonl');
  }

  async load(since: number): Promise<BootEvent[]> {
    const text = (await this.fs.readText(this.file)) ?? '';
    const out: BootEvent[] = [];
    let lines = 0;
    for (const line of text.split('\n')) {
      if (!line) continue;
      lines++;
      try {
        const e = JSON.parse(line) as BootEvent;
        if (typeof e.at === 'number' && typeof e.mac === 'string' && typeof e.stage === 'string' && e.at >= since) out.push(e);
      } catch {
        // a torn last line: its batch was never acknowledged
      }
    }
    if (text && !text.endsWith('\n')) await this.fs.writeAtomic(this.file, out.map((e) => JSON.stringify(e) + '\n').join(''));
    this.lines = lines;
    this.kept = out;
    return out;
  }

  async append(events: BootEvent[]): Promise<void> {
    if (!events.length) return;
    await this.fs.appendDurable(this.file, events.map((e) => JSON.stringify(e) + '\n').join(''));
    this.lines += events.length;
    for (const e of events) this.kept.push(e);
  }

  pull(): Promise<BootEvent[]> {
    return Promise.resolve([]);
  }

  async prune(before: number): Promise<void> {
    let first = 0;
    while (first < this.kept.length && this.kept[first].at < before) first++;
    if (first === 0 || this.lines < 2 * (this.kept.length - first) + 1000) {
      if (first) this.kept = this.kept.slice(first);
      return;
    }
    const keep = this.kept.slice(first);
    await this.fs.writeAtomic(this.file, keep.map((e) => JSON.stringify(e) + '\n').join(''));
    this.kept = keep;
    this.lines = keep.length;
  }
}
