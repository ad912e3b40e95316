import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import * as path from 'node:path';
import { generate } from '../../scripts/tls-pin';
import { spawnAgent, Tgtd } from '../helpers/agent';
import { MetricsService } from '../../src/control-plane/metrics/metrics.service';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { BOOT_MARKER } from '../helpers/images';
import { pinnedIpxe } from '../helpers/ipxe';

/**
 * The whole secure chain on UEFI: qemu (TCG) with OVMF (a per-VM copy of OVMF_VARS_4M.fd, so
 * NVRAM persists between boots of one VM) and Kurrent's iPXE as the e1000's option ROM, built
 * with the control plane's certificate pinned (TRUST=). TFTP serves only boot.ipxe; everything
 * after it is HTTPS to the pinned controller: boot.ipxe.cfg and menu.ipxe from GET /ipxe/{name},
 * the report with the device key, the challenge, the signed /boot-vars and /boot-menu, then the
 * sanboot of the worker's iSCSI disk from a real tgtd, whose EFI boot file prints the marker.
 */
const root = path.resolve(__dirname, '../..');
const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';
const MAC = '52:54:00:12:34:56';

/**
 * Requests a control plane answered: node:http's (with the time spent on them, from request to
 * the response's end), the boot front's (from its counter), and TLS sessions at all.
 */
function countRequests(app: TestApp['app']): { n: number; ms: number; front: number; sessions: number } {
  const server = app.getHttpServer() as Server;
  const metrics = app.get(MetricsService);
  const front0 = metrics.bootFront.answered;
  const c = { http: 0, ms: 0, sessions: 0 };
  server.prependListener('request', (_req: IncomingMessage, res: ServerResponse) => {
    c.http++;
    const t0 = performance.now();
    res.on('finish', () => (c.ms += performance.now() - t0));
  });
  server.prependListener('secureConnection', () => c.sessions++);
  return {
    get n() {
      return c.http + this.front;
    },
    get ms() {
      return c.ms;
    },
    get front() {
      return metrics.bootFront.answered - front0;
    },
    get sessions() {
      return c.sessions;
    },
  };
}

describe('UEFI secure boot chain: device key in NVRAM, pinned HTTPS, signed boot of an iSCSI disk', () => {
  const dir = tempDir('kurrent-uefi-');
  const CONTROL = 7500 + (process.pid % 400);
  const tgtd = new Tgtd(CONTROL, 3260);
  let agent: Awaited<ReturnType<typeof spawnAgent>>;
  let t: TestApp;
  let wrong: TestApp;
  let CP_PORT = 0;
  let WRONG_PORT = 0;
  let qemu: ChildProcess | undefined;
  let ipxe: ReturnType<typeof pinnedIpxe>;

  beforeAll(async () => {
    ipxe = pinnedIpxe();

    // The master: a whole-disk FAT file system whose removable-media boot file prints the marker.
    const images = path.join(dir, 'images');
    fs.mkdirSync(images, { recursive: true });
    const master = path.join(images, '_tpl_efi.img');
    execFileSync('dd', ['if=/dev/zero', `of=${master}`, 'bs=1M', 'count=8', 'status=none']);
    execFileSync('mkfs.vfat', [master], { stdio: 'ignore' });
    execFileSync('mmd', ['-i', master, '::/EFI', '::/EFI/BOOT']);
    execFileSync('mcopy', ['-i', master, path.join(ipxe.out, 'marker.efi'), '::/EFI/BOOT/BOOTX64.EFI']);

    CP_PORT = await freePort();
    WRONG_PORT = await freePort();
    const AGENT_PORT = await freePort();
    await tgtd.start();
    agent = await spawnAgent({
      IPXE_AGENT_PORT: String(AGENT_PORT),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL),
      DISK_DIR: images,
      IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state'),
    });
    t = await startApp(
      {
        IPXE_CP_TOKEN: 'uefi-test',
        IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000',
        IPXE_CP_TLS_CERT: ipxe.cert,
        IPXE_CP_TLS_KEY: ipxe.key,
      },
      { dir: path.join(dir, 'cp') },
    );
    await t.app.listen(CP_PORT, '127.0.0.1');
    expect((await t.req('POST', '/agents', { id: 'st1', base_url: `http://127.0.0.1:${AGENT_PORT}`, iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['storage', 'stgt'] })).status).toBe(201);
    // A second control plane with another certificate: what an impostor on the network would be.
    const other = generate(path.join(dir, 'other-tls'), '10.0.2.2');
    wrong = await startApp({ IPXE_CP_TOKEN: 'x', IPXE_CP_TLS_CERT: other.cert, IPXE_CP_TLS_KEY: other.key }, { dir: path.join(dir, 'wrong') });
    await wrong.app.listen(WRONG_PORT, '127.0.0.1');
  }, 900_000);

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await wrong?.close();
    await agent?.stop();
    await tgtd.stop();
  });

  /** A TFTP root holding only boot.ipxe, pointed at https://10.0.2.2:<port>. */
  function tftpFor(port: number): string {
    const d = path.join(dir, `tftp-${port}`);
    fs.mkdirSync(d, { recursive: true });
    const boot = fs.readFileSync(path.join(root, 'docker/tftp/boot.ipxe'), 'utf8').replace(/^set controller-https .*$/m, `set controller-https https://10.0.2.2:${port}`);
    fs.writeFileSync(path.join(d, 'boot.ipxe'), boot);
    return d;
  }

  /** One power-on of the VM whose NVRAM is `vars`; resolves with the serial output and the time to the marker or power-off. */
  async function boot(vars: string, tftp: string): Promise<{ serial: string; ms: number }> {
    if (!fs.existsSync(vars)) fs.copyFileSync(OVMF_VARS, vars);
    const serialFile = `${vars}.serial`;
    fs.writeFileSync(serialFile, '');
    const t0 = performance.now();
    qemu = spawn(
      'qemu-system-x86_64',
      [
        ...['-accel', 'tcg', '-m', '512', '-machine', 'q35', '-no-reboot', '-display', 'none', '-monitor', 'none'],
        ...['-drive', `if=pflash,format=raw,unit=0,readonly=on,file=${OVMF_CODE}`, '-drive', `if=pflash,format=raw,unit=1,file=${vars}`],
        ...['-netdev', `user,id=n0,tftp=${tftp},bootfile=boot.ipxe,hostname=seat-01`],
        ...['-device', `e1000,netdev=n0,mac=${MAC},romfile=${path.join(ipxe.out, '8086100e.efirom')}`, '-serial', `file:${serialFile}`],
      ],
      { stdio: 'ignore' },
    );
    const end = Date.now() + 240_000;
    while (Date.now() < end && qemu.exitCode === null && qemu.signalCode === null) {
      if (fs.readFileSync(serialFile, 'latin1').includes(BOOT_MARKER)) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const ms = performance.now() - t0;
    qemu.kill('SIGKILL');
    return { serial: fs.readFileSync(serialFile, 'latin1'), ms };
  }

  it('claims its key, boots its disk only signed, refuses a new key, and stops at a wrong certificate', async () => {
    const served = countRequests(t.app);
    const impostor = countRequests(wrong.app);
    const tftp = tftpFor(CP_PORT);
    const vm1 = path.join(dir, 'vm1.vars.fd');

    // 1. First power-on inside a registration window: the device reports its key (claimed) and,
    //    pooled, gets the reboot loop.
    expect((await t.req('POST', '/devices/registration-window', { ttl_minutes: 10 })).status).toBe(201);
    const first = await boot(vm1, tftp);
    expect(first.serial).not.toContain(BOOT_MARKER);
    const claimed = (await t.req('GET', `/devices/${MAC}`)).body;
    expect(claimed).toMatchObject({ state: 'pooled', source: 'ipxe' });
    expect(claimed.key_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(served.n).toBeGreaterThanOrEqual(5); // boot.ipxe.cfg, report, challenge, boot-vars, boot-menu, menu.ipxe

    // 2. Bound to seat-01 with a disk, window closed, enforcement on: the same machine signs the
    //    challenge with the same key and boots its disk.
    await t.req('DELETE', '/devices/registration-window');
    await t.req('POST', '/workers', { worker_id: 'seat-01' });
    await waitForMaster(t, '_tpl_efi.img');
    const disk = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'ubuntu', os_version: '24.04', name: '_tpl_efi.img' });
    expect([disk.status, disk.status === 201 ? null : disk.body]).toEqual([201, null]);
    await t.req('PUT', '/workers/seat-01/default-os', { os: 'ubuntu', menu_timeout: 100 });
    expect((await t.req('POST', `/devices/${MAC}/bind?worker_id=seat-01`)).status).toBe(200);
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true })).status).toBe(200);
    const before = { n: served.n, ms: served.ms, front: served.front };
    const second = await boot(vm1, tftp);
    expect(second.serial).toContain(BOOT_MARKER);
    expect((await t.req('GET', `/devices/${MAC}`)).body.key_sha256).toBe(claimed.key_sha256);
    const share = served.ms - before.ms;
    // iPXE's whole chain (scripts and boot routes, one keep-alive connection) is the boot front's.
    expect(served.front - before.front).toBeGreaterThanOrEqual(5);
    console.log(
      `UEFI power-on to marker: ${Math.round(second.ms)} ms; the control plane answered ${served.n - before.n} requests, ${served.front - before.front} of them by the boot front; node:http spent ${Math.round(share)} ms on the rest`,
    );

    // Its boot session: the signed chain stage by stage (report, challenge, vars with its disk, menu).
    const [signed] = (await t.req('GET', `/boots?mac=${MAC}`)).body.items;
    expect(signed.stages.map((x: { stage: string }) => x.stage).slice(0, 4)).toEqual(['report', 'challenge', 'vars', 'menu']);
    expect(signed.stages[2].detail).toMatchObject({ answer: 'disk', transport: 'iscsi' });

    // 3. A fresh variable store (a new key for the same MAC): refused and audited, no disk.
    const third = await boot(path.join(dir, 'vm2.vars.fd'), tftp);
    expect(third.serial).not.toContain(BOOT_MARKER);
    expect((await t.req('GET', `/devices/${MAC}`)).body.key_sha256).toBe(claimed.key_sha256);
    const ops = (await t.req('GET', `/operations?mac=${MAC}`)).body as { entries: { op: string; mac?: string; reason?: string }[] };
    expect(ops.entries.some((o) => o.op === 'boot.denied' && o.mac === MAC && o.reason === 'bad signature')).toBe(true);
    // The refused boot is recorded as failed at vars, with the reason; it never counts towards a boot loop.
    expect((await t.req('GET', `/boots?mac=${MAC}&limit=1`)).body.items[0]).toMatchObject({ outcome: 'failed', stage: 'vars', reason: 'bad signature' });

    // 4. A controller with another certificate: the chain stops before any HTTP request.
    const fourth = await boot(path.join(dir, 'vm1.vars.fd'), tftpFor(WRONG_PORT));
    expect(fourth.serial).not.toContain(BOOT_MARKER);
    expect(fourth.serial).toContain(`the secure chain to https://10.0.2.2:${WRONG_PORT} failed`);
    expect(impostor.n).toBe(0);
    expect(impostor.sessions).toBe(0); // not even a TLS session: the pinned certificate refused it
  }, 900_000);
});
