import * as fs from 'node:fs';
import * as path from 'node:path';
import { BootService } from '../../src/control-plane/boot/boot.service';
import { EncodedAnswer } from '../../src/control-plane/boot/encoded-answer';
import { itFiles, startApp, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

const EMPTY = '#!ipxe\n# no per-worker boot vars found\n';

describe('GET /boot-vars (section 5)', () => {
  let t: TestApp;
  afterEach(() => t.close());

  async function seed(env: Record<string, string> = {}) {
    t = await startApp({ IPXE_CP_TOKEN: 'sekret', ...env });
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:2d' });
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:2e' });
    await t.req('POST', '/workers', { worker_id: 'worker-01', mac: '00:0c:29:b9:8b:2d' });
    await t.req('POST', '/workers', { worker_id: 'w2', hostname: 'pc-2' });
  }
  const get = (qs: string) => t.req('GET', `/boot-vars${qs}`, undefined, { authorization: '' });

  it('answers the reboot loop for a bound worker without default boot, in both formats, without auth', async () => {
    await seed();
    const r = await get('?mac=000c29b98b2d&hostname=worker-01');
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/plain/);
    expect(r.text).toBe('#!ipxe\n# boot vars for worker-01\nset menu-default reboot\nset menu-timeout 1\n');
    const j = await get('?mac=000c29b98b2d&hostname=worker-01&format=json');
    expect(j.headers['content-type']).toMatch(/^application\/json/);
    expect(j.body).toEqual({ menu_default: 'reboot', menu_timeout: 1 });
  });

  it('derives menu_default from boot.menu_default and menu_timeout from boot or the env default', async () => {
    await seed({ IPXE_CP_BOOT_MENU_TIMEOUT: '7000', IPXE_CP_AUTO_BOOT_TIMEOUT: '3' });
    await t.req('PUT', '/workers/worker-01/default-os', { menu_default: 'exit' });
    expect((await get('?mac=00:0c:29:b9:8b:2d&hostname=worker-01&format=json')).body).toEqual({ menu_default: 'exit', menu_timeout: 7000 });
    await t.req('PUT', '/workers/worker-01/default-os', { menu_timeout: 0 });
    expect((await get('?mac=00:0c:29:b9:8b:2d&hostname=worker-01')).text).toBe(
      '#!ipxe\n# boot vars for worker-01\nset menu-default exit\nset menu-timeout 0\n',
    );
    await t.req('PUT', '/workers/worker-01/default-os', { menu_default: null });
    // Back in the reboot loop: its own short timeout, whatever boot.menu_timeout says.
    expect((await get('?mac=00:0c:29:b9:8b:2d&format=json')).body).toEqual({ menu_default: 'reboot', menu_timeout: 3 });
  });

  it('finds the worker by hostname or worker_id, else by the MAC binding', async () => {
    await seed();
    await t.req('POST', '/devices/00:0c:29:b9:8b:2e/bind?worker_id=w2');
    expect((await get('?hostname=pc-2')).text).toContain('# boot vars for pc-2');
    expect((await get('?hostname=w2')).text).toContain('# boot vars for pc-2');
    expect((await get('?hostname=PC-2&mac=00:0c:29:b9:8b:2e')).text).toContain('# boot vars for pc-2');
    // Unknown hostname (or none): fall back to the MAC's binding.
    expect((await get('?mac=00:0c:29:b9:8b:2e&hostname=unknown')).text).toContain('# boot vars for pc-2');
    expect((await get('?mac=00-0C-29-B9-8B-2E')).text).toContain('# boot vars for pc-2');
    expect((await get('?mac=&hostname=')).text).toBe(EMPTY);
  });

  it('refuses a MAC that is not bound to the named worker (anti-spoofing): empty script, no vars', async () => {
    await seed();
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:30' });
    for (const mac of ['00:0c:29:b9:8b:2e', '00:0c:29:b9:8b:30', '00:0c:29:b9:8b:99']) {
      expect((await get(`?mac=${mac}&hostname=worker-01`)).text).toBe(EMPTY);
      expect((await get(`?mac=${mac}&hostname=worker-01&format=json`)).body).toEqual({});
    }
    // A revoked device is refused everywhere.
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:31' });
    await t.req('DELETE', '/devices/00:0c:29:b9:8b:31');
    expect((await get('?mac=00:0c:29:b9:8b:31')).text).toBe(EMPTY);
    // hostname alone cannot be verified and stays allowed (compatibility).
    expect((await get('?hostname=worker-01')).text).toContain('# boot vars for worker-01');
  });

  it('sends pooled devices (and unknown ones while auto-register is on) into the reboot loop, without writing', async () => {
    await seed({ IPXE_CP_AUTO_BOOT_TIMEOUT: '2' });
    const before = t.snapshot();
    const pooled = await get('?mac=00:0c:29:b9:8b:2e');
    expect(pooled.text).toBe(
      '#!ipxe\n# boot vars for a pooled device (waiting to be bound to a worker)\nset menu-default reboot\nset menu-timeout 2\n',
    );
    expect((await get('?mac=00:0c:29:b9:8b:77&format=json')).body).toEqual({ menu_default: 'reboot', menu_timeout: 2 });
    expect(t.snapshot()).toEqual(before);
    await t.req('PUT', '/settings/auto-register', { enabled: false });
    expect((await get('?mac=00:0c:29:b9:8b:77')).text).toBe(EMPTY);
    expect((await get('?mac=00:0c:29:b9:8b:2e&format=json')).body).toEqual({ menu_default: 'reboot', menu_timeout: 2 });
  });

  itFiles('projects disk variables from the default disk when the ledger has disks', async () => {
    await seed();
    // A disk record as the agents side writes it (hand-placed here: disks arrive with agents).
    const file = path.join(t.dir, 'state/workers.yml');
    const text = fs.readFileSync(file, 'utf8').replace(
      '"disks":[]',
      '"disks":[{"agent":"a1","iqn":"iqn.2026-07.com.controller:worker-01.debian","filename":"worker-01.debian.img","backing":"/x/worker-01.debian.img","os":"debian","source":{"type":"empty","size":"1G"}},' +
        '{"agent":"a1","iqn":"iqn.2026-08.com.other:worker-01.ubuntu","filename":"worker-01.ubuntu.img","backing":"/x/worker-01.ubuntu.img","os":"ubuntu","source":{"type":"empty","size":"1G"}}]',
    );
    fs.writeFileSync(file, text);
    // Hand edits are looked for at most every 200 ms (off the event loop under load): poll.
    const edited = await until(async () => {
      const b = (await get('?hostname=worker-01&format=json')).body;
      return b.base_iqn === 'iqn.2026-07.com.controller' ? b : null;
    }, 5_000);
    expect(edited).toMatchObject({ base_iqn: 'iqn.2026-07.com.controller', menu_default: 'reboot' });
    const set = await t.req('PUT', '/workers/worker-01/default-os', { os: 'ubuntu' });
    expect(set.status).toBe(200);
    const r = await get('?mac=000c29b98b2d&hostname=worker-01');
    expect(r.text).toBe(
      '#!ipxe\n# boot vars for worker-01\nset base-iqn iqn.2026-08.com.other\nset menu-default ubuntu\nset menu-timeout 5000\n',
    );
    expect((await t.req('PUT', '/workers/worker-01/default-os', { os: 'windows' })).status).toBe(400);
  });

  it('the answer cache drops only what a change touches: telemetry and registrations leave cached answers; a worker or binding change refreshes its own', async () => {
    await seed({ IPXE_CP_AUTO_REGISTER: 'true' });
    await t.req('PUT', '/workers/w2/mac', { mac: '00:0c:29:b9:8b:2e' });
    const stats = t.app.get(BootService).cacheStats;
    const a = '?mac=00:0c:29:b9:8b:2d';
    const b = '?hostname=pc-2';
    const first = [(await get(a)).text, (await get(b)).text];
    const misses = stats.misses;
    // Report telemetry of both devices, a new device registered, a worker created elsewhere.
    for (const mac of ['00:0c:29:b9:8b:2d', '00:0c:29:b9:8b:2e', '00:0c:29:b9:8b:99']) expect((await t.req('GET', `/devices/report?mac=${mac}&serial=S1`)).status).toBe(200);
    expect((await t.req('GET', '/devices/00:0c:29:b9:8b:99')).body.state).toBe('pooled');
    await t.req('POST', '/workers', { worker_id: 'w3' });
    const hits = stats.hits;
    expect([(await get(a)).text, (await get(b)).text]).toEqual(first);
    expect([stats.hits - hits, stats.misses - misses]).toEqual([2, 0]);
    // w2's boot menu changed: its answers by name and by MAC are rendered again, worker-01's is not.
    expect((await get('?mac=00:0c:29:b9:8b:2e')).text).toBe(first[1]);
    expect((await t.req('PUT', '/workers/w2/default-os', { menu_default: 'shell' })).status).toBe(200);
    const shell = '#!ipxe\n# boot vars for pc-2\nset menu-default shell\nset menu-timeout 5000\n';
    const m0 = stats.misses;
    expect([(await get(b)).text, (await get('?mac=00:0c:29:b9:8b:2e')).text, (await get(a)).text]).toEqual([shell, shell, first[0]]);
    expect(stats.misses - m0).toBe(2);
    // worker-01's device unbound: its answer goes, and nothing else was rendered again.
    const before = stats.misses;
    expect((await t.req('DELETE', '/devices/00:0c:29:b9:8b:2d/bind')).status).toBe(200);
    expect((await get(a)).text).toBe('#!ipxe\n# boot vars for a pooled device (waiting to be bound to a worker)\nset menu-default reboot\nset menu-timeout 1\n');
    expect(stats.misses - before).toBe(1);
  });

  it("a name that is a worker's id follows that worker in the answer cache: changed or removed, its cached answer goes", async () => {
    await seed();
    const stats = t.app.get(BootService).cacheStats;
    expect((await get('?hostname=w2')).text).toContain('# boot vars for pc-2');
    const hits = stats.hits;
    expect((await get('?hostname=w2')).text).toContain('# boot vars for pc-2');
    expect(stats.hits - hits).toBe(1);
    expect((await t.req('PUT', '/workers/w2/default-os', { menu_default: 'shell' })).status).toBe(200);
    expect((await get('?hostname=w2')).text).toContain('set menu-default shell');
    // w2 removed: the name answers nothing, then the worker that takes it as its hostname.
    expect((await t.req('DELETE', '/workers/w2')).status).toBe(200);
    expect((await get('?hostname=w2')).text).toBe(EMPTY);
    expect((await t.req('POST', '/workers', { worker_id: 'w9', hostname: 'w2' })).status).toBe(201);
    expect((await get('?hostname=w2')).text).toContain('# boot vars for w2\n');
  });

  it('unknown MACs share one answer and take no cache slot; pooled devices share one encoded answer; a hit is the cached bytes', async () => {
    await seed({ IPXE_CP_AUTO_REGISTER: 'false' });
    const svc = t.app.get(BootService);
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:41' });
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:42' });
    await get('?mac=00:0c:29:b9:8b:2d'); // the cache's generation begins
    const held = svc.cachedAnswers;
    const unknown: unknown[] = [];
    for (let i = 0; i < 50; i++) unknown.push(svc.bootVars(`02:99:00:00:00:${String(i).padStart(2, '0')}`));
    expect(unknown.every((a) => a === unknown[0])).toBe(true);
    expect(unknown[0]).toBeInstanceOf(EncodedAnswer);
    expect((unknown[0] as EncodedAnswer).bytes.toString()).toBe('#!ipxe\n# no per-worker boot vars found\n');
    expect(svc.cachedAnswers).toBe(held);
    expect((await get('?mac=02:99:00:00:00:01')).text).toBe('#!ipxe\n# no per-worker boot vars found\n');
    expect((await get('?mac=02:99:00:00:00:01&format=json')).body).toEqual({});
    // Two pooled devices: one encoded answer between them, each hit that very object.
    const p1 = svc.bootVars('00:0c:29:b9:8b:41');
    const p2 = svc.bootVars('00:0c:29:b9:8b:42');
    expect(p2).toBe(p1);
    expect(svc.bootVars('00:0c:29:b9:8b:41')).toBe(p1);
    expect((p1 as EncodedAnswer).headers).toEqual(['cache-control', 'no-store', 'content-type', 'text/plain; charset=utf-8', 'content-length', String((p1 as EncodedAnswer).bytes.length)]);
    const r = await get('?mac=00:0c:29:b9:8b:42');
    expect(r.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(r.headers['cache-control']).toBe('no-store');
    expect(r.text).toBe((p1 as EncodedAnswer).bytes.toString());
    // A JSON hit keeps its media type.
    await get('?mac=00:0c:29:b9:8b:2d&format=json');
    const j = await get('?mac=00:0c:29:b9:8b:2d&format=json');
    expect(j.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(j.body).toMatchObject({ menu_default: expect.any(String) });
    // A registration of a MAC that got the shared empty answer: its next answer is its own.
    await t.req('POST', '/devices', { mac: '02:99:00:00:00:01' });
    expect((await get('?mac=02:99:00:00:00:01')).text).toBe((p1 as EncodedAnswer).bytes.toString());
  });

  it("the answer cache's bound grows with the ledger: a whole fleet's answers stay cached, crafted variants of known MACs cannot hold more than the fleet would", async () => {
    await seed();
    const svc = t.app.get(BootService);
    const stats = svc.cacheStats;
    for (let i = 1; i <= 4; i++) {
      expect((await t.req('POST', '/devices', { mac: `00:0c:29:00:00:0${i}` })).status).toBe(201);
      expect((await t.req('POST', '/workers', { worker_id: `f${i}`, mac: `00:0c:29:00:00:0${i}` })).status).toBe(201);
    }
    const fleet = ['00:0c:29:b9:8b:2d', '00:0c:29:b9:8b:2e', ...[1, 2, 3, 4].map((i) => `00:0c:29:00:00:0${i}`)];
    // No fixed part: the bound is 4 per device (24), what this fleet's /boot-vars and /boot-menu take.
    svc.answerCacheBase = 0;
    const pass = async () => {
      const [h, m] = [stats.hits, stats.misses];
      for (const mac of fleet) expect((await get(`?mac=${mac}`)).status).toBe(200);
      return { hits: stats.hits - h, misses: stats.misses - m };
    };
    await pass();
    expect(await pass()).toEqual({ hits: 6, misses: 0 });
    // A slot and an answer per device so far; crafted hostnames on a known MAC add an answer each,
    // and past 24 the cache empties instead of growing.
    for (let i = 0; i < 20; i++) {
      expect((await get(`?mac=00:0c:29:b9:8b:2d&hostname=x${i}`)).status).toBe(200);
      expect(svc.cachedAnswers).toBeLessThanOrEqual(24);
    }
    expect((await pass()).misses).toBeGreaterThan(0);
  });

  it('400 for a malformed MAC or an unknown format', async () => {
    await seed();
    expect((await get('?mac=nonsense')).status).toBe(400);
    expect((await get('?mac=00:0c:29:b9:8b:2d&format=xml')).status).toBe(400);
    expect((await get('?mac=00:0c:29:b9:8b:2d&mac=00:0c:29:b9:8b:2e')).status).toBe(400);
  });

  itFiles('a cached answer never outlives its inputs: an agents.yml hand edit changes the next answer', async () => {
    await seed();
    const file = path.join(t.dir, 'state/workers.yml');
    fs.writeFileSync(
      file,
      fs
        .readFileSync(file, 'utf8')
        .replace('"disks":[]', '"disks":[{"agent":"a1","iqn":"iqn.2026-07.com.controller:worker-01.debian","filename":"worker-01.debian.img","backing":"/x/worker-01.debian.img","os":"debian","source":{"type":"empty","size":"1G"}}]'),
    );
    const agents = (server: string, tag: string) =>
      fs.writeFileSync(path.join(t.dir, 'config/agents.yml'), `agents:\n  a1:\n    base_url: http://127.0.0.1:9\n    iscsi_server: ${server}\n    role: { disk: true, cd: false }\n    tags: [${tag}]\n    enabled: true\n`);
    agents('10.0.0.5', 'stgt');
    const q = '?mac=000c29b98b2d&hostname=worker-01&format=json';
    // The registry looks at the file at most every 500 ms, off the event loop under load: poll.
    const server = async (ip: string) => until(async () => ((await get(q)).body.iscsi_server === ip ? (await get(q)).body : null), 5_000);
    expect(await server('10.0.0.5')).toMatchObject({ iscsi_server: '10.0.0.5', iscsi_sep: ':::1:' });
    expect((await get(q)).body).toMatchObject({ iscsi_server: '10.0.0.5' }); // now from the cache
    agents('10.0.0.6', 'lio');
    expect(await server('10.0.0.6')).toMatchObject({ iscsi_server: '10.0.0.6', iscsi_sep: '::::' });
    // And a ledger change (the default disk's os) right after a cached answer.
    await t.req('PUT', '/workers/worker-01/default-os', { os: 'debian' });
    expect((await get('?mac=000c29b98b2d&hostname=worker-01')).text).toContain('set menu-default debian');
  });
});
