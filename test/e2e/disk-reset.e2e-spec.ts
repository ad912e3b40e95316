import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { makeFile, spawnAgent, Tgtd, useLoopMount } from '../helpers/agent';
import { startApp, tempDir, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

const off = process.pid % 500;
const CONTROL = 5600 + off;
const PORTAL = CONTROL + 10000;
const AGENT_PORT = 27000 + off;
const NVME_PORT = 27600 + off;
const CAFE = '02:00:00:00:26:01';
const OFFICE = '02:00:00:00:26:02';

/**
 * Disk modes (issue 26): a `reset` disk is restored to its master, by reflink on a real btrfs
 * (loop mount) under a real stgt agent and tgtd, at the start of every boot of its worker and
 * before /boot-vars answers; a `persistent` one keeps what was written. Never while an initiator
 * holds a session on the disk (a real libiscsi login): the boot is then refused, and the next boot
 * after the logout restores it. An agent whose DISK_DIR cannot reflink refuses `reset`.
 */
describe('disk modes: reset at every boot, by reflink, never under a session', () => {
  // Outermost, so it is unmounted after the agents and tgtd below have let go of it.
  const mnt = useLoopMount('kurrent-reset-btrfs-', 1 << 30, ['mkfs.btrfs', '-q', '-f']);
  describe('a btrfs DISK_DIR (loop mount) under a real stgt agent and tgtd', () => {
    const tgtd = new Tgtd(CONTROL, PORTAL);
    const dir = tempDir('kurrent-disk-reset-');
    let agent: Awaited<ReturnType<typeof spawnAgent>>;
    let ext4Agent: Awaited<ReturnType<typeof spawnAgent>>;
    let t: TestApp;
    let initiator: ChildProcess | null = null;
    const diskDir = () => path.join(mnt, 'images');
    const master = () => path.join(diskDir(), '_tpl_ubuntu_2204.img');
    const marker = Buffer.from('KURRENT-MASTER-V1'.padEnd(512, '.'));

    beforeAll(async () => {
      await tgtd.start();
      makeFile(master(), 64 << 20, [{ offset: 0, bytes: marker }, { offset: 40 << 20, bytes: marker }]);
      const ext4Dir = path.join(dir, 'ext4-images'); // the temp directory's filesystem: no reflink here
      makeFile(path.join(ext4Dir, '_tpl_ubuntu_2204.img'), 16 << 20);
      [agent, ext4Agent] = await Promise.all([
        spawnAgent({ IPXE_AGENT_PORT: String(AGENT_PORT), IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL), IPXE_AGENT_ISCSI_PORT: String(PORTAL), IPXE_AGENT_TOKEN: 'tok', DISK_DIR: diskDir(), IPXE_AGENT_STATE_DIR: path.join(dir, 'state') }),
        spawnAgent({ IPXE_AGENT_PORT: String(NVME_PORT), IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: path.join(dir, 'nvmet'), IPXE_AGENT_TOKEN: 'tok', DISK_DIR: ext4Dir, IPXE_AGENT_STATE_DIR: path.join(dir, 'state-nvme') }),
      ]);
      t = await startApp({ IPXE_CP_DISK_RESET_TIMEOUT_MS: '3000', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '2000' });
      expect((await t.req('POST', '/agents', { id: 'a', base_url: `http://127.0.0.1:${AGENT_PORT}`, token: 'tok', iscsi_server: '127.0.0.1', role: { disk: true } })).status).toBe(201);
      for (const [id, mac] of [['cafe-01', CAFE], ['office-01', OFFICE]]) {
        await t.req('POST', '/devices', { mac });
        expect((await t.req('POST', '/workers', { worker_id: id, mac })).status).toBe(201);
      }
    }, 120_000);
    afterAll(async () => {
      initiator?.kill('SIGKILL');
      await t?.close();
      await Promise.all([agent?.stop(), ext4Agent?.stop()]);
      await tgtd.stop();
    });

    const pub = (url: string) => t.req('GET', url, undefined, { authorization: '' });
    /** What iPXE does at power-on up to the answer that sends it to its disk. */
    const powerOn = async (mac: string) => {
      expect((await pub(`/devices/report?mac=${mac}`)).status).toBe(200);
      return (await pub(`/boot-vars?mac=${mac}`)).text;
    };
    const resets = async () => (await t.req('GET', '/operations?op=disk.reset')).body.entries as { status: string; worker_id: string; error?: string; ms?: number }[];
    const scribble = (file: string) => {
      const fd = fs.openSync(file, 'r+');
      fs.writeSync(fd, Buffer.from('WRITTEN-BY-THE-WORKER'), 0, 21, 0);
      fs.writeSync(fd, Buffer.from('MORE'), 0, 4, 50 << 20);
      fs.closeSync(fd);
    };
    const sameAsMaster = (file: string) => fs.readFileSync(file).equals(fs.readFileSync(master()));

    it('a reset disk comes back byte-identical to its master at the next boot; a persistent one keeps what was written', async () => {
      const cafe = await t.req('POST', '/workers/cafe-01/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img', mode: 'reset' });
      expect([cafe.status, cafe.body.disks?.[0]?.mode]).toEqual([201, 'reset']);
      const office = await t.req('POST', '/workers/office-01/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img' });
      expect([office.status, office.body.disks?.[0]?.mode]).toEqual([201, 'persistent']);
      for (const id of ['cafe-01', 'office-01']) expect((await t.req('PUT', `/workers/${id}/default-os`, { os: 'ubuntu' })).status).toBe(200);
      const cafeFile = cafe.body.disks[0].backing;
      const officeFile = office.body.disks[0].backing;
      expect((await t.req('GET', '/operations?op=worker.disk.create')).body.entries.map((e: { mode: string }) => e.mode)).toEqual(['reset', 'persistent']);

      scribble(cafeFile);
      scribble(officeFile);
      expect(sameAsMaster(cafeFile)).toBe(false);
      const script = await powerOn(CAFE);
      expect(script).toContain('set menu-default ubuntu');
      // Restored before the answer: the file is the master's again, and shares its extents (a reflink, not a copy).
      expect(sameAsMaster(cafeFile)).toBe(true);
      const [r] = await resets();
      expect(r).toMatchObject({ status: 'ok', worker_id: 'cafe-01', iqn: cafe.body.disks[0].iqn, master: '_tpl_ubuntu_2204.img', tries: 1, ms: expect.any(Number) });
      expect((await powerOn(OFFICE)).toString()).toContain('set menu-default ubuntu');
      expect(fs.readFileSync(officeFile).subarray(0, 21).toString()).toBe('WRITTEN-BY-THE-WORKER');

      // Once per boot: iPXE asking again in the same boot, and tools asking in JSON, restore nothing.
      scribble(cafeFile);
      expect((await pub(`/boot-vars?mac=${CAFE}`)).text).toBe(script);
      expect((await pub(`/boot-vars?mac=${CAFE}&format=json`)).body.menu_default).toBe('ubuntu');
      expect(sameAsMaster(cafeFile)).toBe(false);
      expect(await resets()).toHaveLength(1);
      // The next boot does.
      await powerOn(CAFE);
      expect(sameAsMaster(cafeFile)).toBe(true);
      expect(await resets()).toHaveLength(2);
    });

    it('never under a session: a disk an initiator is logged in to is not reset and the boot is refused; after the logout the next boot restores it', async () => {
      const w = (await t.req('GET', '/workers/cafe-01')).body;
      const iqn = w.disks[0].iqn;
      const file = w.disks[0].backing;
      const chap = (await pub(`/boot-vars?mac=${CAFE}&format=json`)).body;
      // The worker's own login (its initiator name and CHAP), as its OS holds it while running.
      initiator = spawn('iscsi-perf', ['-i', `${iqn.slice(0, iqn.lastIndexOf(':'))}:cafe-01`, `iscsi://${chap.iscsi_username}%${chap.iscsi_password}@127.0.0.1:${PORTAL}/${iqn}/1`], { stdio: 'ignore' });
      expect(await until(async () => new RegExp(`${iqn.replace(/\./g, '\\.')}\\n[\\s\\S]*?I_T nexus: \\d+`).test(tgtd.show()))).toBe(true);
      scribble(file);
      const before = (await resets()).length;
      expect(await powerOn(CAFE)).toBe('#!ipxe\n# no per-worker boot vars found\n');
      expect(sameAsMaster(file)).toBe(false);
      const failed = (await resets()).slice(before);
      expect(failed).toEqual([expect.objectContaining({ status: 'failed', worker_id: 'cafe-01', error: expect.stringContaining('holds a session') })]);
      const [s] = (await t.req('GET', `/boots?mac=${CAFE}`)).body.items;
      expect(s).toMatchObject({ outcome: 'failed', reason: expect.stringContaining('disk reset failed') });

      // Logged out: the next power-on restores it (a session still going away is waited out).
      initiator.kill('SIGKILL');
      initiator = null;
      expect(await powerOn(CAFE)).toContain('set menu-default ubuntu');
      expect(sameAsMaster(file)).toBe(true);
      expect((await resets()).pop()).toMatchObject({ status: 'ok', worker_id: 'cafe-01' });
    });

    it('mode changes are audited and take effect at the next boot; reset is refused where it cannot be done', async () => {
      const w = (await t.req('GET', '/workers/cafe-01')).body;
      const tag = w.disks[0].os_tag;
      const file = w.disks[0].backing;
      const put = await t.req('PUT', `/workers/cafe-01/luns/disk/${tag}/mode`, { mode: 'persistent' });
      expect([put.status, put.body.disks[0].mode]).toEqual([200, 'persistent']);
      expect((await t.req('GET', '/operations?op=worker.disk.mode')).body.entries.pop()).toMatchObject({ worker_id: 'cafe-01', os_tag: tag, mode: 'persistent', previous: 'reset' });
      scribble(file);
      await powerOn(CAFE);
      expect(sameAsMaster(file)).toBe(false);
      expect((await t.req('PUT', `/workers/cafe-01/luns/disk/${tag}/mode`, { mode: 'reset' })).status).toBe(200);
      await powerOn(CAFE);
      expect(sameAsMaster(file)).toBe(true);

      const bad: [string, unknown, number, RegExp][] = [
        [`/workers/cafe-01/luns/disk/${tag}/mode`, { mode: 'wiped' }, 400, /^mode: must be persistent or reset/],
        [`/workers/cafe-01/luns/disk/${tag}/mode`, {}, 400, /mode/],
        ['/workers/cafe-01/luns/disk/aaaaaaaaaaaa/mode', { mode: 'reset' }, 404, /^disk not found: cafe-01 has no disk with os_tag aaaaaaaaaaaa/],
        [`/workers/nobody/luns/disk/${tag}/mode`, { mode: 'reset' }, 404, /^worker not found/],
      ];
      for (const [url, body, status, msg] of bad) {
        const r = await t.req('PUT', url, body);
        expect([url, r.status, r.body.message]).toEqual([url, status, expect.stringMatching(msg)]);
      }
      // An empty disk has no master to go back to; an agent whose DISK_DIR cannot reflink cannot reset.
      expect((await t.req('POST', '/workers/office-01/luns/disk', { type: 'empty', os: 'debian', size: '1G', mode: 'reset' })).body.message).toBe('mode: reset needs type=master (a disk is restored to the master it was cloned from)');
      const empty = await t.req('POST', '/workers/office-01/luns/disk', { type: 'empty', os: 'debian', size: '1G' });
      expect(empty.status).toBe(201);
      const emptyTag = empty.body.disks.find((d: { os: string }) => d.os === 'debian').os_tag;
      expect((await t.req('PUT', `/workers/office-01/luns/disk/${emptyTag}/mode`, { mode: 'reset' })).body.message).toMatch(/^mode: reset needs a disk cloned from a master/);
      expect((await t.req('POST', '/agents', { id: 'nv', base_url: `http://127.0.0.1:${NVME_PORT}`, token: 'tok', role: { disk: true } })).status).toBe(201);
      const noReflink = await t.req('POST', '/workers/office-01/luns/disk', { type: 'master', os: 'centos', name: '_tpl_ubuntu_2204.img', mode: 'reset', disk_agent: 'nv' });
      expect([noReflink.status, noReflink.body.message]).toEqual([409, expect.stringMatching(/^mode: reset needs reflink, and agent nv's DISK_DIR \(\w+\) cannot reflink/)]);
      expect(fs.readdirSync(path.join(dir, 'ext4-images')).sort()).toEqual(['.masters', '_tpl_ubuntu_2204.img']);
      expect((await t.req('GET', '/workers/office-01')).body.disks.map((d: { os: string }) => d.os).sort()).toEqual(['debian', 'ubuntu']);
    });
  });
});
