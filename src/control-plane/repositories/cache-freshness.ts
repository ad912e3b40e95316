import { Injectable } from '@nestjs/common';
import { ApiError } from '../../shared/http/api-error';
import { AppConfig } from '../config/app-config';

/**
 * How far this process's in-memory state may lag the store (GET /healthz, /metrics). On files
 * the process is the only writer and holds the truth: no lag. On PostgreSQL, StoreSync.
 */
@Injectable()
export class CacheFreshness {
  constructor(protected readonly config: AppConfig) {}

  /** Milliseconds since the cache was last known to match the store. */
  stalenessMs(): number {
    return 0;
  }

  /** GET /healthz: ok, or a 503 saying how stale this process is. */
  health(): { status: 'ok' } {
    const ms = this.stalenessMs();
    if (ms > this.config.stalenessMaxMs) {
      throw new ApiError(503, `stale: this control plane last caught up with the database ${ms} ms ago (bound IPXE_CP_STALENESS_MAX_MS=${this.config.stalenessMaxMs})`);
    }
    return { status: 'ok' };
  }
}
