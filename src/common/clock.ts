import { Injectable } from '@nestjs/common';

/** The one source of "now", swappable in tests. */
@Injectable()
export class Clock {
  now(): Date {
    return new Date();
  }
  /** ISO-8601 with an explicit +00:00 offset, as the reference's examples show. */
  isoNow(): string {
    return this.now().toISOString().replace(/\.\d{3}Z$/, '+00:00');
  }
}
