import { ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { makeFile, spawnAgent, Tgtd, useLoopMount } from '../helpers/agent';
import { startApp, tempDir, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

const off = process.pid % 500;
const CONTROL = 6100 + off;
const PORTAL = CONTROL + 10000;
const AGENT_PORT = 28200 + off;
const CAFE = '02:00:00:00:26:11';
const CAFE2 = '02:00:00:00:26:12';
const SUPER = '02:00:00:00:26:13';
const MASTER = '_tpl_ubuntu_2204.img';

const sha256 = (file: string) => createHash('sha256').update(fs.readFileSync(file)).digest('hex');

/**
 * Master versions (issue 26): a `_tpl_` file dropped into DISK_DIR becomes an immutable, numbered,
 * checksummed version once it has settled; disks are cloned from and restored to versions, never
 * from the drop file; a version in use cannot be deleted; numbers are never reused. Real parts: a
 * btrfs loop mount under a real stgt agent and tgtd, and the control plane.
 */
describe('master versions: drops become immutable versions, disks hold a version', () => {
  const mnt = useLoopMount('kurrent-versions-btrfs-', 1 << 30, ['mkfs.btrfs', '-q', '-f']);
  describe('a btrfs DISK_DIR under a real stgt agent and tgtd, and the control plane', () => {
    const tgtd = new Tgtd(CONTROL, PORTAL);
    const dir = tempDir('kurrent-master-versions-');
    let agent: Awaited<ReturnType<typeof spawnAgent>>;
    let t: TestApp;
    const diskDir = () => path.join(mnt, 'images');
    const drop = () => path.join(diskDir(), MASTER);
    const versionFile = (n: number) => path.join(diskDir(), '.masters', MASTER, `${n}.img`);
    const marker = (v: string) => Buffer.from(`KURRENT-MASTER-${v}`.padEnd(512, '.'));
    /** A new file under the master's name, as an operator copies one in: written aside, renamed over. */
    const dropVersion = (v: string) => {
      const aside = path.join(diskDir(), `.incoming-${v}`);
      makeFile(aside, 32 << 20, [{ offset: 0, bytes: marker(v) }, { offset: 20 << 20, bytes: marker(v) }]);
      fs.renameSync(aside, drop());
    };
    const agentEnv = () => ({
      IPXE_AGENT_PORT: String(AGENT_PORT),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL),
      IPXE_AGENT_ISCSI_PORT: String(PORTAL),
      IPXE_AGENT_TOKEN: 'tok',
      DISK_DIR: diskDir(),
      IPXE_AGENT_STATE_DIR: path.join(dir, 'state'),
      IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
      IPXE_AGENT_MASTER_SETTLE_SECONDS: '1',
    });
    type Catalog = { name: string; latest: number | null; unversioned_disks: number; versions: { version: number; sha256: string; agents: string[]; disks: number; note: string; origin: string; size: number }[] }[];
    const catalog = async () => (await t.req('GET', '/masters')).body.catalog as Catalog;
    const versionsOf = async () => (await catalog()).find((m) => m.name === MASTER)?.versions ?? [];

    beforeAll(async () => {
      await tgtd.start();
      fs.mkdirSync(diskDir(), { recursive: true });
      dropVersion('V1');
      agent = await spawnAgent(agentEnv());
      t = await startApp({ IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '2000' });
      expect((await t.req('POST', '/agents', { id: 'a', base_url: `http://127.0.0.1:${AGENT_PORT}`, token: 'tok', iscsi_server: '127.0.0.1', role: { disk: true } })).status).toBe(201);
      await t.req('POST', '/devices', { mac: CAFE });
      expect((await t.req('POST', '/workers', { worker_id: 'cafe-01', mac: CAFE })).status).toBe(201);
      expect((await t.req('POST', '/workers', { worker_id: 'lab-01' })).status).toBe(201);
    }, 120_000);
    afterAll(async () => {
      await t?.close();
      await agent?.stop();
      await tgtd.stop();
    });

    it('a dropped file becomes version 1 once settled: checksummed, read-only, held by the agent; disks record their version', async () => {
      const v1 = await until(async () => (await versionsOf()).find((v) => v.version === 1));
      expect(v1).toEqual({ version: 1, size: 32 << 20, allocated: expect.any(Number), sha256: sha256(drop()), created: expect.any(Number), note: '', origin: 'drop', agents: ['a'], disks: 0 });
      expect(fs.statSync(versionFile(1)).mode & 0o777).toBe(0o444);
      // Seed 000's per-agent list keeps its shape, with the versions beside it.
      const seed = (await t.req('GET', '/masters')).body.agents[0];
      expect(seed).toMatchObject({ agent: 'a', iscsi_server: '127.0.0.1', masters: [{ name: MASTER, size: 32 << 20, mtime: expect.any(Number), latest: 1 }] });

      const cafe = await t.req('POST', '/workers/cafe-01/luns/disk', { type: 'master', os: 'ubuntu', name: MASTER, mode: 'reset' });
      expect([cafe.status, cafe.body.disks[0].source]).toEqual([201, { type: 'master', name: MASTER, version: 1 }]);
      expect((await t.req('GET', '/operations?op=worker.disk.create')).body.entries[0]).toMatchObject({ worker_id: 'cafe-01', master: MASTER, version: 1 });
      expect((await versionsOf()).map((v) => [v.version, v.disks])).toEqual([[1, 1]]);
    });

    it('a new file under the same name is version 2; disks made before keep version 1, and a reset restores version 1, not the file', async () => {
      dropVersion('V2');
      const v2 = await until(async () => (await versionsOf()).find((v) => v.version === 2));
      expect(v2).toMatchObject({ version: 2, sha256: sha256(drop()), agents: ['a'], disks: 0, origin: 'drop' });
      expect((await catalog()).find((m) => m.name === MASTER)?.latest).toBe(2);
      // Version 1's bytes did not change when the file was replaced.
      expect(fs.readFileSync(versionFile(1)).subarray(0, 17).toString()).toBe('KURRENT-MASTER-V1');

      // Without a version a disk gets the latest; with one, that one.
      const latest = await t.req('POST', '/workers/lab-01/luns/disk', { type: 'master', os: 'debian', name: MASTER });
      const pinned = await t.req('POST', '/workers/lab-01/luns/disk', { type: 'master', os: 'centos', name: MASTER, version: 1 });
      expect([latest.status, pinned.status]).toEqual([201, 201]);
      const disks = Object.fromEntries((pinned.body.disks as { os: string; source: { version: number }; backing: string }[]).map((d) => [d.os, d]));
      expect([disks.debian.source.version, disks.centos.source.version]).toEqual([2, 1]);
      expect(fs.readFileSync(disks.debian.backing).equals(fs.readFileSync(versionFile(2)))).toBe(true);
      expect(fs.readFileSync(disks.centos.backing).equals(fs.readFileSync(versionFile(1)))).toBe(true);
      const missing = await t.req('POST', '/workers/lab-01/luns/disk', { type: 'master', os: 'windows', name: MASTER, version: 9 });
      expect([missing.status, missing.body.message]).toEqual([404, expect.stringMatching(/^master not found on any enabled disk agent: _tpl_ubuntu_2204\.img version 9 \(a: does not hold version 9\)$/)]);
      const emptyWithVersion = await t.req('POST', '/workers/lab-01/luns/disk', { type: 'empty', os: 'windows', size: '1G', version: 1 });
      expect([emptyWithVersion.status, emptyWithVersion.body.message]).toEqual([400, 'version: only with type=master']);

      // The reset disk of cafe-01 holds version 1: scribbled on, it comes back as version 1 at the next boot.
      const cafeDisk = (await t.req('GET', '/workers/cafe-01')).body.disks[0];
      expect((await t.req('PUT', '/workers/cafe-01/default-os', { os: 'ubuntu' })).status).toBe(200);
      const fd = fs.openSync(cafeDisk.backing, 'r+');
      fs.writeSync(fd, Buffer.from('WRITTEN-BY-THE-WORKER'), 0, 21, 0);
      fs.closeSync(fd);
      expect((await t.req('GET', `/devices/report?mac=${CAFE}`, undefined, { authorization: '' })).status).toBe(200);
      expect((await t.req('GET', `/boot-vars?mac=${CAFE}`, undefined, { authorization: '' })).text).toContain('set menu-default ubuntu');
      expect(fs.readFileSync(cafeDisk.backing).equals(fs.readFileSync(versionFile(1)))).toBe(true);
      expect((await t.req('GET', '/operations?op=disk.reset')).body.entries[0]).toMatchObject({ status: 'ok', worker_id: 'cafe-01', master: MASTER, version: 1 });
      expect((await versionsOf()).map((v) => [v.version, v.disks])).toEqual([
        [1, 2],
        [2, 1],
      ]);
    });

    it('editing the file in place makes a new version and changes no version; a version in use, or the file itself, cannot be deleted; numbers are never reused', async () => {
      const before = [sha256(versionFile(1)), sha256(versionFile(2))];
      const fd = fs.openSync(drop(), 'r+');
      fs.writeSync(fd, marker('V3'), 0, 512, 0);
      fs.closeSync(fd);
      const v3 = await until(async () => (await versionsOf()).find((v) => v.version === 3));
      expect(v3).toMatchObject({ version: 3, sha256: sha256(drop()) });
      expect([sha256(versionFile(1)), sha256(versionFile(2))]).toEqual(before);

      const inUse = await t.req('DELETE', `/masters/${MASTER}/versions/1`);
      expect([inUse.status, inUse.body.message]).toEqual([409, expect.stringMatching(/^version 1 of _tpl_ubuntu_2204\.img is in use by 2 disk\(s\) \((cafe-01\/ubuntu, lab-01\/centos|lab-01\/centos, cafe-01\/ubuntu)\); nothing was deleted$/)]);
      const theFile = await t.req('DELETE', `/masters/${MASTER}/versions/3`);
      expect([theFile.status, theFile.body.message]).toEqual([409, expect.stringContaining('is the _tpl_ubuntu_2204.img file in DISK_DIR as it is now; remove or replace that file first')]);
      expect(fs.existsSync(versionFile(1)) && fs.existsSync(versionFile(3))).toBe(true);

      // Version 2's only disk goes; then version 2 can go.
      expect((await t.req('DELETE', '/workers/lab-01/luns/disk/debian?delete_file=true')).status).toBe(200);
      const gone = await t.req('DELETE', `/masters/${MASTER}/versions/2`);
      expect([gone.status, gone.body]).toEqual([200, { name: MASTER, version: 2, deleted_on: ['a'] }]);
      expect(fs.existsSync(versionFile(2))).toBe(false);
      expect((await versionsOf()).map((v) => v.version)).toEqual([1, 3]);
      expect((await t.req('GET', '/operations?op=master.version.delete')).body.entries.map((e: { status: string; version: number }) => [e.status, e.version])).toEqual([
        ['failed', 1],
        ['failed', 3],
        ['ok', 2],
      ]);
      expect((await t.req('DELETE', `/masters/${MASTER}/versions/2`)).status).toBe(404);

      // The next drop is 4, not 2 again; also after the agent restarts. What a killed import left
      // (a partial copy, an image without its record) is swept at start and never becomes a version.
      await agent.stop();
      const store = path.dirname(versionFile(1));
      fs.writeFileSync(path.join(store, '.4.img.partial'), 'x');
      fs.writeFileSync(path.join(store, '7.img'), 'x');
      agent = await spawnAgent(agentEnv());
      expect(fs.readdirSync(store).filter((f) => f.includes('partial') || f.startsWith('7.'))).toEqual([]);
      dropVersion('V4');
      const v4 = await until(async () => (await versionsOf()).find((v) => v.version === 4));
      expect(v4).toMatchObject({ version: 4, sha256: sha256(drop()) });
      expect((await versionsOf()).map((v) => v.version)).toEqual([1, 3, 4]);
    });

    it('notes are set on every agent holding the version and audited; bad names and numbers are a 400 naming the field', async () => {
      const r = await t.req('PUT', `/masters/${MASTER}/versions/1/note`, { note: 'golden image, November' });
      expect([r.status, r.body]).toEqual([200, expect.objectContaining({ version: 1, note: 'golden image, November' })]);
      expect((await versionsOf()).find((v) => v.version === 1)?.note).toBe('golden image, November');
      expect((await t.req('GET', '/operations?op=master.version.note')).body.entries).toEqual([expect.objectContaining({ name: MASTER, version: 1, agents: ['a'] })]);
      const bad: [string, string, unknown, number, RegExp][] = [
        ['DELETE', `/masters/${MASTER}/versions/abc`, undefined, 400, /^version: must be a whole number from 1/],
        ['DELETE', `/masters/${MASTER}/versions/0`, undefined, 400, /^version: /],
        ['DELETE', '/masters/ubuntu.img/versions/1', undefined, 400, /^name: ubuntu\.img is not a master image/],
        ['DELETE', '/masters/.hidden_tpl_/versions/1', undefined, 400, /^name: must be a plain file name/],
        ['DELETE', `/masters/_tpl_none.img/versions/1`, undefined, 404, /^version not found: no enabled disk agent holds version 1 of _tpl_none\.img$/],
        ['PUT', `/masters/${MASTER}/versions/1/note`, { note: 'two\nlines' }, 400, /^note: must be one line without control characters$/],
        ['PUT', `/masters/${MASTER}/versions/1/note`, { note: 'x'.repeat(501) }, 400, /note/],
      ];
      for (const [method, url, body, status, msg] of bad) {
        const res = await t.req(method, url, body);
        expect([method, url, res.status]).toEqual([method, url, status]);
        expect(res.body.message).toMatch(msg);
      }
      expect((await versionsOf()).map((v) => v.version)).toEqual([1, 3, 4]);
    });

    it('rollout: the canary first, then all; reset disks take it at their next boot, persistent ones only by a rebase; rollback the same way', async () => {
      // State: versions 1, 3, 4; cafe-01's ubuntu disk (reset) and lab-01's centos disk (persistent) hold version 1.
      await t.req('POST', '/devices', { mac: CAFE2 });
      expect((await t.req('POST', '/workers', { worker_id: 'cafe-02', mac: CAFE2 })).status).toBe(201);
      const c2 = await t.req('POST', '/workers/cafe-02/luns/disk', { type: 'master', os: 'ubuntu', name: MASTER, version: 1, mode: 'reset' });
      expect(c2.status).toBe(201);
      expect((await t.req('PUT', '/workers/cafe-02/default-os', { os: 'ubuntu' })).status).toBe(200);
      const backing = async (w: string, os: string) => ((await t.req('GET', `/workers/${w}`)).body.disks as { os: string; backing: string; source: { version: number } }[]).find((d) => d.os === os)!;
      const holds = async (w: string, os: string, v: number) => fs.readFileSync((await backing(w, os)).backing).equals(fs.readFileSync(versionFile(v)));
      const powerOn = async (mac: string) => {
        expect((await t.req('GET', `/devices/report?mac=${mac}`, undefined, { authorization: '' })).status).toBe(200);
        expect((await t.req('GET', `/boot-vars?mac=${mac}`, undefined, { authorization: '' })).text).toContain('set menu-default ubuntu');
      };
      const states = (r: { disks: { worker_id: string; os: string; state: string; version: number }[] }) => r.disks.map((d) => `${d.worker_id}/${d.os}: v${d.version} ${d.state}`);

      // Bad input, nothing started.
      for (const [body, status, msg] of [
        [{ version: 9 }, 404, /^version not found: no enabled disk agent holds version 9/],
        [{ version: 4, canary_workers: ['nobody'] }, 400, /^canary_workers: nobody has no disk of _tpl_ubuntu_2204\.img$/],
        [{ version: 4, canary_workers: ['cafe-01'], canary_percent: 10 }, 400, /^canary_workers: give the canary as workers or as a percentage, not both$/],
        [{ version: 4, canary_percent: 0 }, 400, /^canary_percent: must be a whole number from 1 to 100$/],
        [{}, 400, /^version: is required$/],
      ] as const) {
        const r = await t.req('POST', `/masters/${MASTER}/rollout`, body);
        expect([r.status, r.body.message]).toEqual([status, expect.stringMatching(msg)]);
      }
      expect((await t.req('GET', `/masters/${MASTER}/rollout`)).status).toBe(404);

      const started = await t.req('POST', `/masters/${MASTER}/rollout`, { version: 4, canary_workers: ['cafe-01'] });
      expect([started.status, started.body.phase, started.body.previous, started.body.canary]).toEqual([200, 'canary', 1, ['cafe-01']]);
      expect(states(started.body)).toEqual(['cafe-01/ubuntu: v1 at_next_boot', 'cafe-02/ubuntu: v1 not_reached', 'lab-01/centos: v1 not_reached']);
      // The canary boots version 4; the others stay on 1.
      await powerOn(CAFE);
      await powerOn(CAFE2);
      expect([await holds('cafe-01', 'ubuntu', 4), await holds('cafe-02', 'ubuntu', 1)]).toEqual([true, true]);
      let view = (await t.req('GET', `/masters/${MASTER}/rollout`)).body;
      expect(states(view)).toEqual(['cafe-01/ubuntu: v4 on_target', 'cafe-02/ubuntu: v1 not_reached', 'lab-01/centos: v1 not_reached']);
      expect(view.disks[0].boot_since).toEqual({ started_at: expect.any(String), outcome: 'in_progress' });
      expect(view.summary.by_version).toEqual([
        { version: 1, disks: 2 },
        { version: 4, disks: 1 },
      ]);
      expect((await t.req('GET', '/operations?op=worker.disk.version')).body.entries[0]).toMatchObject({ worker_id: 'cafe-01', version: 4, previous: 1, reason: 'reset at boot' });
      // A disk made during the canary phase gets the fleet's version, not the new one.
      const during = await t.req('POST', '/workers/cafe-02/luns/disk', { type: 'master', os: 'debian', name: MASTER });
      expect(during.body.disks.find((d: { os: string }) => d.os === 'debian').source.version).toBe(1);
      expect((await t.req('DELETE', '/workers/cafe-02/luns/disk/debian?delete_file=true')).status).toBe(200);

      // All: the other reset disk at its next boot; the persistent one waits for its rebase.
      const promoted = await t.req('POST', `/masters/${MASTER}/rollout/promote`);
      expect([promoted.status, promoted.body.phase]).toEqual([200, 'all']);
      expect(states(promoted.body)).toEqual(['cafe-01/ubuntu: v4 on_target', 'cafe-02/ubuntu: v1 at_next_boot', 'lab-01/centos: v1 needs_rebase']);
      expect((await t.req('POST', `/masters/${MASTER}/rollout/promote`)).status).toBe(409);
      await powerOn(CAFE2);
      expect(await holds('cafe-02', 'ubuntu', 4)).toBe(true);
      const lab = await backing('lab-01', 'centos');
      const tag = (await t.req('GET', '/workers/lab-01')).body.disks.find((d: { os: string }) => d.os === 'centos').os_tag;
      const noConsent = await t.req('POST', `/workers/lab-01/luns/disk/${tag}/rebase`, {});
      expect([noConsent.status, noConsent.body.message]).toEqual([400, 'discard_data: is required']);
      const refused = await t.req('POST', `/workers/lab-01/luns/disk/${tag}/rebase`, { discard_data: false });
      expect([refused.status, refused.body.message]).toEqual([400, 'discard_data: must be true: a rebase replaces everything on the disk with the master version']);
      expect(fs.readFileSync(lab.backing).equals(fs.readFileSync(versionFile(1)))).toBe(true);
      const rebased = await t.req('POST', `/workers/lab-01/luns/disk/${tag}/rebase`, { discard_data: true });
      expect([rebased.status, rebased.body.disks.find((d: { os: string }) => d.os === 'centos').source.version]).toEqual([200, 4]);
      expect(await holds('lab-01', 'centos', 4)).toBe(true);
      view = (await t.req('GET', `/masters/${MASTER}/rollout`)).body;
      expect(view.summary).toMatchObject({ disks: 3, on_target: 3, by_version: [{ version: 4, disks: 3 }] });

      // Versions a rollout needs stay.
      const target = await t.req('DELETE', `/masters/${MASTER}/versions/4`);
      expect([target.status, target.body.message]).toEqual([409, `version 4 of ${MASTER} is in use by the rollout of ${MASTER} (its target); nothing was deleted`]);
      const back = await t.req('DELETE', `/masters/${MASTER}/versions/1`);
      expect([back.status, back.body.message]).toEqual([409, `version 1 of ${MASTER} is in use by the rollout of ${MASTER} (the version a rollback returns to); nothing was deleted`]);

      // Rollback: to version 1, every disk at once here.
      const rb = await t.req('POST', `/masters/${MASTER}/rollout/rollback`, {});
      expect([rb.status, rb.body.version, rb.body.previous, rb.body.phase, rb.body.rollback]).toEqual([200, 1, 4, 'all', true]);
      await powerOn(CAFE);
      expect(await holds('cafe-01', 'ubuntu', 1)).toBe(true);
      expect(states((await t.req('GET', `/masters/${MASTER}/rollout`)).body)).toEqual(['cafe-01/ubuntu: v1 on_target', 'cafe-02/ubuntu: v4 at_next_boot', 'lab-01/centos: v4 needs_rebase']);
      const ops = [];
      for (const op of ['master.rollout', 'master.rollout.promote', 'master.rollback']) ops.push(...(await t.req('GET', `/operations?op=${op}`)).body.entries.map((e: { op: string; version: number }) => `${e.op} ${e.version}`));
      expect(ops).toEqual(['master.rollout 4', 'master.rollout.promote 4', 'master.rollback 1']);
    });

    it('maintenance: one writer at a time boots a writable clone of the latest version; promote makes it the next version, discard throws it away', async () => {
      await t.req('POST', '/devices', { mac: SUPER });
      expect((await t.req('POST', '/workers', { worker_id: 'super-01', mac: SUPER })).status).toBe(201);
      expect((await t.req('GET', `/masters/${MASTER}/maintenance`)).status).toBe(404);
      const started = await t.req('POST', `/masters/${MASTER}/maintenance`, { worker_id: 'super-01', os: 'windows' });
      expect([started.status, started.body]).toEqual([201, expect.objectContaining({ name: MASTER, worker_id: 'super-01', os: 'windows', agent: 'a', from_version: 4 })]);
      const second = await t.req('POST', `/masters/${MASTER}/maintenance`, { worker_id: 'lab-01', os: 'windows' });
      expect([second.status, second.body.message]).toEqual([409, `${MASTER} is in maintenance by super-01 (windows); one maintenance writer at a time`]);
      expect((await t.req('GET', '/workers/lab-01')).body.disks.map((d: { os: string }) => d.os)).toEqual(['centos']);
      const disk = (await t.req('GET', '/workers/super-01')).body.disks[0];
      expect(disk).toMatchObject({ maintenance: true, mode: 'persistent', source: { type: 'master', name: MASTER, version: 4 } });
      expect((await t.req('PUT', `/workers/super-01/luns/disk/${disk.os_tag}/mode`, { mode: 'reset' })).status).toBe(400);
      expect((await t.req('POST', `/workers/super-01/luns/disk/${disk.os_tag}/rebase`, { discard_data: true })).status).toBe(400);
      // The maintenance disk is not one the rollout moves.
      expect((await t.req('GET', `/masters/${MASTER}/rollout`)).body.disks.map((d: { worker_id: string }) => d.worker_id)).not.toContain('super-01');

      // The super client installs updates (here: its disk written to).
      const fd = fs.openSync(disk.backing, 'r+');
      fs.writeSync(fd, marker('V5-FROM-MAINTENANCE'), 0, 512, 0);
      fs.closeSync(fd);
      // Still running (logged in to its disk): promote is refused, nothing changes.
      expect((await t.req('PUT', '/workers/super-01/default-os', { os: 'windows' })).status).toBe(200);
      const vars = (await t.req('GET', `/boot-vars?mac=${SUPER}&format=json`, undefined, { authorization: '' })).body;
      let initiator: ChildProcess | null = spawn('iscsi-perf', ['-i', `${disk.iqn.slice(0, disk.iqn.lastIndexOf(':'))}:super-01`, `iscsi://${vars.iscsi_username}%${vars.iscsi_password}@127.0.0.1:${PORTAL}/${disk.iqn}/1`], { stdio: 'ignore' });
      try {
        expect(await until(async () => new RegExp(`${disk.iqn.replace(/\./g, '\\.')}\\n[\\s\\S]*?I_T nexus: \\d+`).test(tgtd.show()))).toBe(true);
        const busy = await t.req('POST', `/masters/${MASTER}/maintenance/promote`, { note: 'December updates' });
        expect([busy.status, busy.body.message]).toEqual([409, expect.stringContaining('shut the maintenance worker down first; nothing was promoted')]);
        expect((await versionsOf()).map((v) => v.version)).toEqual([1, 3, 4]);
      } finally {
        initiator.kill('SIGKILL');
        initiator = null;
      }
      // Shut down: promoted as version 5, checksummed, with its note; the maintenance disk is gone.
      const promoted = await until(async () => {
        const r = await t.req('POST', `/masters/${MASTER}/maintenance/promote`, { note: 'December updates' });
        return r.status === 200 ? r : null;
      });
      expect(promoted?.body).toEqual({ name: MASTER, version: 5, agent: 'a', sha256: expect.stringMatching(/^[0-9a-f]{64}$/), disk_deleted: true });
      const v5 = (await versionsOf()).find((v) => v.version === 5);
      expect(v5).toMatchObject({ origin: 'promote', note: 'December updates', sha256: sha256(versionFile(5)), agents: ['a'] });
      expect(fs.readFileSync(versionFile(5)).subarray(0, 34).toString()).toBe('KURRENT-MASTER-V5-FROM-MAINTENANCE');
      expect(fs.existsSync(disk.backing)).toBe(false);
      expect((await t.req('GET', '/workers/super-01')).body.disks).toEqual([]);
      expect((await t.req('GET', `/masters/${MASTER}/maintenance`)).status).toBe(404);

      // Discard: the next maintenance (from version 5) thrown away, the master unchanged.
      // Two at once: exactly one becomes the writer.
      const both = await Promise.all(['lab-01', 'cafe-02'].map((w) => t.req('POST', `/masters/${MASTER}/maintenance`, { worker_id: w, os: 'windows' })));
      expect(both.map((r) => r.status).sort()).toEqual([201, 409]);
      const winner = both.find((r) => r.status === 201)!.body;
      expect(winner.from_version).toBe(5);
      const discarded = await t.req('DELETE', `/masters/${MASTER}/maintenance`);
      expect([discarded.status, discarded.body.worker_id]).toEqual([200, winner.worker_id]);
      expect((await t.req('GET', '/workers/lab-01')).body.disks.map((d: { os: string }) => d.os)).toEqual(['centos']);
      expect((await t.req('GET', '/workers/cafe-02')).body.disks.map((d: { os: string }) => d.os)).toEqual(['ubuntu']);
      expect((await versionsOf()).map((v) => v.version)).toEqual([1, 3, 4, 5]);
      const ops = [];
      for (const op of ['master.maintenance.start', 'master.maintenance.promote', 'master.maintenance.discard']) ops.push(...(await t.req('GET', `/operations?op=${op}`)).body.entries.map((e: { op: string; status: string; worker_id: string }) => `${e.op} ${e.status} ${e.worker_id}`));
      expect(ops).toEqual(['master.maintenance.start ok super-01', `master.maintenance.start ok ${winner.worker_id}`, 'master.maintenance.promote failed super-01', 'master.maintenance.promote ok super-01', `master.maintenance.discard ok ${winner.worker_id}`]);
    });
  });
});
