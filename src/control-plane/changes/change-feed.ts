import { Injectable, OnModuleDestroy } from '@nestjs/common';
import { randomBytes } from 'node:crypto';

/** What a page may show that can change: each names the reads to do again. */
export const CHANGE_TOPICS = ['ledger', 'audit', 'boots', 'agents', 'settings'] as const;
export type ChangeTopic = (typeof CHANGE_TOPICS)[number];

export interface ChangesAnswer {
  cursor: string;
  topics: ChangeTopic[];
  reset: boolean;
}

/** Changes within this long after the first are answered together: a boot storm wakes each page once per window. */
const COALESCE_MS = 250;

/**
 * The change feed behind GET /changes: a counter per process and, per topic, the count at its last
 * change. A cursor is `<epoch>.<count>`; one from another process or an earlier start (a restart, a
 * second control plane behind the same address) answers `reset`: read everything again. Nothing
 * is kept per client, so the feed costs the same for one open page or a hundred.
 */
@Injectable()
export class ChangeFeed implements OnModuleDestroy {
  readonly epoch = randomBytes(6).toString('hex');
  private seq = 0;
  private readonly last = new Map<ChangeTopic, number>();
  private waiters = new Set<() => void>();
  private wake: NodeJS.Timeout | null = null;
  private closed = false;

  /** Long-polls waiting now (GET /metrics: kurrent_change_feed_waiting). */
  get waiting(): number {
    return this.waiters.size;
  }

  publish(topic: ChangeTopic): void {
    this.last.set(topic, ++this.seq);
    if (this.wake || !this.waiters.size) return;
    this.wake = setTimeout(() => this.wakeAll(), COALESCE_MS);
    this.wake.unref();
  }

  /** What changed after `cursor`, at once when something did, else at the first change or after waitMs. */
  async next(cursor: string | undefined, waitMs: number): Promise<ChangesAnswer> {
    const after = this.parse(cursor);
    if (after === null) return { cursor: this.cursor(), topics: [...CHANGE_TOPICS], reset: true };
    let topics = this.since(after);
    if (!topics.length && waitMs > 0 && !this.closed) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, waitMs);
        this.waiters.add(done);
      });
      topics = this.since(after);
    }
    return { cursor: this.cursor(), topics, reset: false };
  }

  /** Ends every waiting long-poll (shutdown): the HTTP server then closes without waiting for them. */
  onModuleDestroy(): void {
    this.closed = true;
    this.wakeAll();
  }

  private wakeAll(): void {
    if (this.wake) clearTimeout(this.wake);
    this.wake = null;
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  private cursor(): string {
    return `${this.epoch}.${this.seq}`;
  }

  /** The count a cursor of this process stands for; null when it is not one (reset). */
  private parse(cursor: string | undefined): number | null {
    if (!cursor) return null;
    const dot = cursor.indexOf('.');
    if (dot < 0 || cursor.slice(0, dot) !== this.epoch) return null;
    const n = Number(cursor.slice(dot + 1));
    return Number.isSafeInteger(n) && n >= 0 && n <= this.seq ? n : null;
  }

  private since(after: number): ChangeTopic[] {
    return CHANGE_TOPICS.filter((t) => (this.last.get(t) ?? 0) > after);
  }
}
