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
    t = await startApp({ IPXE_CP_TOKEN: 'boot-test', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', IPXE_CP_DISK_WATCH_MS: '200', IPXE_CP_AUTO_BOOT_TIMEOUT: '100' }, { dir: path.join(dir, 'cp') });
    await t.app.listen(CP_PORT, '127.0.0.1');
  });

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await agent?.stop();
    await tgtd.stop();
  });

  it('boots the disk bound to its MAC and only that one, recorded stage by stage; a boot loop is caught and held', async () => {
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
    /** One power-on: runs until `done` says so (or qemu exits: -no-reboot turns a reboot into an exit), then powers off. */
    const boot = async (done: (serial: string) => Promise<boolean> | boolean = (out) => out.includes(BOOT_MARKER), hostname = 'seat-01'): Promise<string> => {
      fs.writeFileSync(serial, '');
      qemu = spawn('qemu-system-x86_64', [
        '-accel', 'tcg', '-m', '256', '-display', 'none', '-no-reboot', '-boot', 'n',
        '-netdev', `user,id=n0,tftp=${tftp},bootfile=boot.ipxe,hostname=${hostname}`,
        '-device', `e1000,netdev=n0,mac=${MAC},romfile=/usr/lib/ipxe/qemu/pxe-e1000.rom`,
        '-serial', `file:${serial}`,
      ], { stdio: 'ignore' });
      const end = Date.now() + 150_000;
      while (Date.now() < end && qemu.exitCode === null) {
        if (await done(fs.readFileSync(serial, 'latin1'))) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      const out = fs.readFileSync(serial, 'latin1');
      qemu.kill('SIGKILL');
      return out;
    };
    const sessions = async () => (await t.req('GET', `/boots?mac=${MAC}`)).body.items as { outcome: string; stage: string; reason: string | null; stages: { stage: string; offset_ms: number; detail?: Record<string, string> }[] }[];

    // 1. Unknown device: it reports (enters the pool) and gets the reboot loop, not the disk.
    const first = await boot();
    expect(first).not.toContain(BOOT_MARKER);
    expect((await t.req('GET', `/devices/${MAC}`)).body).toMatchObject({ state: 'pooled', source: 'ipxe' });
    const [pooled] = await sessions();
    expect(pooled).toMatchObject({ outcome: 'waiting' });
    expect(pooled.stages.map((x) => x.stage)).toEqual(['report', 'vars', 'menu']);

    // 2. Bound to seat-01: the same machine now boots seat-01's disk over iSCSI, and its boot
    // session shows every stage, the disk login included (seen by the agent on tgtd while the
    // disk's program runs).
    expect((await t.req('POST', `/devices/${MAC}/bind?worker_id=seat-01`)).status).toBe(200);
    const second = await boot(async (out) => out.includes(BOOT_MARKER) && (await sessions())[0]?.outcome === 'booted');
    expect(second).toContain(BOOT_MARKER);
    const [booted] = await sessions();
    expect(booted).toMatchObject({ outcome: 'booted', stage: 'disk' });
    expect(booted.stages.map((x) => x.stage)).toEqual(['report', 'vars', 'menu', 'disk']);
    expect(booted.stages[1].detail).toMatchObject({ answer: 'disk', transport: 'iscsi', agent: 'st1', disk: 'iqn.2026-07.com.controller:seat-01.ubuntu' });
    expect(booted.stages[3].detail).toMatchObject({ target: 'iqn.2026-07.com.controller:seat-01.ubuntu', agent: 'st1' });
    // Stage times, for the reader of the CI log (firmware report -> vars -> menu -> disk login).
    console.log(`boot session of ${MAC}: ${booted.stages.map((x) => `${x.stage} +${x.offset_ms} ms`).join(', ')}`);

    // 3. Bound to a worker with no disk: /boot-vars answers the reboot loop, the machine reboots
    // (here: qemu exits), and after three such boots the device is looping; the fourth power-on
    // gets the hold script and stays there (no fifth request), until an operator releases it.
    await t.req('POST', '/workers', { worker_id: 'seat-02' });
    expect((await t.req('POST', `/devices/${MAC}/bind?worker_id=seat-02&force=true`)).status).toBe(200);
    for (let i = 0; i < 3; i++) await boot(() => false, 'seat-02');
    const loops = await sessions();
    expect(loops.slice(0, 3).map((x) => [x.outcome, x.reason])).toEqual(Array(3).fill(['failed', 'the worker has no disk (answered menu-default reboot)']));
    expect((await t.req('GET', '/workers/seat-02')).body.boot_readiness.reasons.map((r: { code: string }) => r.code)).toContain('boot-loop-hold');
    await boot(async () => (await sessions())[0]?.outcome === 'held', 'seat-02');
    const [held] = await sessions();
    expect(held).toMatchObject({ outcome: 'held', looping: true });
    expect((await t.req('GET', '/operations?op=device.boot_loop')).body.entries).toEqual([expect.objectContaining({ mac: MAC, worker_id: 'seat-02' })]);
    expect((await t.req('POST', `/boots/${MAC}/release`)).body).toMatchObject({ released: true, held: false });
  }, 600_000); // six emulated boots; ~60 s here, far longer on a loaded machine
 // two emulated boots; ~20 s here, far longer on a loaded machine
});
