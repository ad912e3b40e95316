import { Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { Client, Pool, PoolClient } from 'pg';
import { ApiError } from '../../../shared/http/api-error';
import { AppConfig } from '../../config/app-config';
import { MIGRATIONS } from './migrations';

/** No SQLSTATE, or class 08 (connection), 57P (shutdown), 53 (resources): the database is not there. */
/** lock_timeout, statement_timeout: the connection is fine, the wait was too long. */
function isServerTimeout(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === '55P03' || code === '57014';
}

function isConnectionError(e: unknown): boolean {
  if (!e || typeof e !== 'object') return false;
  const code = (e as { code?: unknown }).code;
  if (typeof code === 'string') return /^(08|57P|53|EC|EN|EH|ET)/.test(code);
  return /Connection terminated|connect|timeout/i.test((e as Error).message ?? '');
}

function unavailable(e: unknown): ApiError {
  return new ApiError(503, `the database is unavailable: ${(e as Error).message}`);
}

/** Advisory lock ids (classid 'ku', objid below): one namespace for every Kurrent lock. */
export const LOCK = { migrate: 1, ledger: 2, audit: 3, documents: 4, credentials: 5, reconciler: 6, bootEvents: 7 } as const;
const CLASS = 0x6b75;

/**
 * A value as one statement parameter, read by `$n::json` (json_to_recordset,
 * json_array_elements_text), in place of array parameters, which pg renders by string
 * concatenation (a tree of small strings and escaped copies per element). A Buffer, which pg sends
 * in binary, and json's binary form is its text (jsonb's is not: cast to json). pg holds a
 * statement's parameters until the server answers, which a storm's scavenges outlive: as strings
 * they were promoted to die in the old generation, and RSS rose through a 20 s storm at 100,000
 * seats to 715-760 MB; a Buffer's bytes are outside V8's heap, and full GCs came during the storm
 * (at most 577 MB).
 */
export function jsonParam(value: unknown): Buffer {
  const text = JSON.stringify(value);
  // PostgreSQL refuses a NUL or an unpaired surrogate in a JSON string (JSON.stringify escapes
  // them as \u0000 and \udXXX), and one such string would fail its whole batch again at every
  // retry. They become U+FFFD, as the UTF-8 encoding of text parameters turned an unpaired
  // surrogate before. Only an escape after an even run of backslashes is one (\\u0000 is text).
  return Buffer.from(text.includes('\\u') ? text.replace(REFUSED_ESCAPE, '$1\\ufffd') : text);
}

const REFUSED_ESCAPE = /(?<!\\)((?:\\\\)*)\\u(?:0000|d[89a-f][0-9a-f]{2})/gi;

/**
 * The PostgreSQL connection of a control plane (IPXE_CP_STORE=postgres): a pool for queries and
 * transactions, one dedicated client for LISTEN, sessions for leases. All SQL of the app goes
 * through here, so tests and the file store never touch `pg`.
 */
@Injectable()
export class Database implements OnApplicationShutdown {
  private readonly log = new Logger('Database');
  private pool: Pool | null = null;
  private ready: Promise<void> | null = null;
  private listener: Client | null = null;
  private readonly handlers = new Map<string, ((payload: string) => void)[]>();
  private closing = false;

  constructor(private readonly config: AppConfig) {}

  /** Connects and migrates once; every PostgreSQL user awaits it in its onModuleInit. */
  init(): Promise<void> {
    this.ready ??= this.connect();
    return this.ready;
  }

  /**
   * Every wait is bounded: connecting, each query's answer (client side: a stopped or partitioned
   * server), locks and statements (server side), an idle transaction; TCP keepalives notice a
   * dead peer on idle connections.
   */
  private clientOptions(role: string) {
    const t = this.config.databaseTimeoutMs;
    return {
      connectionString: this.config.databaseUrl,
      application_name: `kurrent:${this.config.nodeId}${role}`,
      connectionTimeoutMillis: t,
      // Client side, the backstop for a server that stopped answering: longer than the server-side
      // bounds, since it also counts time this process's busy event loop took to read the answer.
      query_timeout: 3 * t,
      statement_timeout: t,
      lock_timeout: t,
      idle_in_transaction_session_timeout: 2 * t,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    };
  }

  private async connect(): Promise<void> {
    this.pool = new Pool({ ...this.clientOptions(''), max: 10 });
    // A broken idle connection is replaced by the pool; it must not crash the process.
    this.pool.on('error', (err) => this.log.warn(`idle database connection failed: ${err.message}`));
    await this.tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1, $2)', [CLASS, LOCK.migrate]);
      await c.query('CREATE TABLE IF NOT EXISTS kurrent_migrations (id int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
      const done = new Set((await c.query<{ id: number }>('SELECT id FROM kurrent_migrations')).rows.map((r) => r.id));
      const newer = [...done].filter((id) => !MIGRATIONS.some((m) => m.id === id));
      if (newer.length) throw new Error(`the database has migration(s) ${newer.join(', ')} this version of Kurrent does not know: upgrade it`);
      for (const m of MIGRATIONS) {
        if (done.has(m.id)) continue;
        await c.query(m.sql);
        await c.query('INSERT INTO kurrent_migrations (id, name) VALUES ($1, $2)', [m.id, m.name]);
        this.log.log(`applied migration ${m.id}: ${m.name}`);
      }
    });
  }

  async query<R extends object = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<{ rows: R[]; rowCount: number | null }> {
    try {
      return await this.pool!.query<R>(text, params);
    } catch (e) {
      throw isConnectionError(e) ? unavailable(e) : e;
    }
  }

  /**
   * One transaction (READ COMMITTED); `lock` takes that advisory lock first, held to the end. A
   * database that cannot be reached or drops the connection is a 503 naming it (the boot path
   * keeps answering from memory meanwhile); SQL errors reach the caller as they are.
   */
  /** Takes a second advisory lock inside a transaction (always after its first: ledger, then audit). */
  async xactLock(c: PoolClient, lock: number): Promise<void> {
    await c.query('SELECT pg_advisory_xact_lock($1, $2)', [CLASS, lock]);
  }

  async tx<R>(fn: (c: PoolClient) => Promise<R>, lock?: number): Promise<R> {
    let c: PoolClient;
    try {
      c = await this.pool!.connect();
    } catch (e) {
      throw unavailable(e);
    }
    // A checked-out client has no listener of the pool's: a dropped connection must not crash the process.
    let lost = false;
    const onError = (err: Error) => {
      lost = true;
      this.log.warn(`database connection lost mid-transaction: ${err.message}`);
    };
    c.on('error', onError);
    try {
      await c.query('BEGIN');
      if (lock !== undefined) await c.query('SELECT pg_advisory_xact_lock($1, $2)', [CLASS, lock]);
      const r = await fn(c);
      await c.query('COMMIT');
      return r;
    } catch (e) {
      if (isConnectionError(e)) lost = true;
      else await c.query('ROLLBACK').catch(() => (lost = true));
      throw isConnectionError(e) || isServerTimeout(e) ? unavailable(e) : e;
    } finally {
      c.off('error', onError);
      // A client whose connection failed is destroyed, never handed out again.
      c.release(lost || undefined);
    }
  }

  /** Calls fn for every NOTIFY on channel (and with '' after a reconnect: catch up in full). */
  async listen(channel: string, fn: (payload: string) => void): Promise<void> {
    const list = this.handlers.get(channel) ?? [];
    list.push(fn);
    this.handlers.set(channel, list);
    // Repositories start concurrently: one listener connection for all of them, opened once.
    if (!this.listener) await (this.opening ??= this.openListener().finally(() => (this.opening = null)));
    await this.listener!.query(`LISTEN ${channel}`);
  }

  private opening: Promise<void> | null = null;

  private async openListener(): Promise<void> {
    const c = new Client(this.clientOptions(':listen'));
    c.on('notification', (n) => {
      for (const h of this.handlers.get(n.channel) ?? []) h(n.payload ?? '');
    });
    c.on('error', (err) => {
      if (this.closing) return;
      this.log.warn(`LISTEN connection lost (${err.message}); reconnecting`);
      this.listener = null;
      const retry = () =>
        this.openListener()
          .then(() => {
            for (const [, hs] of this.handlers) for (const h of hs) h('');
          })
          .catch(() => setTimeout(retry, 1000).unref());
      setTimeout(retry, 200).unref();
    });
    await c.connect();
    for (const ch of this.handlers.keys()) await c.query(`LISTEN ${ch}`);
    this.listener = c;
  }

  /**
   * A session-level advisory lock held on its own connection for as long as this process lives
   * (the reconciler lease): true when taken. PostgreSQL drops it when the connection dies, so a
   * killed holder frees it at once.
   */
  async tryLease(lock: number): Promise<boolean> {
    this.leases ??= new Map();
    if (this.leases.has(lock)) return true;
    const c = new Client(this.clientOptions(':lease'));
    c.on('error', () => {
      this.leases?.delete(lock);
    });
    await c.connect();
    const got = (await c.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [CLASS, lock])).rows[0].ok;
    if (!got) {
      await c.end();
      return false;
    }
    this.leases.set(lock, c);
    return true;
  }
  private leases: Map<number, Client> | null = null;

  async onApplicationShutdown(): Promise<void> {
    this.closing = true;
    for (const c of this.leases?.values() ?? []) await c.end().catch(() => undefined);
    await this.listener?.end().catch(() => undefined);
    await this.pool?.end().catch(() => undefined);
  }
}
