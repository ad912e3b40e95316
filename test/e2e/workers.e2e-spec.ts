import { dhcpLines, startApp, TestApp } from '../helpers/app';

describe('workers (sections 7, 7.3, 7.5, 7.6, 8-11.1)', () => {
  let t: TestApp;
  beforeEach(async () => {
    t = await startApp();
    for (let i = 1; i <= 4; i++) await t.req('POST', '/devices', { mac: `02:00:00:00:00:0${i}` });
  });
  afterEach(() => t.close());

  describe('POST /workers', () => {
    it('creates an idle worker with defaults (hostname = worker_id, x86_64, registered, no disks)', async () => {
      const r = await t.req('POST', '/workers', { worker_id: 'Worker-01' });
      expect(r.status).toBe(201);
      expect(r.body).toEqual({
        hostname: 'worker-01',
        arch: 'x86_64',
        state: 'registered',
        disks: [],
        cd: null,
        default_disk: null,
        worker_id: 'worker-01',
        mac: null,
        bound_device: null,
        readiness: 'idle',
        boot_readiness: {
          bootable: false,
          reasons: [
            { code: 'no-bound-device', message: 'no device is bound to this worker: its machine gets no per-worker boot vars' },
            { code: 'no-disk', message: 'the worker has no system disk' },
          ],
        },
        default_os: null,
        boot: { menu_default: null, menu_timeout: null },
        last_boot: null,
      });
      expect(t.read('state/workers.yml')).toContain('"worker-01"');
      expect((await t.req('GET', '/operations')).body.entries.pop()).toMatchObject({ op: 'worker.create', worker_id: 'worker-01' });
    });

    it('binds a pooled device given as mac and writes the dnsmasq line', async () => {
      const r = await t.req('POST', '/workers', { worker_id: 'w1', mac: '02-00-00-00-00-01', hostname: 'pc-1', arch: 'arm64', boot: { menu_default: 'EXIT', menu_timeout: 0 } });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({ hostname: 'pc-1', arch: 'arm64', mac: '02:00:00:00:00:01', readiness: 'partial', boot: { menu_default: 'exit', menu_timeout: 0 } });
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:01,pc-1\n');
    });

    it('409: duplicate worker_id, hostname clash, device not pooled / bound / revoked; nothing written', async () => {
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01', hostname: 'pc-1' });
      await t.req('DELETE', '/devices/02:00:00:00:00:04');
      const before = t.snapshot();
      const cases: [unknown, RegExp][] = [
        [{ worker_id: 'W1' }, /worker already exists/],
        [{ worker_id: 'w2', hostname: 'pc-1' }, /hostname already exists/],
        [{ worker_id: 'w2', hostname: 'w1' }, /hostname already exists/],
        [{ worker_id: 'pc-1' }, /hostname/],
        [{ worker_id: 'w2', mac: '02:00:00:00:00:09' }, /not in pool/],
        [{ worker_id: 'w2', mac: '02:00:00:00:00:01' }, /already bound to w1/],
        [{ worker_id: 'w2', mac: '02:00:00:00:00:04' }, /revoked/],
      ];
      for (const [body, msg] of cases) {
        const r = await t.req('POST', '/workers', body);
        expect([r.status, r.body.message]).toEqual([409, expect.stringMatching(msg)]);
      }
      expect(t.snapshot()).toEqual(before);
    });

    it('400 names the field for malformed ids, MACs, boot values, types and unknown fields; nothing written', async () => {
      const before = t.snapshot();
      const bad: [unknown, string][] = [
        [{}, 'worker_id'],
        [{ worker_id: 'a/b' }, 'worker_id'],
        [{ worker_id: '..' }, 'worker_id'],
        [{ worker_id: 'a..b' }, 'worker_id'],
        [{ worker_id: '.hidden' }, 'worker_id'],
        [{ worker_id: 'has space' }, 'worker_id'],
        ...[':', '#', '&', '*', '!', '|', '>', "'", '"', '%', '@'].map((c) => [{ worker_id: `w${c}x` }, 'worker_id'] as [unknown, string]),
        [{ worker_id: 'x'.repeat(64) }, 'worker_id'],
        [{ worker_id: 42 }, 'worker_id'],
        [{ worker_id: 'ok', hostname: 'a b' }, 'hostname'],
        [{ worker_id: 'ok', mac: '00:11:22' }, 'mac'],
        [{ worker_id: 'ok', mac: 12 }, 'mac'],
        [{ worker_id: 'ok', arch: 'x86 64' }, 'arch'],
        [{ worker_id: 'ok', boot: { menu_default: 'win95' } }, 'boot.menu_default'],
        [{ worker_id: 'ok', boot: { menu_timeout: -1 } }, 'boot.menu_timeout'],
        [{ worker_id: 'ok', boot: { menu_timeout: 1.5 } }, 'boot.menu_timeout'],
        [{ worker_id: 'ok', boot: { menu_timeout: '5000' } }, 'boot.menu_timeout'],
        [{ worker_id: 'ok', boot: 'fast' }, 'boot'],
        [{ worker_id: 'ok', surprise: true }, 'surprise'],
        [{ worker_id: 'ok', boot: { extra: 1 } }, 'boot.extra'],
        [{ worker_id: 'ok', windows_iso: 'Win11.iso' }, 'windows_iso'],
      ];
      for (const [body, field] of bad) {
        const r = await t.req('POST', '/workers', body);
        expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), 400]);
        expect(r.body.message).toContain(field);
        expect(r.body.statusCode).toBe(400);
      }
      for (const raw of ['{"worker_id":', 'null', '[1,2]', '"str"']) {
        const r = await t.req('POST', '/workers', raw, { 'content-type': 'application/json' });
        expect([raw, r.status]).toEqual([raw, 400]);
      }
      expect(t.snapshot()).toEqual(before);
    });
  });

  describe('POST /workers/batch', () => {
    it('names ids prefix + index padded to the width of count, binds macs per item, is idempotent', async () => {
      const r = await t.req('POST', '/workers/batch', {
        count: 3,
        name_prefix: 'lab-',
        macs: ['02:00:00:00:00:01', '02:00:00:00:00:01', 'bad'],
      });
      expect(r.status).toBe(200);
      expect(r.body.succeeded).toEqual([{ worker_id: 'lab-01', hostname: 'lab-01', mac: '02:00:00:00:00:01' }]);
      expect(r.body.failed).toEqual([
        { worker_id: 'lab-02', hostname: 'lab-02', mac: '02:00:00:00:00:01', error: 'device already bound to lab-01: 02:00:00:00:00:01' },
        expect.objectContaining({ worker_id: 'lab-03', mac: 'bad' }),
      ]);
      expect((await t.req('GET', '/workers/lab-02')).status).toBe(404);
      const again = await t.req('POST', '/workers/batch', { count: 3, name_prefix: 'lab-', macs: ['02:00:00:00:00:01', '02:00:00:00:00:02', '02:00:00:00:00:03'] });
      expect(again.body.skipped.map((s: any) => s.worker_id)).toEqual(['lab-01']);
      expect(again.body.succeeded.map((s: any) => s.worker_id)).toEqual(['lab-02', 'lab-03']);
      expect(dhcpLines(t.read('dnsmasq/dhcp-hosts.conf'))).toHaveLength(3);
      const hundred = await t.req('POST', '/workers/batch', { count: 100 });
      expect(hundred.body.succeeded[0].worker_id).toBe('worker-001');
      expect(hundred.body.succeeded[99].worker_id).toBe('worker-100');
      expect((await t.req('GET', '/workers')).body).toHaveLength(103);
    });

    it('422 for count missing or outside 1-100, 400 for a bad prefix or macs length; nothing written', async () => {
      const before = t.snapshot();
      for (const body of [{}, { count: 0 }, { count: 101 }, { count: 1e9 }, { count: 2.5 }, { count: '3' }]) {
        const r = await t.req('POST', '/workers/batch', body);
        expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), 422]);
        expect(r.body.message).toContain('count');
      }
      for (const body of [
        { count: 2, name_prefix: '' },
        { count: 2, name_prefix: 'a/b-' },
        { count: 2, name_prefix: '.x' },
        { count: 2, macs: ['02:00:00:00:00:01'] },
        { count: 2, bogus: 1 },
      ]) {
        const r = await t.req('POST', '/workers/batch', body);
        expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), 400]);
      }
      expect(t.snapshot()).toEqual(before);
    });
  });

  describe('GET list / one / status', () => {
    it('projects mac, bound_device and readiness; status reads dhcp-hosts.conf', async () => {
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
      await t.req('POST', '/workers', { worker_id: 'w2' });
      const list = (await t.req('GET', '/workers')).body;
      expect(list.map((w: any) => [w.worker_id, w.mac, w.readiness])).toEqual([
        ['w1', '02:00:00:00:00:01', 'partial'],
        ['w2', null, 'idle'],
      ]);
      const s = (await t.req('GET', '/workers/w1/status')).body;
      expect(s.worker.worker_id).toBe('w1');
      expect(s.actual).toEqual({ dnsmasq: { hostname: 'w1', mac: '02:00:00:00:00:01' }, disks: [], cd: null });
      expect((await t.req('GET', '/workers/w2/status')).body.actual.dnsmasq).toBeNull();
      expect((await t.req('GET', '/workers/nope')).status).toBe(404);
      expect((await t.req('GET', '/workers/nope/status')).status).toBe(404);
      expect((await t.req('GET', '/workers/a%2Fb')).status).toBe(400);
      // (`/workers/..` cannot be asked through injection: URL parsing resolves it, and %2E%2E, to `/`.)
    });
  });

  describe('PUT /workers/{id}/mac', () => {
    it('rebinds to a new pooled device, old one back to the pool; same MAC is changed=false', async () => {
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
      const r = await t.req('PUT', '/workers/w1/mac', { mac: '02:00:00:00:00:02' });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ worker_id: 'w1', mac: '02:00:00:00:00:02', changed: true });
      expect((await t.req('GET', '/devices/02:00:00:00:00:01')).body.state).toBe('pooled');
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:02,w1\n');
      const ops = (await t.req('GET', '/operations')).body.entries;
      expect(ops.find((e: any) => e.op === 'worker.mac.update')).toMatchObject({
        old_mac: '02:00:00:00:00:01',
        new_mac: '02:00:00:00:00:02',
        changed: true,
        client: expect.any(String),
      });
      expect(ops.filter((e: any) => e.op === 'device.unbind').map((e: any) => e.mac)).toEqual(['02:00:00:00:00:01']);
      const before = t.read('dnsmasq/dhcp-hosts.conf');
      const same = await t.req('PUT', '/workers/w1/mac', { mac: '020000000002' });
      expect(same.body.changed).toBe(false);
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe(before);
    });

    it('404 unknown worker, 400 bad MAC, 409 device bound elsewhere / not pooled / revoked', async () => {
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
      await t.req('POST', '/workers', { worker_id: 'w2' });
      await t.req('DELETE', '/devices/02:00:00:00:00:04');
      expect((await t.req('PUT', '/workers/nope/mac', { mac: '02:00:00:00:00:02' })).status).toBe(404);
      expect((await t.req('PUT', '/workers/w2/mac', { mac: 'xx' })).status).toBe(400);
      expect((await t.req('PUT', '/workers/w2/mac', {})).status).toBe(400);
      expect((await t.req('PUT', '/workers/w2/mac', { mac: '02:00:00:00:00:01' })).status).toBe(409);
      expect((await t.req('PUT', '/workers/w2/mac', { mac: '02:00:00:00:00:09' })).status).toBe(409);
      expect((await t.req('PUT', '/workers/w2/mac', { mac: '02:00:00:00:00:04' })).status).toBe(409);
    });
  });

  describe('PUT /workers/{id}/default-os', () => {
    beforeEach(() => t.req('POST', '/workers', { worker_id: 'w1' }));

    it('sets and clears menu_default and menu_timeout (case-insensitive, "" or null clears)', async () => {
      const r = await t.req('PUT', '/workers/w1/default-os', { menu_default: 'Menu-Install', menu_timeout: 3000 });
      expect(r.status).toBe(200);
      expect(r.body.boot).toEqual({ menu_default: 'menu-install', menu_timeout: 3000 });
      const c = await t.req('PUT', '/workers/w1/default-os', { menu_default: '', menu_timeout: null });
      expect(c.body.boot).toEqual({ menu_default: null, menu_timeout: null });
      expect((await t.req('GET', '/operations')).body.entries.pop()).toMatchObject({ op: 'worker.default_os', menu_default: null });
    });

    it('os: 409 without disks, 400 outside the enum; clearing os is allowed', async () => {
      const r = await t.req('PUT', '/workers/w1/default-os', { os: 'Ubuntu' });
      expect(r.status).toBe(409);
      expect(r.body.message).toContain('no system disk');
      expect((await t.req('PUT', '/workers/w1/default-os', { os: 'plan9' })).status).toBe(400);
      const clear = await t.req('PUT', '/workers/w1/default-os', { os: null });
      expect(clear.status).toBe(200);
      expect(clear.body.default_os).toBeNull();
    });

    it('400 when no field is given or values are invalid, 404 for an unknown worker', async () => {
      const before = t.snapshot();
      for (const body of [{}, { menu_default: 'dos' }, { menu_timeout: -5 }, { menu_timeout: 'soon' }, { other: 1 }]) {
        const r = await t.req('PUT', '/workers/w1/default-os', body);
        expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), 400]);
      }
      expect((await t.req('PUT', '/workers/nope/default-os', { menu_timeout: 1 })).status).toBe(404);
      expect(t.snapshot()).toEqual(before);
    });
  });

  describe('DELETE /workers and POST /workers/delete/batch', () => {
    it('deletes a worker, returns its device to the pool and removes the dnsmasq line', async () => {
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
      await t.req('POST', '/workers', { worker_id: 'w2', mac: '02:00:00:00:00:02' });
      const r = await t.req('DELETE', '/workers/w1?delete_disk=false');
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ deleted: 'w1', delete_disk: false, dnsmasq_removed: true });
      expect((await t.req('GET', '/devices/02:00:00:00:00:01')).body).toMatchObject({ state: 'pooled', bound_worker_id: null });
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:02,w2\n');
      expect((await t.req('DELETE', '/workers/w1')).status).toBe(404);
      expect((await t.req('DELETE', '/workers/w2?delete_disk=perhaps')).status).toBe(400);
      const idle = await t.req('POST', '/workers', { worker_id: 'w3' });
      expect(idle.status).toBe(201);
      expect((await t.req('DELETE', '/workers/w3')).body.dnsmasq_removed).toBe(false);
    });

    it('batch deletes item by item with one summary', async () => {
      await t.req('POST', '/workers/batch', { count: 3, macs: ['02:00:00:00:00:01', '02:00:00:00:00:02', '02:00:00:00:00:03'] });
      const r = await t.req('POST', '/workers/delete/batch', { worker_ids: ['worker-01', 'worker-03', 'ghost', 'a/b'], ignore_missing_target: true });
      expect(r.status).toBe(200);
      expect(r.body).toEqual({
        succeeded: [
          { worker_id: 'worker-01', hostname: 'worker-01' },
          { worker_id: 'worker-03', hostname: 'worker-03' },
        ],
        failed: [
          { worker_id: 'ghost', error: 'worker not found: ghost' },
          { worker_id: 'a/b', error: 'worker not found: a/b' },
        ],
      });
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:02,worker-02\n');
      expect((await t.req('GET', '/devices?state=pooled')).body).toHaveLength(3);
      expect((await t.req('POST', '/workers/delete/batch', { worker_ids: 'worker-02' })).status).toBe(400);
      expect((await t.req('POST', '/workers/delete/batch', { worker_ids: [], delete_disk: 'yes' })).status).toBe(400);
    });
  });
});
