import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BootSessionsService } from '../../src/control-plane/boots/boot-sessions.service';
import { Clock } from '../../src/control-plane/common/clock';
import { BootEvent, BootEventRepository, keptByPrune } from '../../src/control-plane/repositories/boot-events/boot-event.repository';
import { PgBootEventRepository } from '../../src/control-plane/repositories/boot-events/pg-boot-event.repository';
import { makeFile, spawnAgent, Tgtd } from '../helpers/agent';
import { onPostgres, startApp, tempDir, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

const off = process.pid % 500;
const CONTROL = 5000 + off;
const PORTAL = CONTROL + 10000;
const AGENT_PORT = 26000 + off;
const MAC = '02:00:00:00:25:01';
const LOOPER = '02:00:00:00:25:02';

describe('boot sessions (issue 25): stages, the disk login seen on a real tgtd, loops and holds', () => {
  const tgtd = new Tgtd(CONTROL, PORTAL);
  const dir = tempDir('kurrent-boots-');
  const diskDir = path.join(dir, 'images');
  let agent: Awaited<ReturnType<typeof spawnAgent>>;
  let t: TestApp;
  let initiator: ChildProcess | null = null;

  beforeAll(async () => {
    await tgtd.start();
    makeFile(path.join(diskDir, '_tpl_ubuntu_2204.img'), 16 << 20);
    agent = await spawnAgent({ IPXE_AGENT_PORT: String(AGENT_PORT), IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL), IPXE_AGENT_ISCSI_PORT: String(PORTAL), IPXE_AGENT_TOKEN: 'tok', DISK_DIR: diskDir, IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state') });
  });
  afterAll(async () => {
    initiator?.kill('SIGKILL');
    await agent?.stop();
    await tgtd.stop();
  });
  afterEach(async () => {
    initiator?.kill('SIGKILL');
    initiator = null;
    for (const w of (await t.req('GET', '/workers')).body) await t.req('DELETE', `/workers/${w.worker_id}?delete_disk=true&ignore_missing_target=true`);
    await t.close();
  });

  const start = async (appDir?: string) => {
    t = await startApp({ IPXE_CP_DISK_WATCH_MS: '100', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '2000' }, appDir ? { dir: appDir } : {});
  };
  const boots = async (q: string) => (await t.req('GET', `/boots${q}`)).body.items;
  const pub = (url: string) => t.req('GET', url, undefined, { authorization: '' });

  it('records report, vars, menu and the disk login of a real iSCSI initiator, then the OS', async () => {
    await start();
    expect((await t.req('POST', '/agents', { id: 'a', base_url: `http://127.0.0.1:${AGENT_PORT}`, token: 'tok', iscsi_server: '127.0.0.1', role: { disk: true } })).status).toBe(201);
    await t.req('POST', '/devices', { mac: MAC });
    expect((await t.req('POST', '/workers', { worker_id: 'seat-01', mac: MAC })).status).toBe(201);
    const disk = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img', disk_agent: 'a' });
    expect(disk.status).toBe(201);
    expect((await t.req('PUT', '/workers/seat-01/default-os', { os: 'ubuntu' })).status).toBe(200);
    const iqn = (await t.req('GET', '/workers/seat-01')).body.disks[0].iqn;

    expect((await pub(`/devices/report?mac=${MAC}`)).status).toBe(200);
    expect((await pub(`/boot-vars?mac=${MAC}`)).text).toContain('set menu-default ubuntu');
    expect((await pub(`/boot-menu?mac=${MAC}`)).status).toBe(200);
    let [s] = await boots(`?mac=${MAC}`);
    expect(s).toMatchObject({ mac: MAC, worker_id: 'seat-01', outcome: 'in_progress', stage: 'menu', reason: null, looping: false });
    expect(s.stages.map((x: { stage: string }) => x.stage)).toEqual(['report', 'vars', 'menu']);
    expect(s.stages[1].detail).toEqual({ answer: 'disk', disk: iqn, transport: 'iscsi', agent: 'a' });

    // A real login on tgtd (libiscsi's iscsi-perf keeps reading until killed), as the worker's iPXE
    // logs in: its initiator name and the CHAP credential /boot-vars gave the bound MAC.
    const chap = (await pub(`/boot-vars?mac=${MAC}&format=json`)).body;
    const name = `${iqn.slice(0, iqn.lastIndexOf(':'))}:seat-01`;
    initiator = spawn('iscsi-perf', ['-i', name, `iscsi://${chap.iscsi_username}%${chap.iscsi_password}@127.0.0.1:${PORTAL}/${iqn}/1`], { stdio: 'ignore' });
    s = await until(async () => (await boots(`?mac=${MAC}`)).find((x: { outcome: string }) => x.outcome === 'booted'));
    expect(s).toMatchObject({ outcome: 'booted', stage: 'disk' });
    expect(s.stages[3]).toMatchObject({ stage: 'disk', detail: { target: iqn, agent: 'a', initiator: name } });
    expect(s.stages[3].offset_ms).toBeGreaterThanOrEqual(0);

    expect((await t.req('POST', `/boots/os-up?mac=${MAC}`, undefined, { authorization: '' })).status).toBe(204);
    [s] = await boots(`?mac=${MAC}`);
    expect(s.stages.map((x: { stage: string }) => x.stage)).toEqual(['report', 'vars', 'menu', 'disk', 'os']);
    expect((await t.req('GET', '/workers/seat-01')).body.last_boot).toMatchObject({ id: s.id, outcome: 'booted', stage: 'os' });
    expect((await t.req('GET', `/devices/${MAC}`)).body.last_boot).toMatchObject({ id: s.id, outcome: 'booted' });
    const metrics = (await t.req('GET', '/metrics')).text;
    expect(metrics).toMatch(/kurrent_boot_stage_seconds_count\{stage="disk"\} 1/);

    // A new boot supersedes nothing (the last one booted); the same login still held by the
    // initiator does not count as the new boot's disk stage.
    await pub(`/devices/report?mac=${MAC}`);
    await pub(`/boot-vars?mac=${MAC}`);
    const both = await boots(`?mac=${MAC}`);
    expect(both.map((x: { outcome: string }) => x.outcome)).toEqual(['in_progress', 'booted']);
    expect((await t.req('GET', '/metrics')).text).toMatch(/kurrent_boots_total\{outcome="booted"\} 1/);
  }, 60_000);

  it('catches a boot loop after three boots that never reach the disk, holds it, and releases it', async () => {
    await start();
    await t.req('POST', '/devices', { mac: LOOPER });
    await t.req('POST', '/workers', { worker_id: 'seat-02', mac: LOOPER });
    const boot = async () => {
      await pub(`/devices/report?mac=${LOOPER}`);
      return (await pub(`/boot-vars?mac=${LOOPER}`)).text;
    };
    for (let i = 0; i < 3; i++) expect(await boot()).toContain('set menu-default reboot');
    const held = await boot();
    expect(held).toContain('# boot-loop hold');
    expect(held).toContain(`Kurrent holds this machine (${LOOPER}): 3 boots in 10 min never reached the disk (last stopped at vars: the worker has no disk`);
    expect(held).toContain('echo Control plane: ${controller}');
    const list = await boots(`?mac=${LOOPER}`);
    expect(list.map((x: { outcome: string }) => x.outcome)).toEqual(['held', 'failed', 'failed', 'failed']);
    expect(list[1].reason).toBe('the worker has no disk (answered menu-default reboot)');
    expect(list.every((x: { looping: boolean }) => x.looping)).toBe(true);
    const w = (await t.req('GET', '/workers/seat-02')).body;
    expect(w.boot_readiness.reasons.map((r: { code: string }) => r.code)).toContain('boot-loop-hold');
    const audits = (await t.req('GET', '/operations?op=device.boot_loop')).body.entries;
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ mac: LOOPER, worker_id: 'seat-02', status: 'failed', action: 'hold' });
    expect((await t.req('GET', '/metrics')).text).toMatch(/kurrent_devices_looping 1/);

    const rel = await t.req('POST', `/boots/${LOOPER.replace(/:/g, '-')}/release`);
    expect(rel.status).toBe(200);
    expect(rel.body).toEqual({ mac: LOOPER, looping: false, held: false, released: true });
    expect((await t.req('POST', `/boots/${LOOPER}/release`)).body.released).toBe(false);
    expect((await t.req('GET', '/operations?op=device.boot_hold.release')).body.entries).toHaveLength(1);
    expect(await boot()).toContain('set menu-default reboot');
    expect((await t.req('POST', '/boots/02:00:00:00:99:99/release')).status).toBe(404);
    expect((await t.req('POST', '/boots/nope/release')).status).toBe(400);
  });

  it('keep-looping only marks; a quiet boot becomes stuck; sessions survive a restart', async () => {
    const appDir = tempDir('kurrent-boots-restart-');
    await start(appDir);
    const clock = t.app.get(Clock);
    let now = Date.now();
    clock.now = () => new Date(now);
    const bad = await t.req('PUT', '/settings/boot-policy', { loop_action: 'stop', loop_threshold: 1 });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/loop_threshold: .*; loop_action: /);
    expect((await t.req('GET', '/settings/boot-policy')).body).toEqual({ loop_threshold: 3, loop_window_minutes: 10, loop_action: 'hold', stuck_after_seconds: 300 });
    const ok = await t.req('PUT', '/settings/boot-policy', { loop_action: 'keep-looping', stuck_after_seconds: 60 });
    expect(ok.body).toEqual({ loop_threshold: 3, loop_window_minutes: 10, loop_action: 'keep-looping', stuck_after_seconds: 60 });
    expect((await t.req('GET', '/operations?op=settings.boot_policy')).body.entries).toHaveLength(1);

    await t.req('POST', '/devices', { mac: LOOPER });
    await t.req('POST', '/workers', { worker_id: 'seat-03', mac: LOOPER });
    for (let i = 0; i < 4; i++) {
      await pub(`/devices/report?mac=${LOOPER}`);
      expect((await pub(`/boot-vars?mac=${LOOPER}`)).text).toContain('set menu-default reboot');
      now += 1000;
    }
    expect((await boots(`?mac=${LOOPER}&limit=1`))[0]).toMatchObject({ looping: true, outcome: 'failed' });

    await t.req('POST', '/devices', { mac: MAC });
    await pub(`/devices/report?mac=${MAC}`);
    expect((await pub(`/boot-vars?mac=${MAC}`)).text).toContain('a pooled device (waiting to be bound');
    expect((await boots(`?mac=${MAC}`))[0].outcome).toBe('waiting');
    now += 1000;
    await t.req('POST', '/workers', { worker_id: 'seat-04', mac: MAC });
    await t.req('PUT', '/workers/seat-04/default-os', { menu_default: 'exit' });
    await pub(`/devices/report?mac=${MAC}`);
    await pub(`/boot-vars?mac=${MAC}`);
    expect((await boots(`?mac=${MAC}`))[0]).toMatchObject({ outcome: 'in_progress', worker_id: 'seat-04' });
    now += 61_000;
    expect((await boots(`?mac=${MAC}`))[0]).toMatchObject({ outcome: 'stuck', stage: 'vars' });
    expect((await boots(`?outcome=stuck`)).map((x: { mac: string }) => x.mac)).toEqual([MAC]);
    expect((await boots(`?worker_id=seat-04`)).length).toBe(1);
    expect((await boots(`?mac=${MAC}`)).map((x: { outcome: string }) => x.outcome)).toEqual(['stuck', 'waiting']);
    expect(await boots(`?since=${new Date(now + 1000).toISOString()}`)).toEqual([]);
    for (const q of ['?outcome=bad', '?mac=zz', '?since=yesterday', '?limit=0']) {
      const r = await t.req('GET', `/boots${q}`);
      expect([q, r.status]).toEqual([q, 400]);
      expect(r.body.message.toString()).toMatch(new RegExp(q.slice(1, q.indexOf('='))));
    }
    const before = await boots('?limit=1000');
    await t.close();
    // A clean shutdown leaves the timelines (either engine); the next start takes them and reads only what came after.
    const snapshot = path.join(appDir, 'state', 'boot-timelines.snapshot');
    expect(fs.readFileSync(snapshot, 'utf8').split('\n').filter(Boolean).length).toBe(1 + new Set(before.map((x: { mac: string }) => x.mac)).size);
    await start(appDir);
    expect(fs.existsSync(snapshot)).toBe(false);
    expect(t.app.get(BootSessionsService).startedFrom).toBe('snapshot');
    t.app.get(Clock).now = () => new Date(now);
    expect(await boots('?limit=1000')).toEqual(before);

    // A store the snapshot no longer fits (files: the events file replaced by a copy, as by a
    // restored backup; PostgreSQL: the same rows under new ids): the start replays, and sees the same.
    const db = t.env.IPXE_CP_DATABASE_URL;
    await t.close();
    expect(fs.existsSync(snapshot)).toBe(true);
    if (onPostgres()) {
      execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', db, '-c', `BEGIN;
        CREATE TEMP TABLE copied AS SELECT row_number() OVER (ORDER BY id) AS n, at, mac, stage, node, worker, detail FROM boot_events;
        DELETE FROM boot_events;
        INSERT INTO boot_events (at, mac, stage, node, worker, detail) SELECT at, mac, stage, node, worker, detail FROM copied ORDER BY n;
        COMMIT;`]);
    } else {
      const events = path.join(appDir, 'state', 'boot-events.jsonl');
      fs.copyFileSync(events, `${events}.copy`);
      fs.renameSync(`${events}.copy`, events);
    }
    await start(appDir);
    expect([fs.existsSync(snapshot), t.app.get(BootSessionsService).startedFrom]).toEqual([false, 'events']);
    t.app.get(Clock).now = () => new Date(now);
    expect(await boots('?limit=1000')).toEqual(before);
  });

  it('a start after a crash reads the snapshot the last prune left and every event after it, its own too, and sees what the crashed one saw', async () => {
    const appDir = tempDir('kurrent-boots-crash-');
    // The first prune comes one period after start (5 s here), on the control plane's clock.
    t = await startApp({ IPXE_CP_BOOT_EVENT_PRUNE_SECONDS: '5' }, { dir: appDir });
    let now = Date.now();
    t.app.get(Clock).now = () => new Date(now);
    const svc = t.app.get(BootSessionsService);
    const macs = ['02:00:00:00:26:01', '02:00:00:00:26:02', '02:00:00:00:26:03'];
    for (const [i, m] of macs.entries()) {
      await t.req('POST', '/devices', { mac: m });
      expect((await t.req('POST', '/workers', { worker_id: `seat-2${i}`, mac: m })).status).toBe(201);
    }
    const bootOnce = async (m: string) => {
      await pub(`/devices/report?mac=${m}`);
      await pub(`/boot-vars?mac=${m}`);
      now += 1000;
    };
    await bootOnce(macs[0]);
    await bootOnce(macs[1]);
    now += 6000;
    expect(await until(async () => svc.snapshotsWritten === 1)).toBe(true);
    const snapshot = path.join(appDir, 'state', 'boot-timelines.snapshot');
    const periodic = fs.readFileSync(snapshot);
    // After it: more boots of this control plane, written to the store, then the crash.
    await bootOnce(macs[0]);
    await bootOnce(macs[2]);
    await svc.flush();
    const before = await boots('?limit=1000');
    expect(before.map((x: { mac: string }) => x.mac).sort()).toEqual([macs[0], macs[0], macs[1], macs[2]]);
    // The crash, as a clean stop whose snapshot is then put back to the periodic one (the events
    // in the store are the same: the last flush above wrote everything).
    await t.close();
    fs.writeFileSync(snapshot, periodic);
    await start(appDir);
    expect(t.app.get(BootSessionsService).startedFrom).toBe('snapshot');
    t.app.get(Clock).now = () => new Date(now);
    expect(await boots('?limit=1000')).toEqual(before);
  });

  // Last in this file: it stops the agent.
  it("the store is pruned to what the timelines hold (by age, by each device's cut, all but each device's latest release) and read back whole, in pages", async () => {
    await start();
    const repo = t.app.get(BootEventRepository);
    const now = Date.now();
    const macs = ['02:00:00:00:25:0a', '02:00:00:00:25:0b', '02:00:00:00:25:0c'];
    // Another control plane's events (12,000: past the size under which a file is left alone), with releases between them.
    const events = Array.from({ length: 12_000 }, (_, i): BootEvent =>
      i % 1000 === 7
        ? { at: now - 12_000_000 + i * 1000, mac: macs[i % 3], stage: 'release', node: 'elsewhere', detail: { by: `op-${i}` } }
        : { at: now - 12_000_000 + i * 1000, mac: macs[i % 3], stage: i % 2 ? 'vars' : 'report', node: 'elsewhere', ...(i % 2 ? { detail: { answer: 'reboot' } } : { worker: 'seat-9' }) },
    );
    await repo.append(events);
    // PostgreSQL reads in pages and deletes in batches: small ones here, so the test sees several.
    if (repo instanceof PgBootEventRepository) Object.assign(repo, { pruneBatch: 700, loadPage: 1000 });
    const spec = { before: now - 11_000_000, cuts: new Map([[macs[0], { before: now - 6_000_000, keep: [now - 9_000_000, now - 8_500_000] as const }], [macs[1], { before: now - 2_000_000 }]]), held: 0 };
    await repo.prune(spec);
    const kept = keptByPrune(events, spec);
    expect(kept.filter((e) => e.stage === 'release').map((e) => e.mac).sort()).toEqual([...macs].sort());
    expect(kept.length).toBeLessThan(7000); // of the 11,000 the age alone keeps
    expect(kept.filter((e) => e.mac === macs[0] && e.at < now - 6_000_000 && e.stage !== 'release')).toHaveLength(167);
    const loaded: BootEvent[] = [];
    await repo.load(0, (e) => loaded.push(e));
    expect(loaded).toEqual(kept);
  });

  it('the change feed (GET /changes) wakes a long-poll for ledger, audit, settings and boots, and when the agent dies; agents show their usage', async () => {
    t = await startApp({ IPXE_CP_DISK_WATCH_MS: '100', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '2000', IPXE_CP_AGENT_WATCH_MS: '200' });
    const first = (await t.req('GET', '/changes')).body;
    expect(first).toMatchObject({ reset: true, topics: ['ledger', 'audit', 'boots', 'agents', 'settings'] });
    let cursor: string = first.cursor;
    /** Topics seen until `want` is among them (the long-poll answers as soon as anything changed). */
    const until = async (want: string, ms = 15_000): Promise<string[]> => {
      const seen: string[] = [];
      const end = Date.now() + ms;
      while (!seen.includes(want) && Date.now() < end) {
        const r = await t.req('GET', `/changes?cursor=${cursor}&wait=${Math.max(1, Math.ceil((end - Date.now()) / 1000))}`);
        expect(r.status).toBe(200);
        expect(r.body.reset).toBe(false);
        cursor = r.body.cursor;
        seen.push(...r.body.topics);
      }
      return seen;
    };
    // Nothing changed: wait=0 answers at once, with the same cursor.
    const quiet = await t.req('GET', `/changes?cursor=${cursor}&wait=0`);
    expect(quiet.body).toEqual({ cursor, topics: [], reset: false });
    for (const q of ['wait=61', 'wait=-1', 'wait=x']) {
      const r = await t.req('GET', `/changes?${q}`);
      expect([q, r.status]).toEqual([q, 400]);
      expect(r.body.message.toString()).toMatch(/wait/);
    }

    const polling = until('audit');
    // A waiting long-poll shows in /metrics.
    let metrics = '';
    for (let i = 0; i < 100 && !/kurrent_change_feed_waiting 1\b/.test(metrics); i++) metrics = (await t.req('GET', '/metrics')).text;
    expect(metrics).toMatch(/kurrent_change_feed_waiting 1\b/);
    expect((await t.req('POST', '/agents', { id: 'a', base_url: `http://127.0.0.1:${AGENT_PORT}`, token: 'tok', iscsi_server: '127.0.0.1', role: { disk: true } })).status).toBe(201);
    expect(await polling).toContain('audit');
    expect(await until('agents')).toContain('agents'); // agents.yml's revision, then the watcher's first probe

    const ledger = until('ledger');
    await t.req('POST', '/devices', { mac: MAC });
    await t.req('POST', '/workers', { worker_id: 'seat-05', mac: MAC });
    expect(await ledger).toContain('ledger');
    expect((await t.req('POST', '/workers/seat-05/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img', disk_agent: 'a' })).status).toBe(201);
    await t.req('PUT', '/workers/seat-05/default-os', { os: 'ubuntu' });

    const settings = until('settings');
    await t.req('PUT', '/settings/boot-policy', { stuck_after_seconds: 120 });
    expect(await settings).toContain('settings');

    const booting = until('boots');
    await pub(`/devices/report?mac=${MAC}`);
    await pub(`/boot-vars?mac=${MAC}`);
    expect(await booting).toContain('boots');
    // A boot that goes quiet turns stuck at read time; the feed says so when its deadline passes.
    for (let i = 0, topics = ['first']; i < 20 && topics.length; i++) ({ cursor, topics } = (await t.req('GET', `/changes?cursor=${cursor}&wait=1`)).body);
    const clock = t.app.get(Clock);
    const later = Date.now() + 121_000;
    clock.now = () => new Date(later);
    expect(await until('boots')).toContain('boots');
    expect((await boots(`?mac=${MAC}`))[0].outcome).toBe('stuck');

    // Usage beside the live probe: the filesystem of DISK_DIR, one disk target, one master.
    const [live] = (await t.req('GET', '/agents?live=true')).body;
    expect(live.health).toBe('ok');
    expect(live.usage).toMatchObject({ disk_targets: 1, cd_targets: 0, masters: 1 });
    expect(live.usage.total_bytes).toBeGreaterThan(0);
    expect(live.usage.used_bytes + live.usage.free_bytes).toBeLessThanOrEqual(live.usage.total_bytes);
    expect(typeof live.usage.sessions).toBe('number');
    expect((await t.req('GET', '/workers/seat-05')).body.boot_readiness.bootable).toBe(true);

    // The agent dies: the watcher notices without anyone asking, readiness says so, the feed tells open pages.
    const down = until('agents');
    await agent.stop();
    expect(await down).toContain('agents');
    const w = (await t.req('GET', '/workers/seat-05')).body;
    expect(w.boot_readiness.reasons.map((r: { code: string }) => r.code)).toContain('agent-down');
    const [dead] = (await t.req('GET', '/agents?live=true')).body;
    expect(dead).toMatchObject({ health: 'unreachable', usage: null });
  });
});
