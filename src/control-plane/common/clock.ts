import { Injectable } from '@nestjs/common';

/** The one source of "now", swappable in tests. */
@Injectable()
export class Clock {
  now(): Date {
    return new Date();
  }
  /** ISO-8601 with an explicit +00:00 offset, as the reference's examples show. */
  isoNow(): string {
    // Second resolution: a boot storm asks thousands of times per second for the same string.
    const ms = this.now().getTime();
    const sec = Math.floor(ms / 1000);
    if (sec !== this.isoSec) {
      this.isoSec = sec;
      this.iso = new Date(sec * 1000).toISOString().replace(/\.\d{3}Z$/, '+00:00');
    }
    return this.iso;
  }
  private isoSec = NaN;
  private iso = '';
}
