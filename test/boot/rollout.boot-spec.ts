import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnAgent, Tgtd, useLoopMount } from '../helpers/agent';
import { freePort, startApp, tempDir, TestApp } from '../helpers/app';
import { writeBootableMaster } from '../helpers/images';
import { until } from '../helpers/poll';

const MASTER = '_tpl_room.img';
const V1 = 'KURRENT-ROLLOUT-V1';
const V2 = 'KURRENT-ROLLOUT-V2';
const SEATS = { 'seat-a': '52:54:00:26:00:0a', 'seat-b': '52:54:00:26:00:0b' } as const;
type Seat = keyof typeof SEATS;

/**
 * A staged rollout seen from the machines (issue 26): two café seats with `reset` disks of one
 * master boot in qemu (TCG, Debian's iPXE ROM, the shipped boot.ipxe chain) from a real tgtd whose
 * DISK_DIR is a btrfs loop mount. Version 2 of the master goes to the canary seat first: it boots
 * version 2 (its marker on serial) while the other seat still boots version 1; promoted, both boot
 * version 2; rolled back, version 1 again. Each boot restores the disk before /boot-vars answers.
 */
describe('rollout of a master version to reset disks, seen by booting workers in qemu', () => {
  const mnt = useLoopMount('kurrent-rollout-boot-', 512 << 20, ['mkfs.btrfs', '-q', '-f']);
  describe('two seats, one stgt agent on btrfs, the control plane', () => {
    const dir = tempDir('kurrent-rollout-boot-');
    const CONTROL = 7800 + (process.pid % 100);
    const tgtd = new Tgtd(CONTROL, 3260);
    let agent: Awaited<ReturnType<typeof spawnAgent>>;
    let t: TestApp;
    let qemu: ChildProcess | undefined;
    let cpPort = 0;
    const images = () => path.join(mnt, 'images');
    /** A new file under the master's name, as an operator copies one in: written aside, renamed over. */
    const drop = (marker: string) => {
      writeBootableMaster(path.join(images(), '.incoming'), 8 << 20, marker);
      fs.renameSync(path.join(images(), '.incoming'), path.join(images(), MASTER));
    };
    const versions = async () => ((await t.req('GET', '/masters')).body.catalog as { name: string; versions: { version: number }[] }[]).find((m) => m.name === MASTER)?.versions.map((v) => v.version) ?? [];

    beforeAll(async () => {
      cpPort = await freePort();
      await tgtd.start();
      fs.mkdirSync(images(), { recursive: true });
      drop(V1);
      agent = await spawnAgent({
        IPXE_AGENT_PORT: String(await freePort()),
        IPXE_AGENT_BACKEND: 'stgt',
        IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL),
        DISK_DIR: images(),
        IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state'),
        IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
        IPXE_AGENT_MASTER_SETTLE_SECONDS: '1',
      });
      t = await startApp({ IPXE_CP_TOKEN: 'boot-test', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', IPXE_CP_AUTO_BOOT_TIMEOUT: '100' }, { dir: path.join(dir, 'cp') });
      await t.app.listen(cpPort, '127.0.0.1');
      expect((await t.req('POST', '/agents', { id: 'st1', base_url: agent.url, iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['storage', 'stgt'] })).status).toBe(201);
    }, 120_000);
    afterAll(async () => {
      qemu?.kill('SIGKILL');
      await t?.close();
      await agent?.stop();
      await tgtd.stop();
    });

    it('the canary seat boots version 2 while the other boots version 1; promoted, both boot 2; rolled back, 1', async () => {
      expect(await until(async () => (await versions()).includes(1))).toBe(true);
      for (const [seat, mac] of Object.entries(SEATS)) {
        await t.req('POST', '/devices', { mac });
        expect((await t.req('POST', '/workers', { worker_id: seat, mac })).status).toBe(201);
        const disk = await t.req('POST', `/workers/${seat}/luns/disk`, { type: 'master', os: 'ubuntu', name: MASTER, mode: 'reset' });
        expect([disk.status, disk.body.disks?.[0]?.source]).toEqual([201, { type: 'master', name: MASTER, version: 1 }]);
        await t.req('PUT', `/workers/${seat}/default-os`, { os: 'ubuntu', menu_timeout: 100 });
      }
      drop(V2);
      expect(await until(async () => (await versions()).includes(2))).toBe(true);

      const tftp = path.join(dir, 'tftp');
      fs.mkdirSync(tftp);
      for (const f of ['boot.ipxe', 'boot.ipxe.cfg', 'menu.ipxe']) fs.copyFileSync(path.join(__dirname, '../../docker/tftp', f), path.join(tftp, f));
      const cfg = path.join(tftp, 'boot.ipxe.cfg');
      fs.writeFileSync(cfg, fs.readFileSync(cfg, 'utf8').replace(/set controller http:\/\/\S+/, `set controller http://10.0.2.2:${cpPort}`));
      const serial = path.join(dir, 'serial.log');
      /** One power-on of a seat until its disk prints a marker (or 150 s); returns which marker. */
      const boot = async (seat: Seat): Promise<string> => {
        fs.writeFileSync(serial, '');
        qemu = spawn('qemu-system-x86_64', [
          '-accel', 'tcg', '-m', '256', '-display', 'none', '-no-reboot', '-boot', 'n',
          '-netdev', `user,id=n0,tftp=${tftp},bootfile=boot.ipxe,hostname=${seat}`,
          '-device', `e1000,netdev=n0,mac=${SEATS[seat]},romfile=/usr/lib/ipxe/qemu/pxe-e1000.rom`,
          '-serial', `file:${serial}`,
        ], { stdio: 'ignore' });
        const t0 = Date.now();
        let out = '';
        while (Date.now() - t0 < 150_000 && qemu.exitCode === null) {
          out = fs.readFileSync(serial, 'latin1');
          if (out.includes(V1) || out.includes(V2)) break;
          await new Promise((r) => setTimeout(r, 500));
        }
        qemu.kill('SIGKILL');
        await new Promise((r) => (qemu!.exitCode !== null || qemu!.signalCode !== null ? r(null) : qemu!.once('exit', r)));
        const seen = [V1, V2].filter((m) => out.includes(m));
        console.log(`${seat}: ${seen.join(', ') || 'no marker'} after ${Date.now() - t0} ms`);
        return seen.join(',');
      };
      const rollout = async () => (await t.req('GET', `/masters/${MASTER}/rollout`)).body as { summary: { by_version: { version: number; disks: number }[] }; disks: { worker_id: string; version: number; state: string }[] };

      expect((await t.req('POST', `/masters/${MASTER}/rollout`, { version: 2, canary_workers: ['seat-a'] })).status).toBe(200);
      expect(await boot('seat-a')).toBe(V2);
      expect(await boot('seat-b')).toBe(V1);
      expect((await rollout()).disks.map((d) => `${d.worker_id} v${d.version} ${d.state}`)).toEqual(['seat-a v2 on_target', 'seat-b v1 not_reached']);

      expect((await t.req('POST', `/masters/${MASTER}/rollout/promote`)).status).toBe(200);
      expect(await boot('seat-b')).toBe(V2);
      expect((await rollout()).summary.by_version).toEqual([{ version: 2, disks: 2 }]);

      const rb = await t.req('POST', `/masters/${MASTER}/rollout/rollback`, {});
      expect([rb.status, rb.body.version]).toEqual([200, 1]);
      expect(await boot('seat-a')).toBe(V1);
      expect(await boot('seat-b')).toBe(V1);
      expect((await rollout()).summary.by_version).toEqual([{ version: 1, disks: 2 }]);
      const resets = (await t.req('GET', '/operations?op=disk.reset')).body.entries as { worker_id: string; version: number; status: string }[];
      expect(resets.map((e) => `${e.worker_id} v${e.version} ${e.status}`)).toEqual(['seat-a v2 ok', 'seat-b v1 ok', 'seat-b v2 ok', 'seat-a v1 ok', 'seat-b v1 ok']);
    }, 900_000); // five emulated boots; ~60 s here, far longer on a loaded machine
  });
});
