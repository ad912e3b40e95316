import { Injectable } from '@nestjs/common';
import { AppConfig } from '../../config/app-config';
import { Database, LOCK } from '../pg/database';
import { BootEvent, BootEventPrune, BootEventRepository } from './boot-event.repository';

interface Row {
  id: string;
  at: Date;
  mac: string;
  stage: BootEvent['stage'];
  node: string;
  worker: string | null;
  detail: Record<string, string> | null;
}

/**
 * PostgreSQL: the `boot_events` table. Batches are inserted under an advisory lock so ids
 * commit in order, which lets every control plane read the others' events by id (pull) without
 * skipping one that committed late: one boot's requests may reach different control planes.
 */
@Injectable()
export class PgBootEventRepository extends BootEventRepository {
  private cursor = '0';

  constructor(
    private readonly db: Database,
    private readonly config: AppConfig,
  ) {
    super();
  }

  async load(since: number): Promise<BootEvent[]> {
    await this.db.init();
    const r = await this.db.query<Row>('SELECT id, at, mac, stage, node, worker, detail FROM boot_events WHERE at >= $1 ORDER BY id', [new Date(since)]);
    const top = await this.db.query<{ id: string | null }>('SELECT max(id)::text AS id FROM boot_events');
    this.cursor = top.rows[0].id ?? '0';
    return r.rows.map(toEvent);
  }

  async append(events: BootEvent[]): Promise<void> {
    if (!events.length) return;
    await this.db.tx(
      (c) =>
        c.query(
          `INSERT INTO boot_events (at, mac, stage, node, worker, detail)
           SELECT to_timestamp(a / 1000.0), m, s, n, w, d::jsonb FROM unnest($1::float8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS t(a, m, s, n, w, d)`,
          [events.map((e) => e.at), events.map((e) => e.mac), events.map((e) => e.stage), events.map((e) => e.node), events.map((e) => e.worker ?? null), events.map((e) => (e.detail ? JSON.stringify(e.detail) : null))],
        ),
      LOCK.bootEvents,
    );
  }

  async pull(): Promise<BootEvent[]> {
    const r = await this.db.query<Row>('SELECT id, at, mac, stage, node, worker, detail FROM boot_events WHERE id > $1 ORDER BY id LIMIT 20000', [this.cursor]);
    if (r.rows.length) this.cursor = r.rows[r.rows.length - 1].id;
    return r.rows.filter((x) => x.node !== this.config.nodeId).map(toEvent);
  }

  /** keptByPrune in three statements: by age, by each device's cut (one array pair), and releases but each device's latest. */
  async prune(p: BootEventPrune): Promise<void> {
    await this.db.query('DELETE FROM boot_events WHERE at < $1', [new Date(p.before)]);
    if (p.cuts.size) {
      const cuts = [...p.cuts.values()];
      await this.db.query(
        `DELETE FROM boot_events e USING unnest($1::text[], $2::float8[], $3::float8[], $4::float8[]) AS c(mac, cut, kf, kt)
         WHERE e.mac = c.mac AND e.stage <> 'release' AND e.at < to_timestamp(c.cut / 1000.0)
           AND NOT (c.kf IS NOT NULL AND e.at >= to_timestamp(c.kf / 1000.0) AND e.at <= to_timestamp(c.kt / 1000.0))`,
        [[...p.cuts.keys()], cuts.map((c) => c.before), cuts.map((c) => c.keep?.[0] ?? null), cuts.map((c) => c.keep?.[1] ?? null)],
      );
    }
    await this.db.query(
      `DELETE FROM boot_events WHERE id IN (
         SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY mac ORDER BY id DESC) AS n FROM boot_events WHERE stage = 'release') r WHERE n > 1)`,
    );
  }
}

function toEvent(r: Row): BootEvent {
  return { at: r.at.getTime(), mac: r.mac, stage: r.stage, node: r.node, ...(r.worker ? { worker: r.worker } : {}), ...(r.detail ? { detail: r.detail } : {}) };
}
