import { startApp, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

describe('devices (section 16)', () => {
  let t: TestApp;
  beforeEach(async () => {
    t = await startApp();
  });
  afterEach(() => t.close());

  const report = (qs: string) => t.req('GET', `/devices/report?${qs}`);

  describe('GET /devices/report', () => {
    it('pools an unknown MAC with the 11 fields normalised (hex and decimal memory)', async () => {
      const r = await report(
        'mac=000C29B98B2D&uuid=4c4c4544-0001&manufacturer=ASUSTeK%20COMPUTER%20INC.&product=ROG%20Zephyrus%20G15' +
          '&serial=SN1&cpumodel=Intel(R)%20Core(TM)%20Ultra%207%20155H&mem-total=0x8000&mem-type=DDR5&mem-speed=5600' +
          '&chip=RTL8125&busid=0110ec8125',
      );
      expect(r.status).toBe(200);
      expect(r.text).toBe('');
      const d = (await t.req('GET', '/devices/00:0c:29:b9:8b:2d')).body;
      expect(d).toMatchObject({
        mac: '00:0c:29:b9:8b:2d',
        uuid: '4c4c4544-0001',
        state: 'pooled',
        bound_worker_id: null,
        source: 'ipxe',
        key_hash: null,
        fingerprint: {
          manufacturer: 'ASUSTeK COMPUTER INC.',
          product: 'ROG Zephyrus G15',
          serial: 'SN1',
          cpumodel: 'Intel(R) Core(TM) Ultra 7 155H',
          mem_total: 32768,
          mem_type: 'DDR5',
          mem_speed: 5600,
          chip: 'RTL8125',
          busid: '0110ec8125',
        },
      });
      expect(d.first_seen).toMatch(/^\d{4}-\d\d-\d\dT/);
      expect(d.last_seen).toBe(d.first_seen);
      // The pool entry reaches the disk (coalesced flush) and the audit trail.
      await until(async () => t.read('state/devices.yml').includes('"00:0c:29:b9:8b:2d"'), 5_000);
      expect(t.read('state/devices.yml')).toContain('"00:0c:29:b9:8b:2d"');
      const ops = (await t.req('GET', '/operations?mac=000c29b98b2d')).body.entries;
      expect(ops.map((e: any) => e.op)).toEqual(['device.register']);
      expect(ops[0]).toMatchObject({ source: 'ipxe', status: 'ok' });
    });

    it('updates only non-empty fields of a known device and keeps its state', async () => {
      await report('mac=00:0c:29:00:00:01&serial=A&chip=X&mem-total=1024');
      await report('mac=00:0c:29:00:00:01&serial=&chip=Y&mem-total=');
      const d = (await t.req('GET', '/devices/00:0c:29:00:00:01')).body;
      expect(d.fingerprint).toMatchObject({ serial: 'A', chip: 'Y', mem_total: 1024 });
      expect(d.state).toBe('pooled');
    });

    it('ignores unknown MACs when auto-register is off and revoked devices always', async () => {
      await t.req('PUT', '/settings/auto-register', { enabled: false });
      expect((await report('mac=00:0c:29:00:00:02')).status).toBe(200);
      expect((await t.req('GET', '/devices/00:0c:29:00:00:02')).status).toBe(404);
      await t.req('PUT', '/settings/auto-register', { enabled: true });
      await t.req('POST', '/devices', { mac: '00:0c:29:00:00:03' });
      await t.req('DELETE', '/devices/00:0c:29:00:00:03');
      await report('mac=00:0c:29:00:00:03&serial=NEW');
      const d = (await t.req('GET', '/devices/00:0c:29:00:00:03')).body;
      expect(d.state).toBe('revoked');
      expect(d.fingerprint.serial).toBeNull();
      expect(d.last_seen).toBeNull();
    });

    it('rejects a missing or malformed mac and garbage numbers with 400', async () => {
      for (const qs of ['', 'mac=', 'mac=00:0c:29', 'mac=zz0c29b98b2d', 'mac=00:0c:29:00:00:04&mem-total=lots']) {
        const r = await report(qs);
        expect(r.status).toBe(400);
        expect(r.body.message).toMatch(/mac|mem-total/);
      }
      expect((await t.req('GET', '/devices')).body).toEqual([]);
    });
  });

  describe('register / list / get / import / revoke', () => {
    it('registers in any MAC spelling, stores the colon form, 409 on duplicates', async () => {
      const r = await t.req('POST', '/devices', { mac: '000C.29B9.8B2D', uuid: 'U', manufacturer: 'M', serial: 'S' });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({ mac: '00:0c:29:b9:8b:2d', state: 'pooled', source: 'manual', uuid: 'U' });
      expect(r.body.fingerprint).toMatchObject({ manufacturer: 'M', serial: 'S', product: null });
      for (const mac of ['00-0c-29-b9-8b-2d', '000c29b98b2d', '00:0C:29:B9:8B:2D']) {
        const dup = await t.req('POST', '/devices', { mac });
        expect(dup.status).toBe(409);
        expect(dup.body.message).toContain('00:0c:29:b9:8b:2d');
      }
      expect((await t.req('GET', '/devices/000c29b98b2d')).body.mac).toBe('00:0c:29:b9:8b:2d');
    });

    it('filters the list by state and validates the filter', async () => {
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:02' });
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:02' });
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:03' });
      await t.req('DELETE', '/devices/02:00:00:00:00:03');
      const macs = async (q: string) => (await t.req('GET', `/devices${q}`)).body.map((d: any) => d.mac);
      expect(await macs('')).toHaveLength(3);
      expect(await macs('?state=all')).toHaveLength(3);
      expect(await macs('?state=pooled')).toEqual(['02:00:00:00:00:01']);
      expect(await macs('?state=bound')).toEqual(['02:00:00:00:00:02']);
      expect(await macs('?state=revoked')).toEqual(['02:00:00:00:00:03']);
      const bad = await t.req('GET', '/devices?state=lost');
      expect(bad.status).toBe(400);
      expect(bad.body.message).toContain('state');
    });

    it('writes a list longer than one slice (500) as one JSON array, every device once, in ledger order', async () => {
      const macs = Array.from({ length: 1_234 }, (_, i) => `02:10:00:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`);
      expect((await t.req('POST', '/devices/import', { entries: macs.map((mac) => ({ mac })) })).status).toBe(200);
      await t.req('POST', '/workers', { worker_id: 'w1', mac: macs[700] });
      const all = await t.req('GET', '/devices');
      expect(all.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(all.body.map((d: any) => d.mac)).toEqual(macs);
      expect(JSON.parse(all.text)).toEqual(all.body);
      const pooled = (await t.req('GET', '/devices?state=pooled')).body.map((d: any) => d.mac);
      expect(pooled).toEqual(macs.filter((m) => m !== macs[700]));
      const workers = await t.req('GET', '/workers');
      expect(workers.body).toEqual([expect.objectContaining({ worker_id: 'w1', mac: macs[700] })]);
    });

    it('404 for an unknown device, 400 for a malformed MAC in the path', async () => {
      expect((await t.req('GET', '/devices/02:00:00:00:00:09')).status).toBe(404);
      const r = await t.req('GET', '/devices/not-a-mac');
      expect(r.status).toBe(400);
      expect(r.body.message).toContain('mac');
    });

    it('imports item by item: created, skipped (existing), failed (bad MAC, revoked)', async () => {
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:02' });
      await t.req('DELETE', '/devices/02:00:00:00:00:02');
      const r = await t.req('POST', '/devices/import', {
        entries: [
          { mac: '02-00-00-00-00-03', serial: 'S3' },
          { mac: '02:00:00:00:00:01' },
          { mac: 'garbage' },
          { mac: '02:00:00:00:00:02' },
          { mac: '020000000003' },
        ],
      });
      expect(r.status).toBe(200);
      expect(r.body.created).toEqual(['02:00:00:00:00:03']);
      expect(r.body.skipped.map((s: any) => s.mac)).toEqual(['02:00:00:00:00:01', '02:00:00:00:00:03']);
      expect(r.body.failed.map((s: any) => s.mac)).toEqual(['garbage', '02:00:00:00:00:02']);
      expect(r.body.failed[1].error).toContain('revoked');
      expect((await t.req('GET', '/devices/02:00:00:00:00:03')).body.fingerprint.serial).toBe('S3');
      const bad = await t.req('POST', '/devices/import', { entries: 'x' });
      expect(bad.status).toBe(400);
      expect(bad.body.message).toContain('entries');
    });

    it('revokes pooled devices only: 409 when bound or already revoked; revoked cannot re-register', async () => {
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
      expect((await t.req('DELETE', '/devices/02:00:00:00:00:01')).status).toBe(409);
      await t.req('DELETE', '/devices/02:00:00:00:00:01/bind');
      const r = await t.req('DELETE', '/devices/02:00:00:00:00:01');
      expect(r.status).toBe(200);
      expect(r.body.state).toBe('revoked');
      expect((await t.req('DELETE', '/devices/02:00:00:00:00:01')).status).toBe(409);
      expect((await t.req('DELETE', '/devices/02:00:00:00:00:09')).status).toBe(404);
      expect((await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' })).status).toBe(409);
      expect((await t.req('POST', '/workers', { worker_id: 'w2', mac: '02:00:00:00:00:01' })).status).toBe(409);
    });
  });

  describe('bind / unbind (16.7, 16.8)', () => {
    beforeEach(async () => {
      for (const m of ['02:00:00:00:00:01', '02:00:00:00:00:02', '02:00:00:00:00:03']) await t.req('POST', '/devices', { mac: m });
      await t.req('POST', '/workers', { worker_id: 'w1' });
      await t.req('POST', '/workers', { worker_id: 'w2', hostname: 'host-2' });
    });

    it('binds, writes dhcp-hosts.conf, is idempotent, and audits with old_* fields', async () => {
      const r = await t.req('POST', '/devices/02-00-00-00-00-01/bind?worker_id=W1');
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ state: 'bound', bound_worker_id: 'w1' });
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:01,w1\n');
      const before = t.snapshot();
      const again = await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=w1');
      expect(again.status).toBe(200);
      expect(t.snapshot()).toEqual(before);
      const w = (await t.req('GET', '/workers/w1')).body;
      expect(w).toMatchObject({ mac: '02:00:00:00:00:01', bound_device: '02:00:00:00:00:01', readiness: 'partial' });
      const ops = (await t.req('GET', '/operations?mac=02:00:00:00:00:01')).body.entries;
      expect(ops.filter((e: any) => e.op === 'device.bind')).toEqual([
        expect.objectContaining({ worker_id: 'w1', old_worker_id: null, old_device_mac: null, client: expect.any(String) }),
      ]);
    });

    it('409 when the device or the worker is already bound, unless force swaps atomically', async () => {
      await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=w1');
      await t.req('POST', '/devices/02:00:00:00:00:02/bind?worker_id=w2');
      const c1 = await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=w2');
      expect(c1.status).toBe(409);
      expect(c1.body.message).toContain('already bound to w1');
      const c2 = await t.req('POST', '/devices/02:00:00:00:00:03/bind?worker_id=w1');
      expect(c2.status).toBe(409);
      expect(c2.body.message).toContain('w1 already bound');
      // force: device 01 moves from w1 to w2; w2's device 02 returns to the pool; w1 is idle.
      const f = await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=w2&force=true');
      expect(f.status).toBe(200);
      expect((await t.req('GET', '/devices/02:00:00:00:00:02')).body).toMatchObject({ state: 'pooled', bound_worker_id: null });
      expect((await t.req('GET', '/workers/w1')).body.mac).toBeNull();
      expect((await t.req('GET', '/workers/w2')).body.mac).toBe('02:00:00:00:00:01');
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:01,host-2\n');
      const bind = (await t.req('GET', '/operations?mac=02:00:00:00:00:01')).body.entries.pop();
      expect(bind).toMatchObject({ op: 'device.bind', worker_id: 'w2', old_worker_id: 'w1', old_device_mac: '02:00:00:00:00:02' });
      expect((await t.req('GET', '/operations?mac=02:00:00:00:00:02')).body.entries.pop()).toMatchObject({ op: 'device.unbind' });
    });

    it('404 for unknown device or worker, 409 for revoked, 400 for bad query', async () => {
      expect((await t.req('POST', '/devices/02:00:00:00:00:09/bind?worker_id=w1')).status).toBe(404);
      expect((await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=nope')).status).toBe(404);
      await t.req('DELETE', '/devices/02:00:00:00:00:03');
      expect((await t.req('POST', '/devices/02:00:00:00:00:03/bind?worker_id=w1')).status).toBe(409);
      for (const q of ['', '?worker_id=', '?worker_id=a/b', '?worker_id=w1&force=maybe']) {
        const r = await t.req('POST', `/devices/02:00:00:00:00:01/bind${q}`);
        expect(r.status).toBe(400);
      }
    });

    it('unbinds back to the pool and drops the dnsmasq line; 409 when not bound', async () => {
      await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=w1');
      const r = await t.req('DELETE', '/devices/02:00:00:00:00:01/bind');
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ state: 'pooled', bound_worker_id: null });
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('');
      expect((await t.req('DELETE', '/devices/02:00:00:00:00:01/bind')).status).toBe(409);
      expect((await t.req('DELETE', '/devices/02:00:00:00:00:09/bind')).status).toBe(404);
      expect((await t.req('GET', '/workers/w1')).body.readiness).toBe('idle');
    });
  });

  describe('batch bind (16.9, 16.10)', () => {
    beforeEach(async () => {
      for (let i = 1; i <= 5; i++) await t.req('POST', '/devices', { mac: `02:00:00:00:00:0${i}`, serial: `SN${i}` });
      for (let i = 1; i <= 5; i++) await t.req('POST', '/workers', { worker_id: `w${i}` });
      await t.req('POST', '/devices/02:00:00:00:00:05/bind?worker_id=w5');
      await t.req('POST', '/devices', { mac: '02:00:00:00:00:06' });
      await t.req('DELETE', '/devices/02:00:00:00:00:06');
    });

    const manifest = {
      mode: 'manifest',
      pairs: [
        { mac: '02:00:00:00:00:01', worker_id: 'w1', serial: 'SN1' },
        { mac: '02:00:00:00:00:02', worker_id: 'w2', serial: 'OTHER', manufacturer: 'X' },
        { mac: '02:00:00:00:00:01', worker_id: 'w3' },
        { mac: '02:00:00:00:00:03', worker_id: 'w5' },
        { mac: '02:00:00:00:00:04', worker_id: 'ghost' },
        { mac: '02:00:00:00:00:07', worker_id: 'w4' },
        { mac: '02:00:00:00:00:06', worker_id: 'w4' },
        { mac: 'nonsense', worker_id: 'w4' },
      ],
    };

    it('previews without writing anything', async () => {
      const before = t.snapshot();
      const r = await t.req('POST', '/devices/bind/batch/preview', manifest);
      expect(r.status).toBe(200);
      expect(t.snapshot()).toEqual(before);
      expect(r.body.matched).toEqual([
        { mac: '02:00:00:00:00:01', worker_id: 'w1', device_state: 'pooled', worker_state: 'registered', fingerprint_mismatch: null },
        {
          mac: '02:00:00:00:00:02',
          worker_id: 'w2',
          device_state: 'pooled',
          worker_state: 'registered',
          fingerprint_mismatch: { fields: ['serial'] },
        },
      ]);
      expect(r.body.conflicts.map((c: any) => [c.mac, c.worker_id])).toEqual([
        ['02:00:00:00:00:01', 'w3'],
        ['02:00:00:00:00:03', 'w5'],
        ['02:00:00:00:00:04', 'ghost'],
      ]);
      expect(r.body.not_found.map((c: any) => c.mac)).toEqual(['02:00:00:00:00:07', '02:00:00:00:00:06', 'nonsense']);
      expect(r.body.summary).toEqual({ total: 8, ok: 2, conflict: 3, not_found: 3 });
    });

    it('executes item by item, is idempotent, audits each bind and the batch', async () => {
      const r = await t.req('POST', '/devices/bind/batch', manifest);
      expect(r.status).toBe(200);
      expect(r.body.succeeded).toEqual([
        { mac: '02:00:00:00:00:01', worker_id: 'w1', fingerprint_mismatch: null },
        { mac: '02:00:00:00:00:02', worker_id: 'w2', fingerprint_mismatch: { fields: ['serial'] } },
      ]);
      expect(r.body.skipped.map((s: any) => s.mac)).toEqual(['02:00:00:00:00:01', '02:00:00:00:00:03']);
      expect(r.body.failed.map((s: any) => s.mac)).toEqual(['02:00:00:00:00:04', '02:00:00:00:00:07', '02:00:00:00:00:06', 'nonsense']);
      expect(t.read('dnsmasq/dhcp-hosts.conf').split('\n').filter(Boolean).sort()).toEqual([
        '02:00:00:00:00:01,w1',
        '02:00:00:00:00:02,w2',
        '02:00:00:00:00:05,w5',
      ]);
      const ops = (await t.req('GET', '/operations')).body.entries;
      expect(ops.filter((e: any) => e.op === 'device.bind' && e.via === 'batch').map((e: any) => e.mac)).toEqual([
        '02:00:00:00:00:01',
        '02:00:00:00:00:02',
      ]);
      expect(ops.find((e: any) => e.op === 'device.bind.batch')).toMatchObject({ succeeded: 2, skipped: 2, failed: 4 });
      const again = await t.req('POST', '/devices/bind/batch', {
        pairs: manifest.pairs.slice(0, 2),
      });
      expect(again.body.succeeded).toEqual([]);
      expect(again.body.skipped).toHaveLength(2);
    });

    it('sequential mode pairs by index; unequal lengths are a 400', async () => {
      const r = await t.req('POST', '/devices/bind/batch', {
        mode: 'sequential',
        macs: ['02:00:00:00:00:03', '02:00:00:00:00:04'],
        worker_ids: ['w3', 'w4'],
      });
      expect(r.body.succeeded.map((s: any) => s.worker_id)).toEqual(['w3', 'w4']);
      const before = t.snapshot();
      const bad = await t.req('POST', '/devices/bind/batch/preview', { mode: 'sequential', macs: ['a'], worker_ids: [] });
      expect(bad.status).toBe(400);
      expect(bad.body.message).toMatch(/same length/);
      expect((await t.req('POST', '/devices/bind/batch', { mode: 'zigzag', pairs: [] })).status).toBe(400);
      expect(t.snapshot()).toEqual(before);
    });
  });
});
