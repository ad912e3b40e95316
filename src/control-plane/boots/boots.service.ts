import { Injectable } from '@nestjs/common';
import { badRequest, notFound } from '../../shared/http/api-error';
import { normalizeMac } from '../../shared/mac';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { BOOT_STAGES } from '../repositories/boot-events/boot-event.repository';
import { BootSession, BootOutcome } from './boot-timeline';
import { BootSessionsService } from './boot-sessions.service';
import { BootHoldDto, BootSessionDto, BootsPageDto, BootsQueryDto } from './dto/boot-session.dto';

const iso = (ms: number) => new Date(ms).toISOString();

/** A session as the API shows it. */
export function sessionView(s: BootSession, outcome: BootOutcome, looping: boolean): BootSessionDto {
  const stages = s.stages;
  return {
    id: `${s.mac.replace(/:/g, '')}-${s.started}`,
    mac: s.mac,
    worker_id: s.worker ?? null,
    started_at: iso(s.started),
    last_stage_at: iso(s.last),
    outcome,
    stage: BOOT_STAGES[s.reached],
    reason: outcome === 'failed' ? (s.failure?.reason ?? null) : null,
    looping,
    stages: stages.map((m) => ({ stage: m.stage, at: iso(m.at), offset_ms: m.at - s.started, ...(m.detail ? { detail: { ...m.detail } } : {}) })),
  };
}

/** GET /boots, the OS's "up" call and the release of a boot-loop hold (the API side of BootSessionsService). */
@Injectable()
export class BootsService {
  constructor(
    private readonly sessions: BootSessionsService,
    private readonly store: LedgerRepository,
  ) {}

  list(q: BootsQueryDto): BootsPageDto {
    let mac: string | undefined;
    if (q.mac !== undefined) {
      mac = normalizeMac(q.mac) ?? undefined;
      if (!mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(q.mac)}`);
    }
    let since: number | undefined;
    if (q.since !== undefined) {
      since = Date.parse(q.since);
      if (!Number.isFinite(since)) throw badRequest(`since: must be an ISO 8601 time, got ${JSON.stringify(q.since)}`);
    }
    const rows = this.sessions.query({ mac, worker_id: q.worker_id, outcome: q.outcome, since, limit: q.limit ?? 100 });
    return { items: rows.map((r) => sessionView(r.session, r.outcome, r.looping)) };
  }

  /** The newest boot of a device (device and worker views), or null. */
  latest(mac: string): BootSessionDto | null {
    const l = this.sessions.latest(mac);
    return l ? sessionView(l.session, l.outcome, !!this.sessions.looping(mac)) : null;
  }

  osUp(raw: unknown): void {
    const mac = typeof raw === 'string' ? normalizeMac(raw) : null;
    if (!mac) throw badRequest(`mac: required, a MAC address (got ${JSON.stringify(raw ?? null)})`);
    const d = this.store.read().devices.get(mac);
    if (!d || d.state === 'revoked') return;
    this.sessions.seen({ mac, stage: 'os', ...(d.bound_worker_id ? { worker: d.bound_worker_id } : {}) });
  }

  async release(raw: string, client: string): Promise<BootHoldDto> {
    const mac = normalizeMac(raw);
    if (!mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(raw)}`);
    if (!this.store.read().devices.has(mac)) throw notFound(`device ${mac} not found`);
    const released = await this.sessions.release(mac, client);
    return { mac, looping: !!this.sessions.looping(mac), held: this.sessions.held(mac), released };
  }
}
