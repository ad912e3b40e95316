import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse } from 'yaml';
import { dhcpLines, itFiles, macOf, startApp, tempDir, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

/** Deterministic PRNG so a failure reproduces. */
function rng(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}

function checkInvariants(t: TestApp) {
  const devices = parse(t.read('state/devices.yml')).devices ?? {};
  const workers = parse(t.read('state/workers.yml')).workers ?? {};
  const byWorker = new Map<string, string>();
  const expected: string[] = [];
  for (const [mac, d] of Object.entries<any>(devices)) {
    expect(d.mac).toBe(mac);
    if (d.state === 'bound') {
      expect(workers[d.bound_worker_id]).toBeDefined();
      expect(byWorker.has(d.bound_worker_id)).toBe(false); // no worker with two devices
      byWorker.set(d.bound_worker_id, mac);
      expected.push(`${mac},${workers[d.bound_worker_id].hostname}`);
    } else {
      expect(d.bound_worker_id).toBeNull();
    }
  }
  const lines = dhcpLines(t.read('dnsmasq/dhcp-hosts.conf'));
  expect(new Set(lines).size).toBe(lines.length); // no duplicate dnsmasq line
  expect(new Set(lines.map((l) => l.split(',')[0])).size).toBe(lines.length); // no MAC twice
  expect(lines.sort()).toEqual(expected.sort());
  return { devices, workers };
}

describe('ledger consistency', () => {
  let t: TestApp;
  afterEach(() => t?.close());

  it('200 concurrent bind/create/unbind/rebind/delete requests keep every invariant', async () => {
    t = await startApp();
    const N = 40;
    await t.req('POST', '/devices/import', { entries: Array.from({ length: N }, (_, i) => ({ mac: macOf(i) })) });
    await t.req('POST', '/workers/batch', { count: 20, name_prefix: 'w-' });
    const rand = rng(42);
    const pick = (n: number) => Math.floor(rand() * n);
    const wid = () => `w-${String(pick(30) + 1).padStart(2, '0')}`;
    const reqs: Promise<{ status: number }>[] = [];
    for (let i = 0; i < 200; i++) {
      const mac = macOf(pick(N));
      switch (pick(6)) {
        case 0:
          reqs.push(t.req('POST', `/devices/${mac}/bind?worker_id=${wid()}`));
          break;
        case 1:
          reqs.push(t.req('POST', `/devices/${mac}/bind?worker_id=${wid()}&force=true`));
          break;
        case 2:
          reqs.push(t.req('DELETE', `/devices/${mac}/bind`));
          break;
        case 3:
          reqs.push(t.req('POST', '/workers', { worker_id: wid(), mac }));
          break;
        case 4:
          reqs.push(t.req('PUT', `/workers/${wid()}/mac`, { mac }));
          break;
        default:
          reqs.push(t.req('DELETE', `/workers/${wid()}`));
      }
    }
    const res = await Promise.all(reqs);
    const statuses = new Set(res.map((r) => r.status));
    for (const s of statuses) expect([200, 201, 404, 409]).toContain(s);
    expect(res.filter((r) => r.status < 300).length).toBeGreaterThan(20);
    const { devices, workers } = checkInvariants(t);
    // Memory and disk agree.
    const api = (await t.req('GET', '/devices')).body;
    // The API view: the key's SHA-256 under both names, never the key itself.
    // last_boot: null (no boot in this test), from the boot sessions rather than the ledger.
    const view = ({ pubkey: _k, ...d }: any) => ({ ...d, key_sha256: d.key_hash, last_boot: null });
    expect(Object.fromEntries(api.map((d: any) => [d.mac, d]))).toEqual(Object.fromEntries(Object.entries<any>(devices).map(([k, d]) => [k, view(d)])));
    const apiWorkers = (await t.req('GET', '/workers')).body;
    expect(apiWorkers.map((w: any) => w.worker_id).sort()).toEqual(Object.keys(workers).sort());
    for (const w of apiWorkers) {
      const bound = Object.values<any>(devices).find((d) => d.bound_worker_id === w.worker_id);
      expect(w.mac).toBe(bound?.mac ?? null);
    }
  });

  it('survives a restart: everything written is read back and audit ids keep increasing', async () => {
    t = await startApp();
    await t.req('POST', '/devices', { mac: '02:00:00:00:00:01', serial: 'S' });
    await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01', boot: { menu_default: 'shell', menu_timeout: 9 } });
    await t.req('PUT', '/settings/auto-register', { enabled: false });
    await t.req('GET', '/devices/report?mac=02:00:00:00:00:01&chip=RTL');
    const snapshot = {
      devices: (await t.req('GET', '/devices')).body,
      workers: (await t.req('GET', '/workers')).body,
      ops: (await t.req('GET', '/operations')).body,
      settings: (await t.req('GET', '/settings/auto-register')).body,
    };
    expect(snapshot.devices[0].fingerprint.chip).toBe('RTL');
    await t.close(); // flushes pending report telemetry
    t = await startApp({}, { dir: t.dir });
    expect((await t.req('GET', '/devices')).body).toEqual(snapshot.devices);
    expect((await t.req('GET', '/workers')).body).toEqual(snapshot.workers);
    expect((await t.req('GET', '/operations')).body).toEqual(snapshot.ops);
    expect((await t.req('GET', '/settings/auto-register')).body).toEqual(snapshot.settings);
    await t.req('DELETE', '/devices/02:00:00:00:00:01/bind');
    const ops = (await t.req('GET', '/operations')).body.entries;
    expect(ops[ops.length - 1]).toMatchObject({ id: snapshot.ops.next_cursor + 1, op: 'device.unbind' });
  });

  itFiles('picks up hand edits in any YAML layout, and heals a stale dhcp-hosts.conf at start', async () => {
    t = await startApp();
    await t.req('POST', '/workers', { worker_id: 'w1' });
    fs.writeFileSync(
      path.join(t.dir, 'state/devices.yml'),
      [
        'devices:',
        '  "00:0c:29:b9:8b:2d":',
        '    mac: 00:0c:29:b9:8b:2d',
        '    uuid: "4c4c4544-0001"',
        '    state: pooled            # pooled | bound | revoked',
        '    bound_worker_id: null',
        '    key_hash: null',
        '    source: ipxe',
        '    fingerprint:',
        '      manufacturer: ASUSTeK COMPUTER INC.',
        '      mem_total: 32768',
        '    first_seen: 2026-08-15T10:00:00+08:00',
        '    last_seen: 2026-08-15T12:00:00+08:00',
        '',
      ].join('\n'),
    );
    // Hand edits are looked for at most every 200 ms, off the event loop under load: poll.
    const d = await until(async () => {
      const r = await t.req('GET', '/devices/00:0c:29:b9:8b:2d');
      return r.status === 200 ? r.body : null;
    }, 5_000);
    expect(d).toMatchObject({ state: 'pooled', uuid: '4c4c4544-0001', first_seen: '2026-08-15T10:00:00+08:00' });
    expect(d.fingerprint).toMatchObject({ manufacturer: 'ASUSTeK COMPUTER INC.', mem_total: 32768, serial: null });
    // A mutation after the edit keeps it and rewrites the file in the canonical layout.
    expect((await t.req('POST', '/devices/00:0c:29:b9:8b:2d/bind?worker_id=w1')).status).toBe(200);
    expect(t.read('state/devices.yml')).toContain('"00:0c:29:b9:8b:2d": {"mac":"00:0c:29:b9:8b:2d"');
    await t.close();
    fs.writeFileSync(path.join(t.dir, 'dnsmasq/dhcp-hosts.conf'), 'aa:bb:cc:dd:ee:ff,stale\n');
    t = await startApp({}, { dir: t.dir });
    expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('00:0c:29:b9:8b:2d,w1\n');
  });

  itFiles('refuses to start on a corrupt ledger file, naming the file and line; nothing is reset', async () => {
    const dir = tempDir();
    fs.mkdirSync(path.join(dir, 'state'));
    const cases: [string, string, RegExp][] = [
      ['devices.yml', 'devices:\n  "02:00:00:00:00:01": {"mac": "02:00:00:00:00:01", "state": "pooled"}\n  bad: [unclosed\n', /devices\.yml:3/],
      ['devices.yml', 'devices:\n  "02:00:00:00:00:01": {"mac":"02:00:00:00:00:01","state":"lost"}\n', /devices\.yml:2: .*state must be one of/],
      ['devices.yml', 'devices:\n  "02:00:00:00:00:01": {"state":"bound","bound_worker_id":null}\n', /devices\.yml:2: .*bound/],
      ['workers.yml', 'workers:\n  "w1": {"state":"registered"}\n  "w1": {"state":"ready"}\n', /workers\.yml:3: duplicate key/],
      ['workers.yml', 'workers:\n  w1:\n    state: registered\n  w/2:\n    state: ready\n', /workers\.yml:4: .*not a valid worker id/],
      ['settings.json', '{\n  "auto_register": yes\n}\n', /settings\.json:2/],
    ];
    for (const [file, content, msg] of cases) {
      for (const f of ['devices.yml', 'workers.yml', 'settings.json', 'operations.jsonl']) fs.rmSync(path.join(dir, 'state', f), { force: true });
      fs.writeFileSync(path.join(dir, 'state', file), content);
      await expect(startApp({}, { dir })).rejects.toThrow(msg);
      expect(fs.readFileSync(path.join(dir, 'state', file), 'utf8')).toBe(content);
    }
  });

  it('config/agents.yml: a broken file stops the start with file:line; hand edits are picked up', async () => {
    const dir = tempDir();
    fs.mkdirSync(path.join(dir, 'config'));
    const file = path.join(dir, 'config/agents.yml');
    fs.writeFileSync(file, 'agents:\n  st1:\n    base_url: ftp://x\n');
    await expect(startApp({}, { dir })).rejects.toThrow(/agents\.yml:2: "st1": base_url must be http\(s\):\/\//);
    fs.writeFileSync(file, 'agents:\n  st1:\n    base_url: http://10.0.0.11:4840/\n    token: ${ST1_TOKEN}\n    role: {disk: true}\n');
    t = await startApp({}, { dir });
    expect((await t.req('GET', '/agents?live=false')).body).toEqual([
      { id: 'st1', base_url: 'http://10.0.0.11:4840', iscsi_server: '10.0.0.11', role: { disk: true, cd: false }, enabled: true, tags: [] },
    ]);
    fs.writeFileSync(file, 'agents:\n  st2:\n    base_url: https://storage-2\n    enabled: false\n');
    const ids = async () => (await t.req('GET', '/agents?live=false')).body.map((a: any) => [a.id, a.enabled]);
    await until(async () => (await ids())[0]?.[0] === 'st2', 5_000);
    expect(await ids()).toEqual([['st2', false]]);
  });

  itFiles('a hand edit that breaks the file at runtime blocks mutations with a clear 500 until fixed', async () => {
    t = await startApp();
    await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
    const file = path.join(t.dir, 'state/devices.yml');
    const good = fs.readFileSync(file, 'utf8');
    fs.writeFileSync(file, 'devices:\n  - [broken\n');
    const r = await t.req('POST', '/devices', { mac: '02:00:00:00:00:02' });
    expect(r.status).toBe(500);
    expect(r.body.message).toMatch(/devices\.yml:\d+/);
    expect(fs.readFileSync(file, 'utf8')).toBe('devices:\n  - [broken\n');
    fs.writeFileSync(file, good);
    expect((await t.req('POST', '/devices', { mac: '02:00:00:00:00:02' })).status).toBe(201);
    expect((await t.req('GET', '/devices')).body).toHaveLength(2);
  });
});
