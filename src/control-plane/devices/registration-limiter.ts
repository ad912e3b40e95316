import { Injectable } from '@nestjs/common';
import { AppConfig } from '../config/app-config';

export type LimitVerdict = { ok: true } | { ok: false; reason: 'pool_limit' | 'rate_limit'; limit: number; burstStart: boolean; dropped: number };

interface Bucket {
  tokens: number;
  at: number;
}

interface Burst {
  lastDrop: number;
  dropped: number;
}

/** A burst of refusals ends after this long without one; the next refusal starts (and audits) a new one. */
const BURST_GAP_MS = 10_000;
/** Sources tracked at once; full buckets are forgotten first. */
const MAX_SOURCES = 50_000;

/**
 * Bounds what unauthenticated /devices/report can add to the ledger with auto-register on: a pool
 * limit (IPXE_CP_POOL_LIMIT pooled devices) and a token bucket per source address
 * (IPXE_CP_REGISTER_RATE per second, bursts of 10 s worth). Known devices are never limited.
 * Refusals are grouped into bursts, so the audit gets one entry per burst, never one per request.
 */
@Injectable()
export class RegistrationLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly bursts = new Map<string, Burst>();

  constructor(private readonly config: AppConfig) {}

  /** Checked again inside the registration group commit, where it is exact. */
  get poolLimit(): number {
    return this.config.poolLimit;
  }

  check(source: string, pooled: number, now: number = performance.now()): LimitVerdict {
    if (pooled >= this.config.poolLimit) return this.refuse('pool_limit', '*', this.config.poolLimit, now);
    const rate = this.config.registerRate;
    const cap = rate * 10;
    let b = this.buckets.get(source);
    if (!b) {
      if (this.buckets.size >= MAX_SOURCES) this.prune(now);
      b = { tokens: cap, at: now };
      this.buckets.set(source, b);
    }
    b.tokens = Math.min(cap, b.tokens + ((now - b.at) / 1000) * rate);
    b.at = now;
    if (b.tokens < 1) return this.refuse('rate_limit', source, rate, now);
    b.tokens -= 1;
    return { ok: true };
  }

  private refuse(reason: 'pool_limit' | 'rate_limit', key: string, limit: number, now: number): LimitVerdict {
    const k = `${reason}:${key}`;
    let burst = this.bursts.get(k);
    const burstStart = !burst || now - burst.lastDrop > BURST_GAP_MS;
    const dropped = burstStart ? (burst?.dropped ?? 0) : 0;
    if (burstStart) {
      burst = { lastDrop: now, dropped: 0 };
      this.bursts.set(k, burst);
      if (this.bursts.size > MAX_SOURCES) this.bursts.delete(this.bursts.keys().next().value!);
    }
    burst!.lastDrop = now;
    burst!.dropped++;
    // `dropped` of a new burst is the size of the previous one (0 for the first).
    return { ok: false, reason, limit, burstStart, dropped };
  }

  private prune(now: number): void {
    const cap = this.config.registerRate * 10;
    for (const [k, b] of this.buckets) {
      if (b.tokens + ((now - b.at) / 1000) * this.config.registerRate >= cap) this.buckets.delete(k);
    }
    // Still full of active sources: forget the oldest half.
    if (this.buckets.size >= MAX_SOURCES) {
      let n = this.buckets.size / 2;
      for (const k of this.buckets.keys()) {
        if (n-- <= 0) break;
        this.buckets.delete(k);
      }
    }
  }
}
