import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeLinuxMaster } from '../../scripts/worker-image';
import { spawnAgent, Tgtd } from '../helpers/agent';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { pinnedIpxe } from '../helpers/ipxe';

/**
 * The kernel stage (issue 22) over iSCSI: qemu (TCG) with OVMF and Kurrent's iPXE as the NIC's
 * option ROM boots a worker whose disk (a clone of the Linux master of worker-image/, on a real
 * tgtd) carries a unified kernel image. The firmware reads only that file; the initramfs then
 * connects to the same disk itself from the iBFT iPXE published, mounts its root from it and
 * switches to it; the OS counts its boots in a file on that disk and says it is up
 * (POST /boots/os-up), which ends the boot session with the `os` stage.
 */
const root = path.resolve(__dirname, '../..');
const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';
const UP = /KURRENT-OS-UP boot=(\d+)/;

type Session = { outcome: string; stage: string; started_at: string; stages: { stage: string; at: string; offset_ms: number; detail?: Record<string, string> }[] };

describe('kernel stage: a Linux worker keeps its iSCSI disk after the firmware hands over', () => {
  const dir = tempDir('kurrent-kernel-stage-');
  const CONTROL = 7700 + (process.pid % 200);
  const tgtd = new Tgtd(CONTROL, 3260);
  let agent: Awaited<ReturnType<typeof spawnAgent>>;
  let t: TestApp;
  let CP_PORT = 0;
  let qemu: ChildProcess | undefined;
  let ipxe: ReturnType<typeof pinnedIpxe>;
  let tftp = '';

  beforeAll(async () => {
    ipxe = pinnedIpxe();
    CP_PORT = await freePort();
    const images = path.join(dir, 'images');
    fs.mkdirSync(images, { recursive: true });
    writeLinuxMaster(path.join(images, '_tpl_linux.img'), `https://10.0.2.2:${CP_PORT}`, { ca: ipxe.cert });
    const AGENT_PORT = await freePort();
    await tgtd.start();
    agent = await spawnAgent({ IPXE_AGENT_PORT: String(AGENT_PORT), IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL), DISK_DIR: images, IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state') });
    t = await startApp({ IPXE_CP_TOKEN: 'kernel-stage', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', IPXE_CP_DISK_WATCH_MS: '200', IPXE_CP_TLS_CERT: ipxe.cert, IPXE_CP_TLS_KEY: ipxe.key }, { dir: path.join(dir, 'cp') });
    await t.app.listen(CP_PORT, '127.0.0.1');
    expect((await t.req('POST', '/agents', { id: 'st1', base_url: `http://127.0.0.1:${AGENT_PORT}`, iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['storage', 'stgt'] })).status).toBe(201);
    await waitForMaster(t, '_tpl_linux.img');
    tftp = path.join(dir, 'tftp');
    fs.mkdirSync(tftp);
    fs.writeFileSync(path.join(tftp, 'boot.ipxe'), fs.readFileSync(path.join(root, 'docker/tftp/boot.ipxe'), 'utf8').replace(/^set controller-https .*$/m, `set controller-https https://10.0.2.2:${CP_PORT}`));
  }, 900_000);

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await agent?.stop();
    await tgtd.stop();
  });

  /** A worker with a disk cloned from the Linux master, set as its default, and its device bound. */
  async function seat(worker: string, mac: string): Promise<string> {
    expect((await t.req('POST', '/devices', { mac })).status).toBe(201);
    expect((await t.req('POST', '/workers', { worker_id: worker, mac })).status).toBe(201);
    const disk = await t.req('POST', `/workers/${worker}/luns/disk`, { type: 'master', os: 'debian', name: '_tpl_linux.img' });
    expect([disk.status, disk.status === 201 ? null : disk.body]).toEqual([201, null]);
    expect((await t.req('PUT', `/workers/${worker}/default-os`, { os: 'debian', menu_timeout: 100 })).status).toBe(200);
    return disk.body.disks[0].iqn;
  }

  /**
   * One power-on of the VM whose NVRAM is `vars`, until its OS says it is up (or 300 s); then the
   * power is cut (no shutdown: what was written must already be on the disk). Returns the serial
   * output and when (ms after power-on) each line first appeared.
   */
  async function boot(vars: string, mac: string, hostname: string): Promise<{ serial: string; t0: number; seen: Map<string, number> }> {
    if (!fs.existsSync(vars)) fs.copyFileSync(OVMF_VARS, vars);
    const serialFile = `${vars}.serial`;
    fs.writeFileSync(serialFile, '');
    const t0 = Date.now();
    qemu = spawn(
      'qemu-system-x86_64',
      [
        ...['-accel', 'tcg', '-cpu', 'max', '-m', '512', '-machine', 'q35', '-no-reboot', '-display', 'none', '-monitor', 'none'],
        ...['-drive', `if=pflash,format=raw,unit=0,readonly=on,file=${OVMF_CODE}`, '-drive', `if=pflash,format=raw,unit=1,file=${vars}`],
        ...['-netdev', `user,id=n0,tftp=${tftp},bootfile=boot.ipxe,hostname=${hostname}`],
        ...['-device', `e1000,netdev=n0,mac=${mac},romfile=${path.join(ipxe.out, '8086100e.efirom')}`, '-serial', `file:${serialFile}`],
      ],
      { stdio: 'ignore' },
    );
    const seen = new Map<string, number>();
    const end = Date.now() + 300_000;
    let serial = '';
    while (Date.now() < end && qemu.exitCode === null && qemu.signalCode === null) {
      serial = fs.readFileSync(serialFile, 'latin1');
      for (const line of serial.split(/\r?\n/)) if (line.startsWith('kurrent-os:') && !seen.has(line)) seen.set(line, Date.now() - t0);
      if (UP.test(serial) || serial.includes('kurrent-os: FAILED')) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    qemu.kill('SIGKILL');
    await new Promise((r) => (qemu!.exitCode !== null || qemu!.signalCode !== null ? r(null) : qemu!.once('exit', r)));
    return { serial: fs.readFileSync(serialFile, 'latin1'), t0, seen };
  }

  const sessions = async (mac: string) => (await t.req('GET', `/boots?mac=${mac}`)).body.items as Session[];

  it('mounts root from its network disk, keeps what it wrote across a power cycle, and its boot session ends at `os`', async () => {
    const MAC = '52:54:00:22:00:01';
    const iqn = await seat('lin-01', MAC);
    const vm = path.join(dir, 'lin-01.vars.fd');

    const first = await boot(vm, MAC, 'lin-01');
    expect(first.serial).toMatch(UP);
    expect(UP.exec(first.serial)![1]).toBe('1');
    // The OS names the disk it runs on: the worker's own target, reached by the initiator name iPXE used.
    expect(first.serial).toContain(`on iSCSI ${iqn} as iqn.`);
    expect(first.serial).toContain(`told https://10.0.2.2:${CP_PORT} (TLS verified)`);
    // Nothing secret, and nothing of the disk, on the kernel command line: the hand-over is the iBFT.
    expect(first.serial).not.toMatch(/Kernel command line:.*iscsi/);

    const [s] = await sessions(MAC);
    expect(s).toMatchObject({ outcome: 'booted', stage: 'os' });
    expect(s.stages.map((x) => x.stage)).toEqual(['report', 'challenge', 'vars', 'menu', 'disk', 'os']);
    expect(s.stages[2].detail).toMatchObject({ answer: 'disk', transport: 'iscsi', disk: iqn });

    // Where the time went, for the reader of the CI log.
    const at = (stage: string) => Date.parse(s.stages.find((x) => x.stage === stage)!.at) - first.t0;
    const line = (re: RegExp) => [...first.seen].find(([l]) => re.test(l));
    const init = line(/initramfs started ([\d.]+) s/)!;
    const mounted = line(/mounted ([\d.]+) s after the kernel/)!;
    const kernelStart = init[1] - Number(/initramfs started ([\d.]+) s/.exec(init[0])![1]) * 1000;
    const rootAt = kernelStart + Number(/mounted ([\d.]+) s/.exec(mounted[0])![1]) * 1000;
    const osUp = at('os');
    console.log(
      [
        `kernel stage, power-on to OS up: ${osUp} ms`,
        `firmware (power-on to iPXE's report): ${at('report')} ms`,
        `iPXE (report to sanboot, the menu): ${at('menu') - at('report')} ms`,
        `boot loader (sanboot to the kernel's start, the UKI read over iSCSI): ${Math.round(kernelStart - at('menu'))} ms`,
        `kernel (to /init): ${Math.round(init[1] - kernelStart)} ms`,
        `initramfs (modules, iBFT, login, root mounted): ${Math.round(rootAt - init[1])} ms`,
        `OS (switch_root to os-up): ${Math.round(osUp - rootAt)} ms`,
      ].join('\n  '),
    );

    // Power cut, power on: the file the OS wrote is still on its disk.
    const second = await boot(vm, MAC, 'lin-01');
    expect(UP.exec(second.serial)?.[1]).toBe('2');
    expect((await sessions(MAC))[0]).toMatchObject({ outcome: 'booted', stage: 'os' });

    // A second worker boots its own clone (its count starts at 1), never the first one's disk.
    const MAC2 = '52:54:00:22:00:02';
    const iqn2 = await seat('lin-02', MAC2);
    const other = await boot(path.join(dir, 'lin-02.vars.fd'), MAC2, 'lin-02');
    expect(UP.exec(other.serial)?.[1]).toBe('1');
    expect(other.serial).toContain(`on iSCSI ${iqn2} as iqn.`);
    expect(iqn2).not.toBe(iqn);
  }, 1_800_000);
});
