import { Injectable } from '@nestjs/common';

/** Distinct cursors remembered at most; past it the highest go first (the lowest is what holds). */
const MAX_CURSORS = 10_000;

/**
 * The `since` cursors GET /operations was asked with, and when: a follower (the UI's live tail,
 * a SIEM exporter paging through) is still reading everything above its cursor, so retention
 * keeps it. A follower is known only by the cursors it sends, so the lowest cursor seen within
 * the hold window is what holds.
 */
@Injectable()
export class AuditCursors {
  private readonly seenAt = new Map<number, number>();

  seen(cursor: number, now: number): void {
    this.seenAt.delete(cursor);
    this.seenAt.set(cursor, now);
    if (this.seenAt.size > MAX_CURSORS) {
      const highest = [...this.seenAt.keys()].sort((a, b) => b - a).slice(0, this.seenAt.size - MAX_CURSORS);
      for (const c of highest) this.seenAt.delete(c);
    }
  }

  /** The lowest cursor seen at or after `since` (ms); null when none. Forgets older ones. */
  lowest(since: number): number | null {
    let low: number | null = null;
    for (const [cursor, at] of this.seenAt) {
      if (at < since) this.seenAt.delete(cursor);
      else if (low === null || cursor < low) low = cursor;
    }
    return low;
  }
}
