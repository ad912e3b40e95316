import { ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync, sign } from 'node:crypto';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { Client } from 'pg';
import { AuditRetentionService } from '../../src/control-plane/audit/audit-retention.service';
import { AuditService } from '../../src/control-plane/audit/audit.service';
import { BootService } from '../../src/control-plane/boot/boot.service';
import { Clock } from '../../src/control-plane/common/clock';
import { CredentialRepository } from '../../src/control-plane/repositories/credentials/credential.repository';
import { AppConfig } from '../../src/control-plane/config/app-config';
import type { BootEvent } from '../../src/control-plane/repositories/boot-events/boot-event.repository';
import { BootSnapshotFile } from '../../src/control-plane/repositories/boot-events/boot-snapshot-file';
import { BOOT_EVENTS_PER_STATEMENT, PgBootEventRepository } from '../../src/control-plane/repositories/boot-events/pg-boot-event.repository';
import { LedgerRepository } from '../../src/control-plane/repositories/ledger/ledger.repository';
import { TELEMETRY_PER_STATEMENT } from '../../src/control-plane/repositories/ledger/pg-ledger.repository';
import { FINGERPRINT_FIELDS, newDevice } from '../../src/control-plane/repositories/ledger/records';
import { Database } from '../../src/control-plane/repositories/pg/database';
import { freePort, startApp, tempDir, TestApp } from '../helpers/app';
import { PgCluster, startPostgres } from '../helpers/postgres';

/**
 * Two control planes on one real PostgreSQL (IPXE_CP_STORE=postgres), as production processes
 * (dist/src/control-plane/main.js): a concurrent mixed write storm through both, one of them SIGKILLed in the
 * middle, and then: no invariant broken in the tables, every acknowledged write present, the
 * survivor's cache equal to the tables, the audit read with since=cursor during the storm missing
 * no id, and the reconciler lease moved to the survivor.
 */

const MAIN = path.join(__dirname, '../../dist/src/control-plane/main.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class Node {
  proc: ChildProcess | null = null;
  out = '';
  constructor(
    readonly id: string,
    readonly port: number,
    readonly dir: string,
    readonly url: string,
  ) {}

  async start(): Promise<void> {
    this.out = '';
    const proc = spawn(process.execPath, [MAIN], {
      env: {
        PATH: process.env.PATH,
        IPXE_CP_PORT: String(this.port),
        IPXE_CP_HOST: '127.0.0.1',
        IPXE_CP_CONFIG_DIR: path.join(this.dir, 'config'),
        IPXE_CP_STATE_DIR: path.join(this.dir, 'state'),
        IPXE_CP_DNSMASQ_DIR: path.join(this.dir, 'dnsmasq'),
        IPXE_CP_LOG_LEVEL: 'warn',
        IPXE_CP_STORE: 'postgres',
        IPXE_CP_DATABASE_URL: this.url,
        IPXE_CP_NODE_ID: this.id,
        IPXE_CP_LEASE_SECONDS: '1',
        IPXE_CP_RECONCILE_SECONDS: '0',
        IPXE_CP_REPORT_FLUSH_MS: '50',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc = proc;
    proc.stdout!.on('data', (b) => (this.out += b));
    proc.stderr!.on('data', (b) => (this.out += b));
    const end = Date.now() + 30_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode) throw new Error(`${this.id} exited at start: ${this.out}`);
      try {
        if ((await this.req('GET', '/healthz')).status === 200) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > end) throw new Error(`${this.id} did not start: ${this.out}`);
      await sleep(50);
    }
  }

  kill(): void {
    this.proc?.kill('SIGKILL');
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode) return;
    await new Promise<void>((r) => {
      p.once('exit', () => r());
      p.kill('SIGTERM');
    });
  }

  async req(method: string, url: string, body?: unknown): Promise<{ status: number; body: any }> {
    const r = await fetch(`http://127.0.0.1:${this.port}${url}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(20_000),
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : undefined };
  }
}

/** A TCP proxy on loopback that hands each new connection to the next upstream in turn (HAProxy's roundrobin). */
async function roundRobin(ports: number[]): Promise<{ port: number; counts: number[]; close: () => Promise<void> }> {
  const counts = ports.map(() => 0);
  let next = 0;
  const server = net.createServer((client) => {
    const i = next++ % ports.length;
    counts[i]++;
    const up = net.connect(ports[i], '127.0.0.1');
    client.pipe(up).pipe(client);
    const end = () => {
      client.destroy();
      up.destroy();
    };
    client.on('error', end).on('close', end);
    up.on('error', end).on('close', end);
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { port, counts, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** One GET on a connection of its own (so a round-robin proxy alternates request by request). */
function getOnce(port: number, url: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: url, agent: false, timeout: 20_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
  });
}

/** A device with its P-256 key: signs nonce (32 bytes) || mac (6 bytes), raw r || s. */
function simDevice(macAddr: string) {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return {
    mac: macAddr,
    pubkey: publicKey.export({ format: 'der', type: 'spki' }).subarray(-65).toString('hex'),
    sign: (nonce: string) => sign('sha256', Buffer.concat([Buffer.from(nonce, 'hex'), Buffer.from(macAddr.replace(/:/g, ''), 'hex')]), { key: privateKey, dsaEncoding: 'ieee-p1363' }).toString('hex'),
  };
}

const mac = (i: number) => `02:00:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;

describe('two control planes on one PostgreSQL', () => {
  let pg: PgCluster;
  let db: Client;
  let a: Node;
  let b: Node;

  beforeAll(async () => {
    pg = await startPostgres();
    const url = pg.createDb('kurrent');
    db = new Client({ connectionString: url });
    await db.connect();
    a = new Node('cp-a', await freePort(), tempDir('kurrent-cp-a-'), url);
    b = new Node('cp-b', await freePort(), tempDir('kurrent-cp-b-'), url);
    await a.start();
    // a starts first and takes the reconciler lease; b waits for it.
    for (let i = 0; i < 100 && (await a.req('POST', '/reconcile')).status !== 200; i++) await sleep(100);
    await b.start();
  });

  afterAll(async () => {
    await a?.stop();
    await b?.stop();
    await db?.end().catch(() => undefined);
    pg?.thaw(); // a black-hole test that failed half-way must not leave the server stopped
    pg?.stop();
  });

  it('each control plane holds one LISTEN connection, however many repositories listen (they start concurrently)', async () => {
    const r = await db.query<{ application_name: string; n: string }>(
      "SELECT application_name, count(*) AS n FROM pg_stat_activity WHERE application_name LIKE 'kurrent:%:listen' GROUP BY application_name ORDER BY application_name",
    );
    expect(r.rows.map((x) => [x.application_name, Number(x.n)])).toEqual([
      ['kurrent:cp-a:listen', 1],
      ['kurrent:cp-b:listen', 1],
    ]);
  });

  it('a mixed write storm through both, one SIGKILLed mid-storm: invariants hold, acknowledged writes are there, the lease moves', async () => {
    expect((await a.req('POST', '/reconcile')).status).toBe(200);
    expect((await b.req('POST', '/reconcile')).status).toBe(409);

    // What either node writes, the other serves (NOTIFY-driven cache, milliseconds).
    for (let i = 0; i < 30; i++) expect((await (i % 2 ? a : b).req('POST', '/devices', { mac: mac(i) })).status).toBe(201);
    for (let i = 0; i < 15; i++) expect((await (i % 2 ? b : a).req('POST', '/workers', { worker_id: `w${i}` })).status).toBe(201);
    const seen = async (n: Node) => ((await n.req('GET', '/devices')).body as unknown[]).length;
    for (let i = 0; i < 100 && ((await seen(a)) !== 30 || (await seen(b)) !== 30); i++) await sleep(20);
    expect([await seen(a), await seen(b)]).toEqual([30, 30]);

    // A reader following the audit with since=cursor on b during the whole storm.
    const readIds: number[] = [];
    let reading = true;
    const reader = (async () => {
      let cursor = 0;
      while (reading) {
        const page = (await b.req('GET', `/operations?since=${cursor}&limit=1000`)).body;
        for (const e of page.entries) readIds.push(e.id);
        cursor = page.next_cursor;
        await sleep(5);
      }
      const page = (await b.req('GET', `/operations?since=${cursor}&limit=10000`)).body;
      for (const e of page.entries) readIds.push(e.id);
    })();

    // The storm: binds (forced or not), unbinds, registrations, worker creates, through both.
    // mulberry32: a seeded, well-mixed sequence (reproducible storms).
    let seed = 42;
    const rnd = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) % n;
    };
    const acked = { registered: [] as string[], workers: [] as string[], binds: [] as { mac: string; worker: string }[] };
    const fiveXX: string[] = [];
    let killed = false;
    let next = 1000;
    const op = async (n: Node): Promise<void> => {
      const k = rnd(10);
      let r: { status: number; body: any };
      let what: string;
      try {
        if (k < 5) {
          const m = mac(rnd(30));
          const w = `w${rnd(15)}`;
          const force = rnd(3) === 0;
          what = `bind ${m} ${w}`;
          r = await n.req('POST', `/devices/${m}/bind?worker_id=${w}&force=${force}`);
          if (r.status === 200) acked.binds.push({ mac: m, worker: w });
        } else if (k < 7) {
          what = 'unbind';
          r = await n.req('DELETE', `/devices/${mac(rnd(30))}/bind`);
        } else if (k < 9) {
          const m = mac(next++);
          what = `register ${m}`;
          r = await n.req('POST', '/devices', { mac: m });
          if (r.status === 201) acked.registered.push(m);
        } else {
          const w = `s${next++}`;
          what = `worker ${w}`;
          r = await n.req('POST', '/workers', { worker_id: w });
          if (r.status === 201) acked.workers.push(w);
        }
      } catch (e) {
        // Only the killed node may fail to answer.
        if (n === b || !killed) throw e;
        return;
      }
      if (r.status >= 500) fiveXX.push(`${n.id} ${what}: ${r.status} ${JSON.stringify(r.body)}`);
      else expect([200, 201, 404, 409]).toContain(r.status);
    };
    const worker = async (n: Node, count: number) => {
      for (let i = 0; i < count; i++) {
        if (n === a && killed) return;
        await op(n);
      }
    };
    const storm = Promise.all([worker(a, 120), worker(a, 120), worker(a, 120), worker(b, 150), worker(b, 150), worker(b, 150)]);
    await sleep(400);
    killed = true;
    a.kill();
    await storm;
    reading = false;
    await reader;
    expect(fiveXX).toEqual([]);
    expect(acked.binds.length).toBeGreaterThan(50);
    console.log(`storm: ${acked.binds.length} binds, ${acked.registered.length} registrations, ${acked.workers.length} workers acknowledged; ${readIds.length} audit ids read during it`);

    // The lease moves to the survivor within seconds of the kill (a's session is gone).
    let moved = false;
    for (let i = 0; i < 100 && !moved; i++) {
      moved = (await b.req('POST', '/reconcile')).status === 200;
      if (!moved) await sleep(200);
    }
    expect(moved).toBe(true);

    // Invariants, in the tables themselves.
    const devs = (await db.query('SELECT mac, state, bound_worker_id FROM devices ORDER BY mac')).rows;
    const workers = new Set((await db.query('SELECT worker_id FROM workers')).rows.map((r) => r.worker_id));
    const owners = new Map<string, string>();
    for (const d of devs) {
      expect(d.state === 'bound').toBe(d.bound_worker_id !== null);
      if (d.bound_worker_id) {
        expect(workers.has(d.bound_worker_id)).toBe(true);
        expect(owners.has(d.bound_worker_id)).toBe(false);
        owners.set(d.bound_worker_id, d.mac);
      }
    }
    // Every acknowledged write is there: creations (never undone in the storm), and an audit entry per acknowledged bind.
    const macs = new Set(devs.map((d) => d.mac));
    for (const m of acked.registered) expect(macs.has(m)).toBe(true);
    for (const w of acked.workers) expect(workers.has(w)).toBe(true);
    const audit = (await db.query("SELECT id, entry FROM audit ORDER BY id")).rows as { id: string; entry: any }[];
    const binds = new Set(audit.filter((r) => r.entry.op === 'device.bind').map((r) => `${r.entry.mac} ${r.entry.worker_id}`));
    for (const x of acked.binds) expect(binds.has(`${x.mac} ${x.worker}`)).toBe(true);
    // Audit ids are unique (the primary key) and arrive in id order: the reader on b, following
    // since=cursor while both wrote, saw every id there is (an id committed after a higher one
    // would have been skipped).
    const ids = audit.map((r) => Number(r.id));
    expect(readIds).toEqual(ids.filter((id) => id <= readIds[readIds.length - 1]));
    expect(new Set(ids).size).toBe(ids.length);

    // The survivor's cache is the tables.
    const view = ((await b.req('GET', '/devices')).body as any[]).map((d) => [d.mac, d.state, d.bound_worker_id]).sort();
    expect(view).toEqual(devs.map((d) => [d.mac, d.state, d.bound_worker_id]).sort());

    // The killed node comes back with the same state, and b keeps the lease.
    await a.start();
    const viewA = ((await a.req('GET', '/devices')).body as any[]).map((d) => [d.mac, d.state, d.bound_worker_id]).sort();
    expect(viewA).toEqual(view);
    expect((await a.req('POST', '/reconcile')).status).toBe(409);
    // The lease's moves are audited: b took it over from a (a's first start is logged, not audited).
    const moves = (await db.query("SELECT entry->>'node' AS node FROM audit WHERE entry->>'op' = 'reconciler.lease' ORDER BY id")).rows.map((r) => r.node);
    expect(moves).toEqual(['cp-b']);
  });

  it('an audit insert the database refuses: a ledger, credential or settings change is refused with it (nothing changes), other entries are retried in order', async () => {
    const url = pg.createDb('audit_retry');
    const t = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_NODE_ID: 'solo' });
    const c = new Client({ connectionString: url });
    await c.connect();
    try {
      expect((await t.req('POST', '/workers', { worker_id: 'keyed' })).status).toBe(201);
      const issued = await t.req('PUT', '/workers/keyed/credential', { generate: true });
      expect(issued.status).toBe(200);
      const secretRow = async () => (await c.query("SELECT body->>'dhchap_key' AS k, version FROM credentials WHERE worker_id = 'keyed'")).rows[0];
      const before = await secretRow();
      expect((await t.req('PUT', '/settings/auto-register', { enabled: false })).status).toBe(200);
      await c.query('ALTER TABLE audit RENAME TO audit_away');
      // The change and its entry are one transaction: neither, and a 503 naming why.
      const refused = await t.req('POST', '/devices', { mac: '02:00:00:00:0a:01' });
      expect(refused.status).toBe(503);
      expect(refused.body.message).toMatch(/^the database refused the audit entry, nothing was changed: /);
      expect((await c.query("SELECT mac FROM devices WHERE mac = '02:00:00:00:0a:01'")).rows).toEqual([]);
      expect((await t.req('GET', '/devices/02:00:00:00:0a:01')).status).toBe(404);
      // A credential rotation as well: the secret is not changed without its audit entry.
      const rotation = await t.req('PUT', '/workers/keyed/credential', { generate: true });
      expect([rotation.status, rotation.body.message]).toEqual([503, expect.stringMatching(/^the database refused the audit entry, nothing was changed: /)]);
      expect(await secretRow()).toEqual(before);
      expect((await t.req('GET', '/workers/keyed/credential')).body.dhchap_key_sha256).toBe(issued.body.dhchap_key_sha256);
      // A settings change too (auto-register was turned off before the table went away).
      const setting = await t.req('PUT', '/settings/auto-register', { enabled: true });
      expect([setting.status, setting.body.message]).toEqual([503, expect.stringMatching(/^the database refused the audit entry, nothing was changed: /)]);
      expect((await t.req('GET', '/settings/auto-register')).body).toEqual({ enabled: false });
      // An entry that describes no change (an unknown device turned away) is kept in order and retried.
      for (const mac of ['02:00:00:00:0b:01', '02:00:00:00:0b:02']) expect((await t.req('GET', `/devices/report?mac=${mac}`)).status).toBe(200);
      await c.query('ALTER TABLE audit_away RENAME TO audit');
      let ops: { op: string; mac?: string }[] = [];
      for (let i = 0; i < 100 && ops.filter((e) => e.op === 'device.register.refused').length < 2; i++) {
        await sleep(50);
        ops = (await c.query('SELECT entry FROM audit ORDER BY id')).rows.map((r) => r.entry);
      }
      expect(ops.filter((e) => e.op === 'device.register.refused').map((e) => e.mac)).toEqual(['02:00:00:00:0b:01', '02:00:00:00:0b:02']);
      expect(ops.filter((e) => e.op === 'settings.auto_register')).toEqual([expect.objectContaining({ enabled: false, previous: true })]);
      expect((await t.req('POST', '/devices', { mac: '02:00:00:00:0a:01' })).status).toBe(201);
      const reg = (await c.query("SELECT entry FROM audit WHERE entry->>'op' = 'device.register'")).rows.map((r) => r.entry.mac);
      expect(reg).toEqual(['02:00:00:00:0a:01']);
    } finally {
      await c.end();
      await t.close();
    }
  });

  it('a black-holed database (server and backends SIGSTOPped): writes answer 503 within the bound, boots go on, all recovers after', async () => {
    const url = pg.createDb('blackhole');
    const t = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_NODE_ID: 'solo3', IPXE_CP_DATABASE_TIMEOUT_MS: '1000' });
    try {
      await t.req('POST', '/devices', { mac: '02:00:00:00:0c:01' });
      await t.req('POST', '/workers', { worker_id: 'bw1', mac: '02:00:00:00:0c:01' });
      const answer = (await t.req('GET', '/boot-vars?mac=02:00:00:00:0c:01')).text;
      expect(answer).toContain('boot vars for bw1');
      pg.freeze();
      try {
        // Both writes are answered (not hung): the second queued behind the first's write lock.
        const [w1, w2] = await Promise.all([t.req('POST', '/devices', { mac: '02:00:00:00:0c:02' }), t.req('POST', '/devices', { mac: '02:00:00:00:0c:03' })]);
        expect([w1.status, w2.status]).toEqual([503, 503]);
        expect(w1.body.message).toMatch(/^the database is unavailable: /);
        expect((await t.req('GET', '/boot-vars?mac=02:00:00:00:0c:01')).text).toBe(answer);
      } finally {
        pg.thaw();
      }
      let status = 0;
      for (let i = 0; i < 100 && status !== 201; i++) {
        status = (await t.req('POST', '/devices', { mac: '02:00:00:00:0c:02' })).status;
        if (status !== 201) await sleep(100);
      }
      expect(status).toBe(201);
    } finally {
      await t.close();
    }
  });

  it('signed boots through two control planes behind a round-robin proxy: every one succeeds, a replay on the other control plane is refused', async () => {
    const url = pg.createDb('nonces');
    const c = new Node('cp-c', await freePort(), tempDir('kurrent-cp-c-'), url);
    const d = new Node('cp-d', await freePort(), tempDir('kurrent-cp-d-'), url);
    const proxy = await roundRobin([c.port, d.port]);
    try {
      await c.start();
      await d.start();
      const devices = Array.from({ length: 20 }, (_, i) => simDevice(mac(0x0d00 + i)));
      expect((await c.req('POST', '/devices/registration-window', { ttl_minutes: 10 })).status).toBe(201);
      for (const dev of devices) {
        // Reports alternate too: the window and the key claims hold across both.
        expect((await getOnce(proxy.port, `/devices/report?mac=${dev.mac}&pubkey=${dev.pubkey}`)).status).toBe(200);
        expect((await c.req('POST', '/workers', { worker_id: `sw-${dev.mac.slice(-2)}`, mac: dev.mac, boot: { menu_default: 'shell' } })).status).toBe(201);
      }
      expect((await d.req('PUT', '/settings/signature-enforcement', { enabled: true })).body).toEqual({ enabled: true, keyless_bound_devices: [] });
      // c learns the setting and d the bindings through the database (NOTIFY): polled to a deadline.
      for (const end = Date.now() + 10_000; Date.now() < end; await sleep(50)) {
        const seen = await c.req('GET', '/settings/signature-enforcement');
        const bound = await d.req('GET', `/devices/${devices[19].mac}`);
        if (seen.body.enabled && bound.body.state === 'bound') break;
      }
      let ok = 0;
      const used: { dev: (typeof devices)[0]; nonce: string }[] = [];
      for (const dev of devices) {
        const n = /set nonce ([0-9a-f]{64})/.exec((await getOnce(proxy.port, `/devices/challenge?mac=${dev.mac}`)).text)![1];
        const vars = await getOnce(proxy.port, `/boot-vars?mac=${dev.mac}&nonce=${n}&sig=${dev.sign(n)}`);
        const menu = await getOnce(proxy.port, `/boot-menu?mac=${dev.mac}&nonce=${n}&sig=${dev.sign(n)}`);
        if (vars.text.includes('set menu-default shell') && menu.text.startsWith('#!ipxe\n# boot menu for sw-')) ok++;
        used.push({ dev, nonce: n });
      }
      expect(ok).toBe(devices.length);
      // Every request took a connection of its own: both control planes answered half of them.
      expect(proxy.counts[0]).toBeGreaterThanOrEqual(40);
      expect(proxy.counts[1]).toBeGreaterThanOrEqual(40);
      // Replays, each on both control planes: spent everywhere.
      for (const { dev, nonce } of used.slice(0, 4)) {
        for (const node of [c, d]) {
          expect((await getOnce(node.port, `/boot-vars?mac=${dev.mac}&nonce=${nonce}&sig=${dev.sign(nonce)}`)).text).toBe('#!ipxe\n# no per-worker boot vars found\n');
        }
      }
      // A fresh nonce spent on c is refused on d.
      const dev = devices[5];
      const n = /set nonce ([0-9a-f]{64})/.exec((await getOnce(d.port, `/devices/challenge?mac=${dev.mac}`)).text)![1];
      expect((await getOnce(c.port, `/boot-vars?mac=${dev.mac}&nonce=${n}&sig=${dev.sign(n)}`)).text).toContain('set menu-default shell');
      expect((await getOnce(d.port, `/boot-vars?mac=${dev.mac}&nonce=${n}&sig=${dev.sign(n)}`)).text).toBe('#!ipxe\n# no per-worker boot vars found\n');
      const ndb = new Client({ connectionString: url });
      await ndb.connect();
      const denied = (await ndb.query("SELECT entry->>'reason' AS reason FROM audit WHERE entry->>'op' = 'boot.denied'")).rows.map((r) => r.reason);
      await ndb.end();
      expect(denied.length).toBeGreaterThan(0);
      expect(new Set(denied)).toEqual(new Set(['replayed']));
    } finally {
      await proxy.close();
      await c.stop();
      await d.stop();
    }
  });

  it('NOTIFY lost (a half-open LISTEN connection): the other control plane still serves the new binding and settings within the bound; /healthz fails past it', async () => {
    const url = pg.createDb('staleness');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_SYNC_MS: '200', IPXE_CP_DATABASE_TIMEOUT_MS: '500', IPXE_CP_STALENESS_MAX_MS: '1500' };
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'stale-a' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'stale-b' });
    try {
      const m1 = '02:00:00:00:0e:01';
      await na.req('POST', '/devices', { mac: m1 });
      await na.req('POST', '/workers', { worker_id: 'seat-1', mac: m1 });
      await na.req('POST', '/workers', { worker_id: 'seat-2' });
      const served = async () => (await nb.req('GET', `/boot-vars?mac=${m1}`)).text;
      for (const end = Date.now() + 10_000; Date.now() < end && !(await served()).includes('seat-1'); ) await sleep(50);
      expect(await served()).toContain('boot vars for seat-1');
      // b stops hearing notifications, as behind a connection that died without a FIN.
      await (nb.app.get(Database) as unknown as { listener: Client }).listener.query('UNLISTEN *');
      // The MAC moves to another seat on a; enforcement goes on.
      expect((await na.req('DELETE', `/devices/${m1}/bind`)).status).toBe(200);
      expect((await na.req('PUT', '/workers/seat-2/mac', { mac: m1 })).status).toBe(200);
      expect((await na.req('PUT', '/settings/signature-enforcement', { enabled: true, force: true })).status).toBe(200);
      let moved = false;
      for (const end = Date.now() + 10_000; Date.now() < end && !moved; ) {
        moved = (await nb.req('GET', '/settings/signature-enforcement')).body.enabled === true;
        if (!moved) await sleep(20);
      }
      // (Reached within a period or two: timings are the benches' business, the deadline is generous.)
      expect(moved).toBe(true);
      expect((await nb.req('GET', '/workers/seat-2')).body.mac).toBe(m1);
      expect((await nb.req('GET', '/healthz')).body).toEqual({ status: 'ok' });
      const metrics = (await nb.req('GET', '/metrics')).text;
      const staleness = Number(/^kurrent_store_staleness_seconds (\S+)$/m.exec(metrics)![1]);
      expect(Number.isFinite(staleness) && staleness >= 0).toBe(true);
      // The database stops answering: b cannot catch up; past the bound /healthz says so.
      pg.freeze();
      try {
        let h = await nb.req('GET', '/healthz');
        for (const end = Date.now() + 10_000; Date.now() < end && h.status === 200; await sleep(100)) h = await nb.req('GET', '/healthz');
        expect(h.status).toBe(503);
        expect(h.body.message).toMatch(/^stale: this control plane last caught up with the database \d+ ms ago \(bound IPXE_CP_STALENESS_MAX_MS=1500\)$/);
      } finally {
        pg.thaw();
      }
      let back = 0;
      for (const end = Date.now() + 10_000; Date.now() < end && back !== 200; await sleep(100)) back = (await nb.req('GET', '/healthz')).status;
      expect(back).toBe(200);
    } finally {
      await nb.close();
      await na.close();
    }
  });

  it("another control plane's telemetry and registrations leave this one's cached boot answers; its binding change refreshes exactly the one it touches", async () => {
    const url = pg.createDb('answer_cache');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_AUTO_REGISTER: 'true', IPXE_CP_REPORT_FLUSH_MS: '20' };
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'cache-a' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'cache-b' });
    try {
      const macs = ['02:00:00:00:0f:a1', '02:00:00:00:0f:a2'];
      for (const [i, m] of macs.entries()) {
        await na.req('POST', '/devices', { mac: m });
        await na.req('POST', '/workers', { worker_id: `cw${i}`, mac: m });
      }
      const seen = async (m: string, text: string) => {
        for (const end = Date.now() + 10_000; Date.now() < end; await sleep(20)) if ((await nb.req('GET', `/boot-vars?mac=${m}`)).text.includes(text)) return;
        throw new Error(`b never answered ${text} for ${m}`);
      };
      await seen(macs[0], 'boot vars for cw0');
      await seen(macs[1], 'boot vars for cw1');
      // Twenty reports per device in a second are twenty boots that never reach /boot-vars: a boot
      // loop, which under the default policy would (rightly) put both on hold and change their
      // answers. The loop rule is not what this test is about: loops are only marked here.
      expect((await na.req('PUT', '/settings/boot-policy', { loop_action: 'keep-looping' })).status).toBe(200);
      for (const end = Date.now() + 10_000; Date.now() < end && (await nb.req('GET', '/settings/boot-policy')).body.loop_action !== 'keep-looping'; ) await sleep(20);
      await seen(macs[0], 'boot vars for cw0');
      await seen(macs[1], 'boot vars for cw1');
      const stats = nb.app.get(BootService).cacheStats;
      // a: a boot storm's telemetry of both devices, and new devices registering.
      for (let i = 0; i < 20; i++) {
        for (const m of macs) await na.req('GET', `/devices/report?mac=${m}&serial=S${i}`);
        await na.req('GET', `/devices/report?mac=02:00:00:00:0e:${(0x10 + i).toString(16)}`);
      }
      // b has caught up with all of it (the last registration is visible there) ...
      for (const end = Date.now() + 10_000; Date.now() < end && (await nb.req('GET', '/devices/02:00:00:00:0e:23')).status !== 200; ) await sleep(20);
      for (const end = Date.now() + 10_000; Date.now() < end && (await nb.req('GET', `/devices/${macs[0]}`)).body.fingerprint?.serial !== 'S19'; ) await sleep(20);
      const [h0, m0] = [stats.hits, stats.misses];
      // ... and still answers both from its cache.
      for (const m of macs) await nb.req('GET', `/boot-vars?mac=${m}`);
      expect([stats.hits - h0, stats.misses - m0]).toEqual([2, 0]);
      // a unbinds the first device: b renders that one again, and only that one.
      expect((await na.req('DELETE', `/devices/${macs[0]}/bind`)).status).toBe(200);
      await seen(macs[0], 'a pooled device (waiting to be bound');
      const m1 = stats.misses;
      expect((await nb.req('GET', `/boot-vars?mac=${macs[1]}`)).text).toContain('boot vars for cw1');
      expect(stats.misses).toBe(m1);
    } finally {
      await nb.close();
      await na.close();
    }
  });

  it("another control plane's report telemetry reaches this one as the four telemetry fields: last_seen in place, a new fingerprint a new record that search finds", async () => {
    const url = pg.createDb('peer_telemetry');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_REPORT_FLUSH_MS: '20' };
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'tel-a' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'tel-b' });
    const peer = new Client({ connectionString: url });
    await peer.connect();
    try {
      const m = '02:00:00:00:0d:01';
      expect((await na.req('POST', '/devices', { mac: m })).status).toBe(201);
      const ledgerB = nb.app.get(LedgerRepository);
      /** Polls b's record until it holds a's last_seen (and first_seen) for m. */
      const reachesB = async () => {
        const want = (await na.req('GET', `/devices/${m}`)).body;
        for (const end = Date.now() + 10_000; Date.now() < end; await sleep(20)) {
          const rec = ledgerB.devices.get(m);
          if (rec && rec.last_seen === want.last_seen && rec.first_seen === want.first_seen) return rec;
        }
        throw new Error(`b never held last_seen ${want.last_seen} for ${m}`);
      };
      await na.req('GET', `/devices/report?mac=${m}&serial=S1&product=Seat`);
      const first = await reachesB();
      const firstSeen = first.last_seen;
      expect(first.fingerprint).toMatchObject({ serial: 'S1', product: 'Seat' });
      // The same machine booting again through a: b's record moves in place.
      for (let i = 0; i < 2; i++) {
        const before = (await na.req('GET', `/devices/${m}`)).body.last_seen;
        // A later second (the clock's resolution), so last_seen does move.
        while (Date.now() < Date.parse(before) + 1000) await sleep(20);
        await na.req('GET', `/devices/report?mac=${m}&serial=S1&product=Seat`);
        expect(await reachesB()).toBe(first);
      }
      // A new fingerprint: a new record, with the validator's field order, and b's search finds the new serial.
      await na.req('GET', `/devices/report?mac=${m}&serial=S2&product=Seat`);
      let second = first;
      for (const end = Date.now() + 10_000; Date.now() < end && second.fingerprint.serial !== 'S2'; await sleep(20)) second = ledgerB.devices.get(m)!;
      expect(second).not.toBe(first);
      expect(Object.keys(second.fingerprint)).toEqual(FINGERPRINT_FIELDS);
      const onA = (await na.req('GET', `/devices/${m}`)).body;
      expect(second).toEqual({ ...first, fingerprint: onA.fingerprint, first_seen: onA.first_seen, last_seen: onA.last_seen });
      const found = (await nb.req('GET', '/devices/page?q=s2')).body;
      expect(found.items.map((d: { mac: string }) => d.mac)).toEqual([m]);
      expect((await nb.req('GET', '/devices/page?q=s1')).body.items).toEqual([]);
      // The feed says which rows were telemetry: the flushes, not the registration.
      const feed = (await peer.query('SELECT telemetry, devices FROM ledger_changes WHERE $1 = ANY(devices) ORDER BY id', [m])).rows;
      expect(feed[0]).toEqual({ telemetry: false, devices: [m] });
      expect(feed.slice(1).every((r) => r.telemetry === true)).toBe(true);
      expect(feed.length).toBe(5);
      expect(first.last_seen).not.toBe(firstSeen);
    } finally {
      await peer.end();
      await nb.close();
      await na.close();
    }
  });

  it(`a telemetry flush of more than ${TELEMETRY_PER_STATEMENT} devices writes each one's telemetry, as one feed row`, async () => {
    const url = pg.createDb('telemetry_parts');
    const na = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_REPORT_FLUSH_MS: '60000' });
    const peer = new Client({ connectionString: url });
    await peer.connect();
    try {
      const ledger = na.app.get(LedgerRepository);
      const n = 2 * TELEMETRY_PER_STATEMENT + 17;
      const macs = Array.from({ length: n }, (_, i) => `02:00:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`);
      await ledger.commit((tx) => {
        for (const m of macs) tx.devices.set(m, newDevice(m, { source: 'manual' }));
      });
      // A storm's reports: most move last_seen in place, one brings a new fingerprint.
      for (const m of macs) ledger.devices.touchInPlace(m, ledger.devices.get(m)!, (r) => (r.last_seen = `seen-${m}`));
      const last = macs[n - 1];
      const d = ledger.devices.get(last)!;
      ledger.devices.touch(last, { ...d, fingerprint: { ...d.fingerprint, serial: 'S-LAST' } });
      // A record whose fingerprint holds what PostgreSQL refuses in JSON text (reports clean it
      // out; a record from elsewhere may not): U+FFFD, and the flush goes through.
      const odd = macs[0];
      const o = ledger.devices.get(odd)!;
      ledger.devices.touch(odd, { ...o, fingerprint: { ...o.fingerprint, serial: 'S\u0000\udc00' } });
      await ledger.flushTelemetry();
      const rows = (await peer.query("SELECT mac, data->>'last_seen' AS last_seen, data->'fingerprint'->>'serial' AS serial FROM devices ORDER BY mac")).rows;
      expect(rows).toEqual(macs.map((m) => ({ mac: m, last_seen: `seen-${m}`, serial: m === last ? 'S-LAST' : m === odd ? 'S\ufffd\ufffd' : null })));
      const feed = (await peer.query('SELECT devices FROM ledger_changes WHERE telemetry ORDER BY id')).rows;
      expect(feed.map((r) => [...r.devices].sort())).toEqual([[...macs].sort()]);
      expect(ledger.devices.dirtyKeys.size).toBe(0);
    } finally {
      await peer.end();
      await na.close();
    }
  });

  it('a report that lands while a telemetry flush writes is written by the next flush', async () => {
    const url = pg.createDb('telemetry_race');
    const na = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_REPORT_FLUSH_MS: '60000' });
    const peer = new Client({ connectionString: url });
    await peer.connect();
    try {
      const ledger = na.app.get(LedgerRepository);
      const [a, b] = ['02:00:00:00:0e:01', '02:00:00:00:0e:02'];
      await ledger.commit((tx) => {
        for (const m of [a, b]) tx.devices.set(m, newDevice(m, { source: 'manual' }));
      });
      const lastSeen = async () => Object.fromEntries((await peer.query("SELECT mac, data->>'last_seen' AS s FROM devices")).rows.map((r) => [r.mac, r.s]));
      ledger.devices.touchInPlace(a, ledger.devices.get(a)!, (r) => (r.last_seen = 'first'));
      ledger.devices.touchInPlace(b, ledger.devices.get(b)!, (r) => (r.last_seen = 'first'));
      // Another session holds the change feed: the flush writes the rows, then waits to add its feed row.
      await peer.query('BEGIN');
      await peer.query('LOCK TABLE ledger_changes IN SHARE MODE');
      const flushing = ledger.flushTelemetry();
      const waiting = async () => (await peer.query("SELECT count(*)::int AS n FROM pg_locks WHERE relation = 'ledger_changes'::regclass AND NOT granted")).rows[0].n;
      for (const end = Date.now() + 10_000; Date.now() < end && (await waiting()) === 0; ) await sleep(10);
      expect(await waiting()).toBe(1);
      // a reports again meanwhile.
      ledger.devices.touchInPlace(a, ledger.devices.get(a)!, (r) => (r.last_seen = 'second'));
      await peer.query('COMMIT');
      await flushing;
      expect(await lastSeen()).toEqual({ [a]: 'first', [b]: 'first' });
      expect([...ledger.devices.dirtyKeys]).toEqual([a]);
      await ledger.flushTelemetry();
      expect(await lastSeen()).toEqual({ [a]: 'second', [b]: 'first' });
      expect(ledger.devices.dirtyKeys.size).toBe(0);
      // A flush the database refuses keeps its keys dirty, with those touched since, for the next one.
      await peer.query("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$");
      await peer.query('CREATE TRIGGER refuse BEFORE INSERT ON ledger_changes FOR EACH ROW EXECUTE FUNCTION refuse()');
      ledger.devices.touchInPlace(a, ledger.devices.get(a)!, (r) => (r.last_seen = 'third'));
      await expect(ledger.flushTelemetry()).rejects.toThrow(/refused/);
      ledger.devices.touchInPlace(b, ledger.devices.get(b)!, (r) => (r.last_seen = 'third'));
      expect([...ledger.devices.dirtyKeys].sort()).toEqual([a, b]);
      await peer.query('DROP TRIGGER refuse ON ledger_changes');
      await ledger.flushTelemetry();
      expect(await lastSeen()).toEqual({ [a]: 'third', [b]: 'third' });
    } finally {
      await peer.end();
      await na.close();
    }
  });

  it("audit retention on one control plane keeps what a follower of the other still reads", async () => {
    const url = pg.createDb('audit_holds');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
    // a drops old entries; b keeps everything itself and only publishes its followers' cursors.
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'ret-a', IPXE_CP_AUDIT_RETENTION_DAYS: '7' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'ret-b' });
    try {
      const clock = na.app.get(Clock);
      let now = Date.now() - 30 * 86_400_000;
      clock.now = () => new Date(now);
      const old: number[] = [];
      for (let i = 0; i < 20; i++) old.push((await na.app.get(AuditService).record('test.filler', { n: i })).id);
      now = Date.now();
      // A follower of b is at the 11th old entry.
      expect((await nb.req('GET', `/operations?since=${old[10]}&limit=3`)).status).toBe(200);
      expect(await nb.app.get(AuditRetentionService).run()).toBeNull();
      expect(await na.app.get(AuditRetentionService).run()).toEqual({ from_id: expect.any(Number), through_id: old[10] });
      const left = (await nb.req('GET', '/operations?op=test.filler&limit=100')).body.entries.map((e: { id: number }) => e.id);
      expect(left).toEqual(old.slice(11));
      // b's followers moved on (no cursor within the hold any more): a drops the rest.
      const own = new Client({ connectionString: url });
      await own.connect();
      await own.query("UPDATE audit_holds SET at = now() - interval '2 days'");
      await own.end();
      expect(await na.app.get(AuditRetentionService).run()).toEqual({ from_id: old[11], through_id: old[19] });
      expect((await nb.req('GET', '/operations?op=test.filler&limit=100')).body.entries).toEqual([]);
    } finally {
      await nb.close();
      await na.close();
    }
  });

  it('credential changes reach the other control plane as the rows changed since its version, deletions as tombstones', async () => {
    const url = pg.createDb('credential_rows');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'cred-a' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'cred-b' });
    const own = new Client({ connectionString: url });
    await own.connect();
    try {
      for (const id of ['w1', 'w2', 'w3']) {
        expect((await na.req('POST', '/workers', { worker_id: id })).status).toBe(201);
        expect((await na.req('PUT', `/workers/${id}/credential`, { generate: true })).status).toBe(200);
      }
      expect((await nb.req('PUT', '/workers/w1/credential', { generate: true })).status).toBe(200); // rotated on b
      expect((await na.req('DELETE', '/workers/w2')).status).toBe(200);
      expect((await na.req('DELETE', '/workers/w3/credential')).status).toBe(200);
      const ra = na.app.get(CredentialRepository);
      const rb = nb.app.get(CredentialRepository);
      const same = () => isDeepStrictEqual(ra.snapshot().credentials, rb.snapshot().credentials);
      for (const end = Date.now() + 10_000; Date.now() < end && !same(); ) await sleep(20);
      expect(rb.snapshot().credentials).toEqual(ra.snapshot().credentials);
      expect(Object.keys(rb.snapshot().credentials).sort()).toEqual(['w1', 'w3']);
      expect(rb.get('w3')!.revoked).toBe(true);
      expect(rb.get('w1')!.dhchap_key).toBe((await own.query("SELECT body->>'dhchap_key' AS k FROM credentials WHERE worker_id = 'w1'")).rows[0].k);
      // Every row carries the version that wrote it; the deleted one left a tombstone.
      const rows = (await own.query('SELECT worker_id, version FROM credentials ORDER BY worker_id')).rows;
      expect(rows.every((r) => Number(r.version) > 0)).toBe(true);
      expect((await own.query("SELECT key FROM credential_tombstones WHERE kind = 'credential'")).rows.map((r) => r.key)).toEqual(['w2']);
    } finally {
      await own.end();
      await nb.close();
      await na.close();
    }
  });

  it('one boot split over two control planes is one session on both; a loop seen there is held by both and released by either', async () => {
    const url = pg.createDb('boot_sessions');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'boots-a' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'boots-b' });
    try {
      const mac = '02:00:00:00:0f:b1';
      await na.req('POST', '/devices', { mac });
      await na.req('POST', '/workers', { worker_id: 'bw1', mac });
      const until = async (n: TestApp, fn: (items: any[]) => boolean) => {
        let items: any[] = [];
        for (const end = Date.now() + 10_000; Date.now() < end; await sleep(50)) if (fn((items = (await n.req('GET', `/boots?mac=${mac}`)).body.items))) break;
        return items;
      };
      // b must know the binding before it answers for it (asked through the API: a boot-vars probe would be a boot)
      for (const end = Date.now() + 10_000; Date.now() < end && (await nb.req('GET', `/devices/${mac}`)).body.bound_worker_id !== 'bw1'; ) await sleep(20);
      await na.req('GET', `/devices/report?mac=${mac}`);
      await until(nb, (i) => i[0]?.stages[0]?.stage === 'report');
      await nb.req('GET', `/boot-vars?mac=${mac}`);
      const stages = (i: any[]) => i[0]?.stages.map((x: { stage: string }) => x.stage).join(',');
      expect(stages(await until(na, (i) => stages(i) === 'report,vars'))).toBe('report,vars');
      expect(stages(await until(nb, (i) => stages(i) === 'report,vars'))).toBe('report,vars');
      // Two more failed boots, each split the same way: the third makes it loop, on both.
      for (let k = 0; k < 2; k++) {
        await na.req('GET', `/devices/report?mac=${mac}`);
        await until(nb, (i) => i[0]?.stages.length === 1);
        await nb.req('GET', `/boot-vars?mac=${mac}`);
      }
      expect((await until(na, (i) => i[0]?.looping))[0].looping).toBe(true);
      for (const n of [na, nb]) {
        let text = '';
        for (const end = Date.now() + 10_000; Date.now() < end && !text.includes('boot-loop hold'); await sleep(50)) text = (await n.req('GET', `/boot-vars?mac=${mac}`)).text;
        expect(text).toContain('# boot-loop hold');
      }
      expect((await na.req('GET', '/operations?op=device.boot_loop')).body.entries).toHaveLength(1);
      expect((await na.req('POST', `/boots/${mac}/release`)).body.released).toBe(true);
      let after = '';
      for (const end = Date.now() + 10_000; Date.now() < end && !after.includes('set menu-default reboot'); await sleep(50)) after = (await nb.req('GET', `/boot-vars?mac=${mac}`)).text;
      expect(after).toContain('set menu-default reboot');
    } finally {
      await nb.close();
      await na.close();
    }
  });

  it("a pull reads only the other control planes' boot events, each once, in order and in pages, and moves past this one's", async () => {
    const url = pg.createDb('boot_pull');
    const n = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_NODE_ID: 'pull-app' });
    try {
      // A repository of its own (the app's flush pulls with its own position), as control plane pull-a.
      const dbase = n.app.get(Database);
      const repo = new PgBootEventRepository(dbase, { nodeId: 'pull-a' } as AppConfig, n.app.get(BootSnapshotFile));
      repo.pullPage = 3;
      const at = Date.now();
      const ev = (i: number, node: string): BootEvent => ({ at: at + i, mac: `02:00:00:00:0e:${(16 + i).toString(16)}`, stage: i % 2 ? 'vars' : 'report', node, ...(i % 2 ? { detail: { answer: 'disk' } } : { worker: `w${i}` }) });
      // Its own and another's interleaved over three appends, the last two its own.
      const events = Array.from({ length: 12 }, (_, i) => ev(i, i % 3 === 0 || i > 9 ? 'pull-a' : 'pull-b'));
      for (const part of [events.slice(0, 5), events.slice(5, 10), events.slice(10)]) await repo.append(part);
      const pages: BootEvent[][] = [];
      for (let p = await repo.pull(); p.length; p = await repo.pull()) pages.push(p);
      expect(pages.map((p) => p.length)).toEqual([3, 3]);
      expect(pages.flat()).toEqual(events.filter((e) => e.node === 'pull-b'));
      // Past its own last two: the position is the newest row, where a snapshot taken now resumes.
      const top = (await dbase.query<{ m: string }>('SELECT max(id)::text AS m FROM boot_events')).rows[0].m;
      expect((repo as unknown as { cursor: string }).cursor).toBe(top);
      const later = ev(20, 'pull-b');
      await repo.append([later, ev(21, 'pull-a')]);
      expect(await repo.pull()).toEqual([later]);
      expect(await repo.pull()).toEqual([]);
    } finally {
      await n.close();
    }
  });

  it(`an append of more than ${BOOT_EVENTS_PER_STATEMENT} boot events stores each one as given and in order, over its statements`, async () => {
    const url = pg.createDb('boot_append_parts');
    const n = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_NODE_ID: 'parts-app' });
    try {
      const dbase = n.app.get(Database);
      const writer = new PgBootEventRepository(dbase, { nodeId: 'parts-a' } as AppConfig, n.app.get(BootSnapshotFile));
      const reader = new PgBootEventRepository(dbase, { nodeId: 'parts-b' } as AppConfig, n.app.get(BootSnapshotFile));
      const at = Date.now();
      const count = 2 * BOOT_EVENTS_PER_STATEMENT + 7;
      // With and without worker and detail; details with quotes, backslashes and non-ASCII text.
      const events: BootEvent[] = Array.from({ length: count }, (_, i) => ({
        at: at + i,
        mac: `02:00:00:01:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`,
        stage: i % 2 ? 'vars' : 'report',
        node: 'parts-a',
        ...(i % 3 ? { worker: `w${i}` } : {}),
        ...(i % 4 ? { detail: { answer: i % 5 ? 'disk' : 'say "hi" \\ to Zoë' } } : {}),
      }));
      // And one whose detail holds what PostgreSQL refuses in JSON text (a NUL, an unpaired
      // surrogate): stored as U+FFFD, not a batch refused at every retry.
      const odd: BootEvent = { at: at + count, mac: '02:00:00:01:ff:ff', stage: 'disk', node: 'parts-a', detail: { initiator: 'iqn\u0000x\ud800' } };
      await writer.append([...events, odd]);
      expect(await reader.pull()).toEqual([...events, { ...odd, detail: { initiator: 'iqn\ufffdx\ufffd' } }]);
      const top = (await dbase.query<{ m: string }>('SELECT max(id)::text AS m FROM boot_events')).rows[0].m;
      expect((writer as unknown as { ownNewest: string }).ownNewest).toBe(top);
    } finally {
      await n.close();
    }
  });

  it("the change feed of one control plane wakes for the other's ledger, settings and boot events", async () => {
    const url = pg.createDb('change_feed');
    const env = { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
    const na = await startApp({ ...env, IPXE_CP_NODE_ID: 'feed-a' });
    const nb = await startApp({ ...env, IPXE_CP_NODE_ID: 'feed-b' });
    try {
      let cursor: string = (await na.req('GET', '/changes')).body.cursor;
      /** Topics a's long-poll reports until `want` is among them (10 s at most). */
      const until = async (want: string) => {
        const seen: string[] = [];
        for (const end = Date.now() + 10_000; !seen.includes(want) && Date.now() < end; ) {
          const r = (await na.req('GET', `/changes?cursor=${cursor}&wait=5`)).body;
          cursor = r.cursor;
          seen.push(...r.topics);
        }
        return seen;
      };
      const mac = '02:00:00:00:0f:c1';
      let waiting = until('ledger');
      await nb.req('POST', '/devices', { mac });
      await nb.req('POST', '/workers', { worker_id: 'fw1', mac });
      expect(await waiting).toContain('ledger');
      waiting = until('settings');
      expect((await nb.req('PUT', '/settings/boot-policy', { stuck_after_seconds: 200 })).status).toBe(200);
      expect(await waiting).toContain('settings');
      waiting = until('boots');
      await nb.req('GET', `/devices/report?mac=${mac}`);
      expect(await waiting).toContain('boots');
    } finally {
      await nb.close();
      await na.close();
    }
  });

  // Last: it stops the cluster for a while.
  it('the database down: boots keep being answered from the cache, writes get a 503 naming it, all recovers when it is back', async () => {
    const url = pg.createDb('outage');
    const t = await startApp({ IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_NODE_ID: 'solo2' });
    try {
      await t.req('POST', '/devices', { mac: '02:00:00:00:0b:01' });
      await t.req('POST', '/workers', { worker_id: 'ow1', mac: '02:00:00:00:0b:01' });
      const answer = (await t.req('GET', '/boot-vars?mac=02:00:00:00:0b:01')).text;
      expect(answer).toContain('boot vars for ow1');
      await db.end();
      pg.pause();
      // The boot path reads memory: the fleet still boots during the outage.
      expect((await t.req('GET', '/boot-vars?mac=02:00:00:00:0b:01')).text).toBe(answer);
      expect((await t.req('GET', '/devices/02:00:00:00:0b:01')).status).toBe(200);
      const w = await t.req('POST', '/devices', { mac: '02:00:00:00:0b:02' });
      expect(w.status).toBe(503);
      expect(w.body.message).toMatch(/database/);
      pg.resume();
      let status = 0;
      for (let i = 0; i < 100 && status !== 201; i++) {
        status = (await t.req('POST', '/devices', { mac: '02:00:00:00:0b:02' })).status;
        if (status !== 201) await sleep(100);
      }
      expect(status).toBe(201);
      expect((await t.req('GET', '/devices')).body.map((d: { mac: string }) => d.mac)).toEqual(['02:00:00:00:0b:01', '02:00:00:00:0b:02']);
    } finally {
      await t.close();
    }
  });
});
