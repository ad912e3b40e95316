import { ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeLinuxMaster } from '../../scripts/worker-image';
import { spawnAgent, Tgtd } from '../helpers/agent';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { pinnedIpxe } from '../helpers/ipxe';
import { BootSession, bootWorker, kernelStageTftp, OS_UP as UP, seatWorker } from '../helpers/kernel-stage';

/**
 * The kernel stage (issue 22) over iSCSI: qemu (TCG) with OVMF and Kurrent's iPXE as the NIC's
 * option ROM boots a worker whose disk (a clone of the Linux master of worker-image/, on a real
 * tgtd) carries a unified kernel image. The firmware reads only that file; the initramfs then
 * connects to the same disk itself from the iBFT iPXE published, mounts its root from it and
 * switches to it; the OS counts its boots in a file on that disk and says it is up
 * (POST /boots/os-up), which ends the boot session with the `os` stage.
 */

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
    tftp = kernelStageTftp(dir, `https://10.0.2.2:${CP_PORT}`);
  }, 900_000);

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await agent?.stop();
    await tgtd.stop();
  });

  const seat = (worker: string, mac: string) => seatWorker(t, worker, mac, '_tpl_linux.img');
  const boot = (vars: string, mac: string, hostname: string, whileUp?: () => Promise<void>) =>
    bootWorker({ vars, mac, hostname, tftp, rom: path.join(ipxe.out, '8086100e.efirom'), whileUp, track: (q) => (qemu = q) });

  const sessions = async (mac: string) => (await t.req('GET', `/boots?mac=${mac}`)).body.items as BootSession[];

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

    // Nor could it reach that disk: a real initiator given exactly what lin-02's OS holds in its
    // iBFT (its initiator name and CHAP credential) is refused by lin-01's target, let into its own.
    const varsOf = async (mac: string) => (await t.req('GET', `/boot-vars?mac=${mac}&format=json`)).body;
    const [v1, v2] = [await varsOf(MAC), await varsOf(MAC2)];
    const base = iqn.slice(0, iqn.lastIndexOf(':'));
    const chap1 = { userid: v1.iscsi_username, secret: v1.iscsi_password };
    const chap2 = { userid: v2.iscsi_username, secret: v2.iscsi_password };
    expect([chap1.userid, chap2.userid]).toEqual(['lin-01', 'lin-02']);
    expect((await tgtd.login(iqn2, `${base}:lin-02`, chap2)).ok).toBe(true);
    expect((await tgtd.login(iqn, `${base}:lin-02`, chap2)).ok).toBe(false);
    expect((await tgtd.login(iqn, `${base}:lin-01`, chap2)).ok).toBe(false); // lin-01's name, lin-02's secret
    expect((await tgtd.login(iqn, `${base}:lin-02`, chap1)).ok).toBe(false); // lin-02's name, lin-01's secret
    expect((await tgtd.login(iqn, `${base}:lin-01`, chap1)).ok).toBe(true);

    // lin-01's credential revoked while its OS runs: the running OS keeps its session (not the
    // control plane's to cut), the target is locked for the next login, and the next power-on is
    // refused before any OS code runs (no menu item for the disk, the session failed with the reason).
    const third = await boot(vm, MAC, 'lin-01', async () => {
      expect((await t.req('DELETE', '/workers/lin-01/credential')).status).toBe(200);
    });
    expect(UP.exec(third.serial)?.[1]).toBe('3');
    // The revocation answered after its sync locked the target: the old secret is refused now.
    expect((await tgtd.login(iqn, `${base}:lin-01`, chap1)).ok).toBe(false);
    const refused = await boot(vm, MAC, 'lin-01');
    expect(refused.serial).not.toMatch(UP);
    expect(refused.serial).not.toContain('kurrent-os:');
    // The reason on the console, from /boot-vars (which carries no variable for it).
    expect(refused.serial.replace(/\x1b\[[0-9;=]*[A-Za-z]/g, '')).toContain("Kurrent: the default disk does not boot now: the worker's storage credential is revoked");
    const [last] = await sessions(MAC);
    expect(last).toMatchObject({ outcome: 'failed', reason: expect.stringContaining('credential is revoked') });
  }, 1_800_000);
});
