import { ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { KernelNode } from '../../scripts/kernel-node';
import { writeLinuxMaster } from '../../scripts/worker-image';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { pinnedIpxe } from '../helpers/ipxe';
import { BootSession, bootWorker, kernelStageTftp, OS_UP, seatWorker } from '../helpers/kernel-stage';

/**
 * The kernel stage (issue 22) on LIO: the storage-node guest (Linux 6.12, the real iSCSI target in
 * configfs) serves a Linux worker's disk, closed to the worker's initiator name and requiring its
 * CHAP secret. A UEFI worker (OVMF + Kurrent's iPXE) sanboots it with the CHAP pair /boot-vars
 * gave; its initramfs logs in again from the iBFT iPXE published (the same initiator name and
 * CHAP credential, never on the kernel command line), mounts root from the disk and switches to
 * it; the OS keeps what it wrote across a power cut. LIO's own login counters show both logins
 * (firmware and kernel) accepted with CHAP and none refused. In reset mode the same disk is
 * restored to its master (reflink on the guest's btrfs) before each boot: the OS's boot count
 * starts over every time.
 */
const TOKEN = 'kn-lio-stage';
const MAC = '52:54:00:22:10:01';
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

describe('kernel stage on LIO: a Linux worker keeps its CHAP-protected disk on the kernel target after the hand-over', () => {
  const dir = tempDir('kurrent-kernel-stage-lio-');
  let node: KernelNode;
  let t: TestApp;
  let qemu: ChildProcess | undefined;
  let rom = '';
  let tftp = '';

  beforeAll(async () => {
    const ipxe = pinnedIpxe();
    rom = path.join(ipxe.out, '8086100e.efirom');
    const cpPort = await freePort();
    const master = path.join(dir, '_tpl_linux.img');
    writeLinuxMaster(master, `https://10.0.2.2:${cpPort}`, { ca: ipxe.cert });
    // The worker's iPXE and initramfs dial 10.0.2.2:3260 (qemu's host): the host's 3260 is the guest's LIO portal.
    node = new KernelNode({
      dir: path.join(dir, 'node'),
      env: { IPXE_AGENT_BACKEND: 'lio', IPXE_AGENT_TOKEN: TOKEN, IPXE_AGENT_LOG_LEVEL: 'warn' },
      ports: { iscsi: 3260 },
      seed: { '_tpl_linux.img': master },
    });
    await node.start();
    t = await startApp(
      { IPXE_CP_TOKEN: 'cp', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', IPXE_CP_DISK_WATCH_MS: '200', KN_AGENT_TOKEN: TOKEN, IPXE_CP_TLS_CERT: ipxe.cert, IPXE_CP_TLS_KEY: ipxe.key },
      { dir: path.join(dir, 'cp') },
    );
    await t.app.listen(cpPort, '127.0.0.1');
    expect((await t.req('POST', '/agents', { id: 'lio1', base_url: node.agentUrl, token: '${KN_AGENT_TOKEN}', iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['lio'] })).status).toBe(201);
    await waitForMaster(t, '_tpl_linux.img');
    tftp = kernelStageTftp(dir, `https://10.0.2.2:${cpPort}`);
  }, 600_000);

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await node?.stop();
  });

  const cfs = async (p: string) => (await node.exec(`cat ${sh(`/sys/kernel/config/target/${p}`)} 2>&1`)).trim();

  it('mounts root from its LIO disk with the iBFT CHAP credential, keeps what it wrote across a power cycle, and its session ends at `os`', async () => {
    const iqn = await seatWorker(t, 'lin-lio', MAC, '_tpl_linux.img', 'lio1');
    const base = iqn.slice(0, iqn.lastIndexOf(':'));
    // The target is the kernel's, closed to the worker's initiator name and requiring CHAP of it.
    const tpg = `iscsi/${iqn}/tpgt_1`;
    expect([await cfs(`${tpg}/attrib/authentication`), await cfs(`${tpg}/attrib/generate_node_acls`), await cfs(`${tpg}/acls/${base}:lin-lio/auth/userid`)]).toEqual(['1', '0', 'lin-lio']);
    const stats = async () => ({
      accepts: Number(await cfs(`iscsi/${iqn}/fabric_statistics/iscsi_login_stats/accepts`)),
      authenticate_fails: Number(await cfs(`iscsi/${iqn}/fabric_statistics/iscsi_login_stats/authenticate_fails`)),
    });
    const before = await stats();

    const vars = path.join(dir, 'lin-lio.vars.fd');
    const track = (q: ChildProcess) => (qemu = q);
    const first = await bootWorker({ vars, mac: MAC, hostname: 'lin-lio', tftp, rom, track });
    expect([OS_UP.exec(first.serial)?.[1], first.serial.includes('kurrent-os: FAILED')]).toEqual(['1', false]);
    expect(first.serial).toContain(`on iSCSI ${iqn} as ${base}:lin-lio`);
    expect(first.serial).not.toMatch(/Kernel command line:.*(iscsi|password|chap)/i);
    // Two logins per boot, both with CHAP: the firmware's (iPXE) and the kernel's (the initramfs from the iBFT).
    const after = await stats();
    expect([after.accepts - before.accepts >= 2, after.authenticate_fails - before.authenticate_fails]).toEqual([true, 0]);
    const [s] = (await t.req('GET', `/boots?mac=${MAC}`)).body.items as BootSession[];
    expect(s).toMatchObject({ outcome: 'booted', stage: 'os' });
    expect(s.stages.map((x) => x.stage)).toEqual(['report', 'challenge', 'vars', 'menu', 'disk', 'os']);
    console.log(`kernel stage on LIO (storage-node guest), power-on to OS up: ${Date.parse(s.stages.find((x) => x.stage === 'os')!.at) - first.t0} ms`);

    // Power cut, power on: the file the OS wrote is on the LIO disk.
    const second = await bootWorker({ vars, mac: MAC, hostname: 'lin-lio', tftp, rom, track });
    expect(OS_UP.exec(second.serial)?.[1]).toBe('2');
    expect(await node.exec('dmesg | grep -iE "CHAP|not authorized|Security negotiation" || true')).toBe('');

    // The same disk in reset mode (issue 26): restored to the master (btrfs reflink in the guest)
    // at the start of each boot, after the last boot's session on LIO has gone: the OS finds a
    // disk that never saw a boot, every time.
    const tag = (await t.req('GET', '/workers/lin-lio')).body.disks[0].os_tag;
    expect((await t.req('PUT', `/workers/lin-lio/luns/disk/${tag}/mode`, { mode: 'reset' })).status).toBe(200);
    for (let i = 0; i < 2; i++) {
      const clean = await bootWorker({ vars, mac: MAC, hostname: 'lin-lio', tftp, rom, track });
      expect(OS_UP.exec(clean.serial)?.[1]).toBe('1');
    }
    const resets = (await t.req('GET', '/operations?op=disk.reset')).body.entries;
    expect(resets.map((e: { status: string; iqn: string }) => [e.status, e.iqn])).toEqual([['ok', iqn], ['ok', iqn]]);
  }, 1_200_000);
});
