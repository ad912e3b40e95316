import { Injectable } from '@nestjs/common';
import { AppConfig } from '../../config/app-config';
import { Database, jsonParam, LOCK } from '../pg/database';
import { BootEvent, BootEventPrune, BootEventRepository } from './boot-event.repository';
import { BootSnapshotFile } from './boot-snapshot-file';

/** Rows of one INSERT of append: its parameter stays under ~100 KB, and a batch of 10,000 is not one buffer of megabytes. */
export const BOOT_EVENTS_PER_STATEMENT = 500;
/** Events read per query at start. */
const LOAD_PAGE = 50_000;
/** Other control planes' events read per pull (a flush, every second or so). */
const PULL_PAGE = 20_000;
/** Rows a prune deletes per statement (well under the statement timeout at millions of rows). */
const PRUNE_BATCH = 100_000;

/** Where a snapshot stands: the newest event read then (the MAC tells another database's row of that id from it). */
interface PgPosition {
  id: string;
  mac: string | null;
  /**
   * The newest id of the writer's own events then: those after `id` up to it are in the snapshot
   * (applied when seen, appended before it was committed), those after it are not. Absent in a
   * snapshot of an older release, written at a clean stop: all of the writer's are in it.
   */
  own?: string;
}

/**
 * The columns of an event; its time as ms since the epoch (floor: what a Date of the timestamp
 * held), which spares the driver's timestamp parser 3 million Dates on a week's replay.
 */
const COLUMNS = 'id, floor(extract(epoch FROM at) * 1000)::float8 AS at, mac, stage, node, worker, detail';

interface Row {
  id: string;
  at: number;
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
  /** The newest id this process appended (its own events), '0' before its first append. */
  private ownNewest = '0';
  /** The MAC of the event at `cursor`. */
  private cursorMac: string | null = null;
  /** LOAD_PAGE, PULL_PAGE and PRUNE_BATCH; a test sets them lower to see the pages and batches. */
  loadPage = LOAD_PAGE;
  pullPage = PULL_PAGE;
  pruneBatch = PRUNE_BATCH;

  constructor(
    private readonly db: Database,
    private readonly config: AppConfig,
    snapshots: BootSnapshotFile,
  ) {
    super(snapshots);
  }

  /**
   * In pages by id, up to the newest id at the start (ids commit in order under the lock, so none
   * below it is still to come): one query for a store of millions of events ran past the statement
   * timeout, and the control plane could not start (bench:scale, a day of a looping room).
   */
  async load(since: number, apply: (e: BootEvent) => void): Promise<void> {
    const resume = this.resumeAfter?.cursor as PgPosition | undefined;
    // '' is no control plane's id (IPXE_CP_NODE_ID is 1-100 characters).
    const writer = this.resumeAfter?.node ?? '';
    // The writer's events up to this id are in the snapshot ('' as an id: all of them, see PgPosition.own).
    const writerUpTo = resume?.own ?? '';
    this.resumeAfter = null;
    await this.db.init();
    // Ordered by the column, not by its text (ORDER BY id would sort the output column: '9' after '12').
    const top = await this.db.query<{ id: string; mac: string }>('SELECT id::text AS id, mac FROM boot_events ORDER BY boot_events.id DESC LIMIT 1');
    const last = top.rows[0]?.id ?? '0';
    for (let after = resume?.id ?? '0'; ; ) {
      const r = await this.db.query<Row>(
        `SELECT ${COLUMNS} FROM boot_events WHERE id > $1 AND id <= $2 AND at >= $3 AND NOT (node = $5 AND ($6 = '' OR id <= $6::bigint)) ORDER BY id LIMIT $4`,
        [after, last, new Date(since), this.loadPage, writer, writerUpTo],
      );
      for (const row of r.rows) apply(toEvent(row));
      if (r.rows.length < this.loadPage) break;
      after = r.rows[r.rows.length - 1].id;
    }
    this.cursor = last;
    this.cursorMac = top.rows[0]?.mac ?? null;
  }

  protected position(): PgPosition {
    return { id: this.cursor, mac: this.cursorMac, own: this.ownNewest };
  }

  /** The event at the position is still there, with its MAC: the same database, not pruned past it. */
  protected async stands(cursor: unknown): Promise<boolean> {
    const c = cursor as PgPosition;
    if (!c || typeof c.id !== 'string' || !/^\d{1,19}$/.test(c.id) || !(c.mac === null || typeof c.mac === 'string')) return false;
    if (c.own !== undefined && (typeof c.own !== 'string' || !/^\d{1,19}$/.test(c.own))) return false;
    await this.db.init();
    if (c.id === '0') return true;
    const r = await this.db.query('SELECT 1 FROM boot_events WHERE id = $1 AND mac = $2', [c.id, c.mac]);
    return r.rows.length === 1;
  }

  async append(events: BootEvent[]): Promise<void> {
    if (!events.length) return;
    this.ownNewest = await this.db.tx(async (c) => {
      // BOOT_EVENTS_PER_STATEMENT rows a statement, as one JSON parameter (jsonParam).
      for (let i = 0; i < events.length; i += BOOT_EVENTS_PER_STATEMENT) {
        await c.query(
          `INSERT INTO boot_events (at, mac, stage, node, worker, detail)
           SELECT to_timestamp(at / 1000.0), mac, stage, node, worker, detail FROM json_to_recordset($1::json) AS t(at float8, mac text, stage text, node text, worker text, detail jsonb)`,
          [jsonParam(events.slice(i, i + BOOT_EVENTS_PER_STATEMENT))],
        );
      }
      // The id of this session's last row: the batch's newest. (RETURNING every id cost the
      // server ~7% more per 5,000-row batch; this is one round trip, ~0.7 ms.)
      return (await c.query<{ newest: string }>("SELECT currval(pg_get_serial_sequence('boot_events', 'id'))::text AS newest")).rows[0].newest;
    }, LOCK.bootEvents);
    // Appends of this process run one at a time (BootSessionsService's flush): the last is the newest.
  }

  /**
   * Only the other control planes' rows are sent and parsed: this one applied its own when it saw
   * them (through two control planes, reading its own too was half of every pull, ~250,000 rows in
   * a 20 s storm). The position still moves past its own, to the newest row the statement saw:
   * ids commit in order (append's lock), so nothing below that row can commit later.
   */
  async pull(): Promise<BootEvent[]> {
    const r = await this.db.query<Partial<Row> & { top: string; top_mac: string }>(
      `SELECT t.top::text AS top, t.top_mac, e.* FROM (SELECT id AS top, mac AS top_mac FROM boot_events WHERE id > $1 ORDER BY id DESC LIMIT 1) t
       LEFT JOIN LATERAL (SELECT ${COLUMNS} FROM boot_events WHERE id > $1 AND id <= t.top AND node <> $2 ORDER BY id LIMIT $3) e ON true`,
      [this.cursor, this.config.nodeId, this.pullPage],
    );
    if (!r.rows.length) return [];
    const rows = r.rows.filter((x) => x.id !== null) as Row[];
    // A full page may stop short of the top: the next pull goes on after its last row.
    const last = rows.length === this.pullPage ? rows[rows.length - 1] : null;
    [this.cursor, this.cursorMac] = last ? [last.id, last.mac] : [r.rows[0].top, r.rows[0].top_mac];
    return rows.map(toEvent);
  }

  /**
   * keptByPrune: by age, by each device's cut (one array pair), then releases but each device's
   * latest. Deletions go PRUNE_BATCH rows a statement, found through the (mac, at) index and
   * deleted by primary key (`= ANY(ARRAY(..))`: `IN (..)` scanned the whole table each batch): a
   * day of a looping room is millions of rows, and 2.9 million in one statement took 14 s here,
   * past the statement timeout; in batches of 200,000 with the index 11 s in all, at most 2.8 s a
   * statement (without it 34 s, up to 6 s), so batches of 100,000 leave the timeout room.
   */
  async prune(p: BootEventPrune): Promise<void> {
    await this.inBatches('DELETE FROM boot_events WHERE id = ANY(ARRAY(SELECT id FROM boot_events WHERE at < $1 LIMIT $2))', [new Date(p.before)]);
    if (p.cuts.size) {
      const cuts = [...p.cuts.values()];
      await this.inBatches(
        `DELETE FROM boot_events WHERE id = ANY(ARRAY(
           SELECT e.id FROM boot_events e JOIN unnest($1::text[], $2::float8[], $3::float8[], $4::float8[]) AS c(mac, cut, kf, kt) ON e.mac = c.mac
           WHERE e.stage <> 'release' AND e.at < to_timestamp(c.cut / 1000.0)
             AND NOT (c.kf IS NOT NULL AND e.at >= to_timestamp(c.kf / 1000.0) AND e.at <= to_timestamp(c.kt / 1000.0))
           LIMIT $5))`,
        [[...p.cuts.keys()], cuts.map((c) => c.before), cuts.map((c) => c.keep?.[0] ?? null), cuts.map((c) => c.keep?.[1] ?? null)],
      );
    }
    await this.db.query(
      `DELETE FROM boot_events WHERE id IN (
         SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY mac ORDER BY id DESC) AS n FROM boot_events WHERE stage = 'release') r WHERE n > 1)`,
    );
  }

  /** Runs a DELETE whose last parameter is a LIMIT until it deletes fewer rows than that. */
  private async inBatches(sql: string, params: unknown[]): Promise<void> {
    for (;;) {
      const r = await this.db.query(sql, [...params, this.pruneBatch]);
      if ((r.rowCount ?? 0) < this.pruneBatch) return;
    }
  }
}

function toEvent(r: Row): BootEvent {
  return { at: r.at, mac: r.mac, stage: r.stage, node: r.node, ...(r.worker ? { worker: r.worker } : {}), ...(r.detail ? { detail: r.detail } : {}) };
}
