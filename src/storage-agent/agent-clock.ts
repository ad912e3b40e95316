import { Injectable } from '@nestjs/common';
import { setTimeout as delay } from 'node:timers/promises';

/** The agent's "now" and its waits, swappable in tests. */
@Injectable()
export class AgentClock {
  nowMs(): number {
    return Date.now();
  }

  /** Resolves after `ms`, rejects when `signal` aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return delay(ms, undefined, { signal });
  }
}
