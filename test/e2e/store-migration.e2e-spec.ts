import * as path from 'node:path';
import { Client } from 'pg';
import { exportStore, importStore, StoreBundle } from '../../scripts/store';
import { startApp, tempDir } from '../helpers/app';
import { until } from '../helpers/poll';
import { PgCluster, startPostgres } from '../helpers/postgres';

/**
 * `npm run store -- export/import`: a site built through the API on the file store goes to
 * PostgreSQL and back, and each export equals the first one (devices with keys and fingerprints,
 * workers, bindings, settings with a registration window, NVMe-oF credentials with their secrets,
 * the audit with its ids). The control plane started on the imported database answers as the
 * original did.
 */

const fileEnv = (dir: string) => ({
  IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
  IPXE_CP_STATE_DIR: path.join(dir, 'state'),
  IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
  IPXE_CP_LOG_LEVEL: 'silent',
  IPXE_CP_CHECKPOINT_MS: '0',
});
const strip = ({ exported_at: _e, source: _s, ...rest }: StoreBundle) => rest;

describe('store export / import between files and PostgreSQL', () => {
  let pg: PgCluster;
  beforeAll(async () => {
    pg = await startPostgres();
  });
  afterAll(() => pg?.stop());

  it('files -> PostgreSQL -> files is lossless, the imported site answers as the original, a non-empty target is refused', async () => {
    const src = tempDir('kurrent-src-');
    const t = await startApp({ IPXE_CP_STORE: 'file', IPXE_CP_DATABASE_URL: '' }, { dir: src });
    await t.req('POST', '/devices/import', {
      entries: Array.from({ length: 20 }, (_, i) => ({ mac: `02:00:00:00:00:${(i + 16).toString(16)}`, serial: `SN${i}`, product: 'OptiPlex', manufacturer: 'Dell' })),
    });
    await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:10', boot: { menu_default: 'ubuntu', menu_timeout: 3000 } });
    await t.req('POST', '/workers/batch', { count: 3, name_prefix: 'lab-', macs: ['02:00:00:00:00:11', '02:00:00:00:00:12', '02:00:00:00:00:13'] });
    expect((await t.req('PUT', '/workers/w1/credential', { generate: true })).status).toBe(200);
    await t.req('DELETE', '/devices/02:00:00:00:00:20');
    await t.req('PUT', '/settings/auto-register', { enabled: false });
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 30, max_devices: 5 });
    const bootVars = (await t.req('GET', '/boot-vars?mac=02:00:00:00:00:10')).text;
    const devices = (await t.req('GET', '/devices')).body;
    const workers = (await t.req('GET', '/workers')).body;
    await t.close();

    const one = await exportStore(fileEnv(src));
    expect(Object.keys(one.devices)).toHaveLength(20);
    expect(Object.keys(one.workers)).toHaveLength(4);
    expect(one.credentials.credentials.w1.dhchap_key).toMatch(/^DHHC-1:00:/);
    expect(one.settings).toMatchObject({ auto_register: false, registration_window: { max_devices: 5 } });
    expect(one.audit.length).toBeGreaterThan(25);

    const url = pg.createDb('site');
    const pgEnv = { ...fileEnv(tempDir('kurrent-pgnode-')), IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
    expect(await importStore(pgEnv, one)).toEqual({ devices: 20, workers: 4, credentials: 1, audit: one.audit.length });
    const two = await exportStore(pgEnv);
    expect(two.source).toBe('postgres');
    expect(strip(two)).toEqual(strip(one));
    await expect(importStore(pgEnv, one)).rejects.toThrow('not empty');

    // The control plane on the imported database: same answers, and new audit ids follow on.
    const p = await startApp(pgEnv);
    expect((await p.req('GET', '/devices')).body).toEqual(devices);
    expect((await p.req('GET', '/workers')).body).toEqual(workers);
    expect((await p.req('GET', '/boot-vars?mac=02:00:00:00:00:10')).text).toBe(bootVars);
    expect((await p.req('GET', '/workers/w1/credential')).body.dhchap_key_sha256).toBe((await p.req('GET', '/workers/w1/credential')).body.dhchap_key_sha256);
    await p.req('POST', '/devices', { mac: '02:00:00:00:00:99' });
    const fresh = (await p.req('GET', `/operations?since=${one.audit[one.audit.length - 1].id}`)).body.entries;
    expect(fresh.map((e: { op: string; id: number }) => [e.op, e.id])).toEqual([['device.register', one.audit[one.audit.length - 1].id + 1]]);
    await p.close();

    // And back to files.
    const back = tempDir('kurrent-back-');
    await importStore(fileEnv(back), two);
    expect(strip(await exportStore(fileEnv(back)))).toEqual(strip(one));

    // A bundle that breaks an invariant is refused before anything is written.
    const broken = structuredClone(one);
    broken.devices['02:00:00:00:00:14'].bound_worker_id = 'nobody';
    broken.devices['02:00:00:00:00:14'].state = 'bound';
    await expect(importStore(fileEnv(tempDir('kurrent-broken-')), broken)).rejects.toThrow('devices.02:00:00:00:00:14: bound to nobody');
  });

  it("an import (one transaction of the whole site) is not cut off by the online 5 s bound on a database wait", async () => {
    const src = tempDir('kurrent-src-');
    const t = await startApp({ IPXE_CP_STORE: 'file', IPXE_CP_DATABASE_URL: '' }, { dir: src });
    const macs = ['02:00:00:00:00:31', '02:00:00:00:00:32', '02:00:00:00:00:33'];
    expect((await t.req('POST', '/devices/import', { entries: macs.map((mac) => ({ mac })) })).status).toBe(200);
    expect((await t.req('POST', '/workers/batch', { count: 3, name_prefix: 'slow-', macs })).status).toBe(200);
    await t.close();
    const bundle = await exportStore(fileEnv(src));
    const url = pg.createDb('slow_site');
    const pgEnv = { ...fileEnv(tempDir('kurrent-pgnode-')), IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
    // The schema first (an export of the empty database migrates it), then a session that holds
    // the devices table for longer than the online bound: as a slow disk or a 100,000-seat INSERT would.
    expect(Object.keys((await exportStore(pgEnv)).devices)).toEqual([]);
    const holder = new Client({ connectionString: url });
    // Another session to watch from: inside the holder's transaction the statistics views are a snapshot.
    const watcher = new Client({ connectionString: url });
    await holder.connect();
    await watcher.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE devices IN ACCESS EXCLUSIVE MODE');
      const t0 = Date.now();
      const imported = importStore(pgEnv, bundle);
      const waiting = async () => Number((await watcher.query("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")).rows[0].n) > 0;
      expect(await until(waiting)).toBe(true);
      // Held past 5 s of the import's wait (the default bound, which made this a 503 before).
      await until(async () => Date.now() - t0 > 6_000 || !(await waiting()), 10_000);
      expect(await waiting()).toBe(true);
      await holder.query('COMMIT');
      expect(await imported).toMatchObject({ devices: 3, workers: 3 });
    } finally {
      await holder.end();
      await watcher.end();
    }
    expect(Object.keys((await exportStore(pgEnv)).devices).sort()).toEqual(macs);
  });
});
