import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnAgent, Tgtd } from '../helpers/agent';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { BOOT_MARKER, writeBootableMaster } from '../helpers/images';

/**
 * A real boot: qemu (TCG) with Debian's iPXE ROM, user-mode network (the guest sees host
 * loopback as 10.0.2.2, TFTP serves docker/tftp), iPXE runs the shipped boot.ipxe ->
 * boot.ipxe.cfg -> /devices/report -> /boot-vars -> menu.ipxe -> sanboot from tgtd, and the
 * worker disk (a clone of the master) prints its marker on the serial port.
 */
describe('PXE + iSCSI boot of a worker disk in qemu', () => {
  const dir = tempDir('kurrent-boot-');
  let CP_PORT = 0;
  let AGENT_PORT = 0;
  const CONTROL = 7000 + (process.pid % 500);
  const tgtd = new Tgtd(CONTROL, 3260);
  let agent: Awaited<ReturnType<typeof spawnAgent>>;
  let t: TestApp;
  let qemu: ChildProcess | undefined;

  beforeAll(async () => {
    CP_PORT = await freePort();
    AGENT_PORT = await freePort();
    await tgtd.start();
    fs.mkdirSync(path.join(dir, 'images'), { recursive: true });
    writeBootableMaster(path.join(dir, 'images', '_tpl_boot.img'));
    agent = await spawnAgent({
      IPXE_AGENT_PORT: String(AGENT_PORT),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL),
      DISK_DIR: path.join(dir, 'images'),
      IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state'),
    });
    t = await startApp({ IPXE_CP_TOKEN: 'boot-test', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000' }, { dir: path.join(dir, 'cp') });
    await t.app.listen(CP_PORT, '127.0.0.1');
  });

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await agent?.stop();
    await tgtd.stop();
  });

  it('boots the disk bound to its MAC and only that one', async () => {
    const MAC = '52:54:00:12:34:56';
    expect((await t.req('POST', '/agents', { id: 'st1', base_url: `http://127.0.0.1:${AGENT_PORT}`, iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['storage', 'stgt'] })).status).toBe(201);
    await t.req('POST', '/workers', { worker_id: 'seat-01' });
    await waitForMaster(t, '_tpl_boot.img');
    // With an os_version the menu item is `ubuntu-<os_tag>`, which only the items from /boot-menu
    // offer (the fixed fallback items of menu.ipxe do not): booting proves the dynamic menu works.
    const disk = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'ubuntu', os_version: '24.04', name: '_tpl_boot.img' });
    // The body says why (agent unreachable, placement) when this fails on a loaded machine.
    expect([disk.status, disk.status === 201 ? null : disk.body]).toEqual([201, null]);
    await t.req('PUT', '/workers/seat-01/default-os', { os: 'ubuntu', menu_timeout: 100 });
    const tag = disk.body.disks[0].os_tag;
    expect((await t.req('GET', '/boot-vars?hostname=seat-01&format=json')).body.menu_default).toBe(`ubuntu-${tag}`);
    expect((await t.req('GET', '/boot-menu?hostname=seat-01&format=json')).body.items).toEqual([
      expect.objectContaining({ id: `ubuntu-${tag}`, label: `ubuntu 24.04 (iscsi ${tag})`, root: `iscsi:10.0.2.2:::1:iqn.2026-07.com.controller:seat-01.ubuntu` }),
    ]);

    // TFTP root: the shipped iPXE scripts, pointed at this control plane.
    const tftp = path.join(dir, 'tftp');
    fs.mkdirSync(tftp);
    for (const f of ['boot.ipxe', 'boot.ipxe.cfg', 'menu.ipxe']) fs.copyFileSync(path.join(__dirname, '../../docker/tftp', f), path.join(tftp, f));
    const cfg = path.join(tftp, 'boot.ipxe.cfg');
    fs.writeFileSync(cfg, fs.readFileSync(cfg, 'utf8').replace(/set controller http:\/\/\S+/, `set controller http://10.0.2.2:${CP_PORT}`));

    const serial = path.join(dir, 'serial.log');
    const boot = async (): Promise<string> => {
      fs.writeFileSync(serial, '');
      qemu = spawn('qemu-system-x86_64', [
        '-accel', 'tcg', '-m', '256', '-display', 'none', '-no-reboot', '-boot', 'n',
        '-netdev', `user,id=n0,tftp=${tftp},bootfile=boot.ipxe,hostname=seat-01`,
        '-device', `e1000,netdev=n0,mac=${MAC},romfile=/usr/lib/ipxe/qemu/pxe-e1000.rom`,
        '-serial', `file:${serial}`,
      ], { stdio: 'ignore' });
      const end = Date.now() + 150_000;
      while (Date.now() < end && qemu.exitCode === null) {
        if (fs.readFileSync(serial, 'latin1').includes(BOOT_MARKER)) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      const out = fs.readFileSync(serial, 'latin1');
      qemu.kill('SIGKILL');
      return out;
    };

    // 1. Unknown device: it reports (enters the pool) and gets the reboot loop, not the disk.
    const first = await boot();
    expect(first).not.toContain(BOOT_MARKER);
    expect((await t.req('GET', `/devices/${MAC}`)).body).toMatchObject({ state: 'pooled', source: 'ipxe' });

    // 2. Bound to seat-01: the same machine now boots seat-01's disk over iSCSI.
    expect((await t.req('POST', `/devices/${MAC}/bind?worker_id=seat-01`)).status).toBe(200);
    const second = await boot();
    expect(second).toContain(BOOT_MARKER);
  }, 400_000); // two emulated boots; ~20 s here, far longer on a loaded machine
});
