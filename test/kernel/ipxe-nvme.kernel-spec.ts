import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { crc32 } from 'node:zlib';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { generateDhchapKey } from '../../src/shared/nvme-keys';
import { GUEST_DISK_DIR, KernelNode } from '../../scripts/kernel-node';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { BOOT_MARKER } from '../helpers/images';
import { pinnedIpxe } from '../helpers/ipxe';
import { tcpBytesSentFrom } from '../helpers/pcap';
import { kernelStageTftp } from '../helpers/kernel-stage';

/**
 * sanboot nvme:// in Kurrent's iPXE (issue 21, ipxe/src/net/): qemu (TCG) with OVMF and our ROM
 * boots a worker's disk from the real nvmet of the storage-node guest through the whole seed-004
 * chain: TFTP boot.ipxe -> pinned HTTPS to the control plane -> boot.ipxe.cfg (device report,
 * /boot-vars with hostnqn, tls-psk and the DH-HMAC-CHAP secrets, /boot-menu) -> menu.ipxe ->
 * `sanboot nvme://<storager>:<port>/<disk nqn>`: TLS 1.3 with the PSK (tlshd on the target), then
 * bidirectional DH-HMAC-CHAP on both queues, Identify, Read through UEFI Block I/O. The disk is a
 * reflink clone (on the guest's btrfs) of an EFI master whose boot file prints the marker; the
 * agent set up the subsystem, the allowed host, its keys and the PSK in the .nvme keyring. The
 * refusals change the target behind the control plane's back, as a drifted, stale or hostile
 * storage node would be.
 */

const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';

/**
 * What reads the BIOS worker's disk through INT 13h: a PXE boot program (raw 16-bit code that iPXE
 * runs at 0000:7c00, as a BIOS runs an MBR) that reads LBA 1 of drive 0x80 with INT 13h AH=42h
 * (extended read: block-size agnostic) to 0000:7e00 and copies it, a NUL-ended line, to COM1; on a
 * failed read it prints a failure line instead.
 */
function int13Reader(): Buffer {
  const code = Buffer.from([
    0xfa, 0xfc, 0x31, 0xc0, 0x8e, 0xd8, 0x8e, 0xc0, 0x8e, 0xd0, 0xbc, 0x00, 0x7c, 0xfb, // cli cld; ds=es=ss=0; sp=0x7c00; sti
    0xb2, 0x80, // dl = drive 0x80 (the SAN disk iPXE hooked)
    0xbe, 0x2f, 0x7c, // si = DAP (0x7c2f)
    0xb4, 0x42, 0xcd, 0x13, // int 13h, ah=42h
    0x72, 0x11, // jc fail
    0xbe, 0x00, 0x7e, // si = 0x7e00 (what was read)
    0xba, 0xf8, 0x03, // print: dx = COM1
    0xac, 0x84, 0xc0, 0x74, 0x03, 0xee, 0xeb, 0xf8, // lodsb; test al,al; jz halt; out dx,al; jmp lodsb
    0xf4, 0xeb, 0xfd, // halt: hlt; jmp halt
    0xbe, 0x3f, 0x7c, 0xeb, 0xed, // fail: si = message (0x7c3f); jmp print
    0x10, 0x00, 0x01, 0x00, 0x00, 0x7e, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, // DAP: 1 block, to 0000:7e00, LBA 1
  ]);
  return Buffer.concat([code, Buffer.from('KURRENT-BIOS: int13 read failed\r\n\0', 'latin1')]);
}

/** The BIOS worker's master (1 MiB): LBA 1 (nvmet exports the clone with 4096-byte blocks) holds a marker line. */
function biosDisk(): Buffer {
  const disk = Buffer.alloc(1 << 20);
  disk.write(`${BOOT_MARKER} bios int13\r\n\0`, 4096, 'latin1');
  return disk;
}
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';
const MAC = '52:54:00:21:00:01';
const TOKEN = 'kn-ipxe-nvme';
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
/** What the write-path test's GRUB writes (a value of this run: no earlier run's disk can pass). */
const STAMP = `kurrent-${process.pid}-${Date.now()}`;

describe('our iPXE boots a worker over NVMe/TCP: TLS 1.3 PSK + bidirectional DH-HMAC-CHAP against the real nvmet', () => {
  const dir = tempDir('kurrent-ipxe-nvme-');
  const grubMaster = path.join(dir, '_tpl_grub.img');
  const biosMaster = path.join(dir, '_tpl_bios.img');
  let target: KernelNode;
  let t: TestApp;
  let ipxe: ReturnType<typeof pinnedIpxe>;
  let qemu: ChildProcess | undefined;
  let tftp = '';
  let bv: Record<string, string | number> = {};
  let firstTag = '';
  const figures: Record<string, number | string> = {};

  beforeAll(async () => {
    ipxe = pinnedIpxe();
    // The master: a whole-disk FAT file system whose removable-media boot file prints the marker.
    const master = path.join(dir, '_tpl_efi.img');
    execFileSync('dd', ['if=/dev/zero', `of=${master}`, 'bs=1M', 'count=8', 'status=none']);
    execFileSync('mkfs.vfat', [master], { stdio: 'ignore' });
    execFileSync('mmd', ['-i', master, '::/EFI', '::/EFI/BOOT']);
    execFileSync('mcopy', ['-i', master, path.join(ipxe.out, 'marker.efi'), '::/EFI/BOOT/BOOTX64.EFI']);
    // The write path's master: GRUB as the boot file, which copies `next` of /grubenv to `stamp`
    // and saves it (worker-image/grubenv-writer.sh), with the 1 KiB environment block GRUB expects.
    execFileSync('bash', [path.join(__dirname, '../../worker-image/grubenv-writer.sh')], { stdio: ['ignore', 'inherit', 'inherit'] });
    // 64 KiB clusters: /grubenv64 is one contiguous run, so GRUB writes it as one 64 KiB request
    // (past nvmet's 16 KiB in-capsule size: R2T and H2CData), /grubenv as one 1 KiB request.
    const env = `# GRUB Environment Block\nnext=${STAMP}\n`;
    fs.writeFileSync(path.join(dir, 'grubenv'), env.padEnd(1024, '#'));
    fs.writeFileSync(path.join(dir, 'grubenv64'), '# GRUB Environment Block\n'.padEnd(65536, '#'));
    execFileSync('dd', ['if=/dev/zero', `of=${grubMaster}`, 'bs=1M', 'count=16', 'status=none']);
    execFileSync('mkfs.vfat', ['-s', '128', grubMaster], { stdio: 'ignore' });
    execFileSync('mmd', ['-i', grubMaster, '::/EFI', '::/EFI/BOOT']);
    execFileSync('mcopy', ['-i', grubMaster, path.join(__dirname, '../../build/worker-image/grubenv-writer.efi'), '::/EFI/BOOT/BOOTX64.EFI']);
    execFileSync('mcopy', ['-i', grubMaster, path.join(dir, 'grubenv'), '::/grubenv']);
    execFileSync('mcopy', ['-i', grubMaster, path.join(dir, 'grubenv64'), '::/grubenv64']);
    fs.writeFileSync(biosMaster, biosDisk());
    const nvmePort = await freePort();
    target = new KernelNode({
      dir: path.join(dir, 'target'),
      env: { IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_TOKEN: TOKEN, IPXE_AGENT_NVME_PORT: String(nvmePort), IPXE_AGENT_LOG_LEVEL: 'warn' },
      ports: { nvme: nvmePort },
      seed: { '_tpl_efi.img': master, '_tpl_grub.img': grubMaster, '_tpl_bios.img': biosMaster },
    });
    await target.start();
    const CP_PORT = await freePort();
    t = await startApp(
      { IPXE_CP_TOKEN: 'cp', IPXE_CP_RECONCILE_SECONDS: '0', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', KN_AGENT_TOKEN: TOKEN, IPXE_CP_TLS_CERT: ipxe.cert, IPXE_CP_TLS_KEY: ipxe.key },
      { dir: path.join(dir, 'cp') },
    );
    await t.app.listen(CP_PORT, '127.0.0.1');
    tftp = kernelStageTftp(dir, `https://10.0.2.2:${CP_PORT}`);
    expect((await t.req('POST', '/agents', { id: 'kn1', base_url: target.agentUrl, token: '${KN_AGENT_TOKEN}', iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['nvmet'] })).status).toBe(201);
    await t.req('POST', '/devices', { mac: MAC });
    expect((await t.req('POST', '/workers', { worker_id: 'seat-01', mac: MAC })).status).toBe(201);
    await waitForMaster(t, '_tpl_efi.img');
    expect((await t.req('PUT', '/workers/seat-01/credential', { dhchap_key: generateDhchapKey() })).status).toBe(200);
    const d = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'debian', os_version: '12', name: '_tpl_efi.img' });
    expect([d.status, d.status === 201 ? null : d.body]).toEqual([201, null]);
    firstTag = d.body.disks[0].os_tag;
    expect((await t.req('PUT', '/workers/seat-01/default-disk', { os_tag: firstTag })).status).toBe(200);
    expect((await t.req('PUT', '/workers/seat-01/default-os', { menu_timeout: 100 })).status).toBe(200);
    bv = (await t.req('GET', `/boot-vars?mac=${MAC}&format=json`)).body;
    expect(bv).toMatchObject({ disk_nqn: expect.any(String), tls_psk: expect.stringMatching(/^NVMeTLSkey-1:01:/), dhchap_ctrl_secret: expect.stringMatching(/^DHHC-1:/) });
  }, 600_000);

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    // eslint-disable-next-line no-console
    console.log(`iPXE NVMe/TCP boot (TCG): ${JSON.stringify(figures)}`);
    await t?.close();
    await target?.stop();
  });

  /** One power-on through the chain; resolves with the console (colour escapes out) and the time to the marker or power-off. */
  async function boot(name: string, root = tftp, firmware: 'uefi' | 'bios' = 'uefi'): Promise<{ serial: string; ms: number; registeredMs?: number; nvmeBytes?: number; nvmeConnections?: number }> {
    // One machine: its NVRAM (and the device key kurrent-keygen keeps there) survives power-offs.
    const vars = path.join(dir, 'machine.vars.fd');
    if (!fs.existsSync(vars)) fs.copyFileSync(OVMF_VARS, vars);
    const serialFile = path.join(dir, `${name}.serial`);
    fs.writeFileSync(serialFile, '');
    const pcapFile = path.join(dir, `${name}.pcap`);
    const t0 = performance.now();
    const q = spawn(
      'qemu-system-x86_64',
      [
        ...['-accel', 'tcg', '-cpu', 'max', '-m', '512', '-machine', 'q35', '-no-reboot', '-display', 'none', '-monitor', 'none'],
        ...(firmware === 'uefi'
          ? ['-drive', `if=pflash,format=raw,unit=0,readonly=on,file=${OVMF_CODE}`, '-drive', `if=pflash,format=raw,unit=1,file=${vars}`]
          : ['-boot', 'n']), // SeaBIOS; the NIC's stock PXE ROM loads boot.ipxe, which chains our ipxe.pxe
        ...['-netdev', `user,id=n0,tftp=${root},bootfile=boot.ipxe,hostname=seat-01`],
        ...['-object', `filter-dump,id=dump0,netdev=n0,file=${pcapFile}`],
        ...['-device', `e1000,netdev=n0,mac=${MAC},romfile=${firmware === 'uefi' ? path.join(ipxe.out, '8086100e.efirom') : '/usr/lib/ipxe/qemu/pxe-e1000.rom'}`],
        ...['-serial', `file:${serialFile}`],
      ],
      { stdio: 'ignore' },
    );
    qemu = q;
    const end = Date.now() + 240_000;
    let text = '';
    let registeredMs: number | undefined;
    // The marker, or menu.ipxe's "failed; back to the menu" after a refused sanboot.
    while (Date.now() < end && q.exitCode === null && q.signalCode === null) {
      text = fs.readFileSync(serialFile, 'latin1');
      if (registeredMs === undefined && text.includes('Registered SAN device')) registeredMs = performance.now() - t0;
      if (text.includes(BOOT_MARKER) || /failed; back to the menu/.test(text)) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const ms = performance.now() - t0;
    q.kill('SIGKILL');
    await new Promise((r) => (q.exitCode !== null || q.signalCode !== null ? r(null) : q.once('exit', r)));
    // What the worker received over NVMe/TCP (TLS records included): the target's stream bytes in
    // the capture of the worker's NIC, every connection counted whole.
    const nvme = tcpBytesSentFrom(pcapFile, Number(bv.nvme_port));
    return { serial: fs.readFileSync(serialFile, 'latin1').replace(/\x1b\[[0-9;=]*[A-Za-z]/g, ''), ms, registeredMs, nvmeBytes: nvme.bytes, nvmeConnections: nvme.connections };
  }

  const host = () => `/sys/kernel/config/nvmet/hosts/${bv.hostnqn}`;
  /** The reason the firmware printed for a refused sanboot, for the reader of the CI log. */
  const reason = (serial: string) => /Could not open SAN device: ([^(\r\n]*)/.exec(serial)?.[1]?.trim() ?? '(none)';
  const diskUri = () => `nvme://${bv.storager_ip}:${bv.nvme_port}/${bv.disk_nqn}`;

  it('a bound, signed worker boots the default disk through the seed-004 chain: TLS 1.3 by tlshd, DH-HMAC-CHAP both ways, the EFI boot file read from the clone', async () => {
    // Its first power-on inside a registration window claims the device key (kept in its NVRAM).
    expect((await t.req('POST', '/devices/registration-window', { ttl_minutes: 10 })).status).toBe(201);
    expect((await boot('claim')).serial).toContain(BOOT_MARKER);
    expect((await t.req('GET', `/devices/${MAC}`)).body.key_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect((await t.req('DELETE', '/devices/registration-window')).status).toBe(200);
    // From now on (every test below) the secrets go only to a request signed with that key.
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true })).status).toBe(200);
    await target.exec('dmesg -C');
    const r = await boot('good');
    expect(r.serial).toContain(BOOT_MARKER);
    figures.power_on_to_marker_ms = Math.round(r.ms);
    figures.disk_registered_to_marker_ms = Math.round(r.ms - r.registeredMs!);
    figures.bytes_received_over_nvme_tcp = r.nvmeBytes!;
    figures.nvme_tcp_connections = r.nvmeConnections!;
    figures.read_throughput_kib_s = Math.round(r.nvmeBytes! / 1024 / ((r.ms - r.registeredMs!) / 1000));
    // The boot file alone is ~300 KiB: the target sent at least that, over the TLS connections.
    expect(r.nvmeBytes).toBeGreaterThan(fs.statSync(path.join(ipxe.out, 'marker.efi')).size);
    expect(r.serial).toContain('Booting from SAN device 0x80');
    expect(r.serial).toMatch(/Features: [^\n]*NVMe\/TCP/);
    // The kernel saw an authenticated controller for this host on the worker's subsystem.
    const dmesg = await target.exec('dmesg');
    expect(dmesg).toContain(`for subsystem ${bv.disk_nqn} for NQN ${bv.hostnqn} with DH-HMAC-CHAP`);
    expect(dmesg).not.toMatch(/host response mismatch|failure1/);
    // tlshd did the server side of a TLS 1.3 PSK handshake for it.
    expect(target.services()).toMatch(/Session description: \(TLS1\.3\)[\s\S]*Handshake request succeeded/);
    // The session the control plane recorded: the firmware asked for this disk over NVMe/TCP.
    // The session the control plane recorded: signed (challenge before vars), the firmware asked for this disk over NVMe/TCP.
    const s = (await t.req('GET', `/boots?mac=${MAC}`)).body.items[0];
    expect(s.stages.map((x: { stage: string }) => x.stage).slice(0, 4)).toEqual(['report', 'challenge', 'vars', 'menu']);
    expect(s.stages.find((x: { stage: string }) => x.stage === 'vars').detail).toMatchObject({ answer: 'disk', transport: 'nvme-tcp' });
    // Unsigned, the same MAC gets nothing.
    expect((await t.req('GET', `/boot-vars?mac=${MAC}&format=json`)).body).toEqual({});
  }, 400_000);

  it('a target whose controller key is not the one the control plane gave (drifted or impostor) is refused before any code from it runs', async () => {
    const real = String(bv.dhchap_ctrl_secret);
    await target.exec(`echo ${sh(generateDhchapKey())} > ${sh(`${host()}/dhchap_ctrl_key`)}`);
    try {
      const r = await boot('wrong-ctrl');
      figures.refused_wrong_ctrl_key = reason(r.serial);
      expect(r.serial).not.toContain(BOOT_MARKER);
      expect(r.serial).toMatch(/Could not open SAN device: NVMe target failed DH-HMAC-CHAP \(wrong controller key\)/);
      expect(r.serial).toContain(`Boot of`);
    } finally {
      await target.exec(`echo ${sh(real)} > ${sh(`${host()}/dhchap_ctrl_key`)}`);
    }
  }, 300_000);

  it('a target holding a stale host key (its configfs behind the agent\'s state) refuses the worker: host response mismatch; with the key back it boots', async () => {
    const real = String(bv.dhchap_secret);
    await target.exec(`echo ${sh(generateDhchapKey())} > ${sh(`${host()}/dhchap_key`)}; dmesg -C`);
    try {
      const r = await boot('stale-host-key');
      figures.refused_stale_host_key = reason(r.serial);
      expect(r.serial).not.toContain(BOOT_MARKER);
      expect(r.serial).toMatch(/Could not open SAN device: NVMe target refused DH-HMAC-CHAP \(host key\)/);
      expect(await target.exec('dmesg')).toMatch(/host response mismatch/);
    } finally {
      await target.exec(`echo ${sh(real)} > ${sh(`${host()}/dhchap_key`)}`);
    }
    expect((await boot('key-back')).serial).toContain(BOOT_MARKER);
  }, 600_000);

  it('a port without TLS is refused: the firmware never speaks NVMe/TCP in plaintext', async () => {
    const port = '/sys/kernel/config/nvmet/ports/1';
    const link = `${port}/subsystems/${bv.disk_nqn}`;
    const plain = `rm ${sh(link)} && echo none > ${port}/addr_tsas && echo 'not specified' > ${port}/addr_treq && ln -s ${sh(`/sys/kernel/config/nvmet/subsystems/${bv.disk_nqn}`)} ${sh(`${port}/subsystems/`)}`;
    const tls = `rm ${sh(link)} && echo tls1.3 > ${port}/addr_tsas && echo required > ${port}/addr_treq && ln -s ${sh(`/sys/kernel/config/nvmet/subsystems/${bv.disk_nqn}`)} ${sh(`${port}/subsystems/`)}`;
    await target.exec(`${plain}; cat ${port}/addr_tsas`);
    try {
      expect((await target.exec(`cat ${port}/addr_tsas`)).trim()).toBe('none');
      const r = await boot('no-tls');
      figures.refused_no_tls = reason(r.serial);
      expect(r.serial).not.toContain(BOOT_MARKER);
      // nvmet with tsas none answers the ClientHello by closing (it reads it as a bad ICReq).
      expect(r.serial).toMatch(/Could not open SAN device: NVMe\/TCP TLS: no TLS on port, or PSK identity unknown/);
      expect(r.serial).toContain(diskUri());
    } finally {
      await target.exec(tls);
    }
    expect((await target.exec(`cat ${port}/addr_tsas`)).trim()).toBe('tls1.3');
  }, 300_000);

  it('the boot menu offers a second NVMe disk of the same worker; made the default, it boots from its own subsystem', async () => {
    const d = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'ubuntu', os_version: '24.04', name: '_tpl_efi.img' });
    expect([d.status, d.status === 201 ? null : d.body]).toEqual([201, null]);
    const second = d.body.disks.find((x: { os: string }) => x.os === 'ubuntu');
    expect(second.nqn).not.toBe(bv.disk_nqn);
    expect((await t.req('PUT', '/workers/seat-01/default-disk', { os_tag: second.os_tag })).status).toBe(200);
    try {
      await target.exec('dmesg -C');
      const r = await boot('second-disk');
      expect(r.serial).toContain(BOOT_MARKER);
      // The signed /boot-menu offered both disks (the menu is on the console before its timeout).
      expect(r.serial).toContain(`debian 12 (nvme ${firstTag})`);
      expect(r.serial).toContain(`ubuntu 24.04 (nvme ${second.os_tag})`);
      expect(await target.exec('dmesg')).toContain(`for subsystem ${second.nqn} for NQN ${bv.hostnqn} with DH-HMAC-CHAP`);
    } finally {
      expect((await t.req('PUT', '/workers/seat-01/default-disk', { os_tag: firstTag })).status).toBe(200);
    }
  }, 300_000);

  /** A TFTP root whose boot.ipxe sets what /boot-vars sets (values overridable), then runs `lines`: the firmware without the menu. */
  function scriptWith(name: string, vars: Record<string, string | number>, lines: string[]): string {
    const d = path.join(dir, `tftp-${name}`);
    fs.mkdirSync(d, { recursive: true });
    const set = ['hostnqn', 'tls-psk', 'dhchap-secret', 'dhchap-ctrl-secret'].map((k) => `set ${k} ${vars[k.replace(/-/g, '_')]}`);
    fs.writeFileSync(path.join(d, 'boot.ipxe'), ['#!ipxe', ...set, ...lines, 'poweroff', ''].join('\n'));
    return d;
  }

  it('a worker holding another PSK (stale or forged) fails the TLS handshake; nothing of NVMe is spoken', async () => {
    // Same form and checksum rules, another key: what a worker with a rotated-away PSK holds.
    const raw = Buffer.from(String(bv.tls_psk).split(':')[2], 'base64');
    const key = Buffer.from(raw.subarray(0, 32).map((b) => b ^ 0x5a));
    const crc = Buffer.alloc(4);
    crc.writeUInt32LE(crc32(key));
    const other = `NVMeTLSkey-1:01:${Buffer.concat([key, crc]).toString('base64')}:`;
    await target.exec('dmesg -C');
    const r = await boot('other-psk', scriptWith('other-psk', { ...bv, tls_psk: other }, [`sanboot ${diskUri()} || echo KURRENT-NVME-REFUSED`]));
    figures.refused_other_psk = reason(r.serial);
    expect(r.serial).toContain('KURRENT-NVME-REFUSED');
    expect(r.serial).not.toContain(BOOT_MARKER);
    // tlshd ends the handshake without an alert when the binder does not verify.
    expect(r.serial).toMatch(/Could not open SAN device: NVMe\/TCP TLS: no TLS on port, or PSK identity unknown/);
    // No controller was created for it: the handshake never completed.
    expect(await target.exec('dmesg')).not.toContain('creating nvm controller');
  }, 300_000);

  it('a setting missing or malformed stops the boot with its name on the console; a corrupted key is never used', async () => {
    // The same key with its first base64 character changed: its CRC-32 no longer matches.
    const flipped = (k: string) => {
      const [prefix, hh, b64] = String(k).split(':');
      return `${prefix}:${hh}:${b64[0] === 'A' ? 'B' : 'A'}${b64.slice(1)}:`;
    };
    const uri = diskUri();
    const tries = [
      ['clear tls-psk', `set tls-psk ${bv.tls_psk}`],
      [`set tls-psk ${flipped(String(bv.tls_psk))}`, `set tls-psk ${bv.tls_psk}`],
      ['clear hostnqn', `set hostnqn ${bv.hostnqn}`],
      ['clear dhchap-secret', `set dhchap-secret ${bv.dhchap_secret}`],
      [`set dhchap-secret ${flipped(String(bv.dhchap_secret))}`, `set dhchap-secret ${bv.dhchap_secret}`],
    ];
    const lines = tries.flatMap(([change, restore], i) => [change, `sanboot ${uri} || echo KURRENT-REFUSED-${i}`, restore]);
    const r = await boot('settings', scriptWith('settings', bv, lines));
    expect(r.serial).not.toContain(BOOT_MARKER);
    expect(tries.map((_, i) => r.serial.includes(`KURRENT-REFUSED-${i}`))).toEqual(tries.map(() => true));
    expect([...r.serial.matchAll(/Could not open SAN device: ([^(\r\n]*)/g)].map((m) => m[1].trim())).toEqual([
      'tls-psk is not set or not NVMeTLSkey-1',
      'tls-psk is not set or not NVMeTLSkey-1',
      'hostnqn is not set',
      'NVMe target requires DH-HMAC-CHAP; dhchap-secret is not set',
      'dhchap-secret or dhchap-ctrl-secret is not DHHC-1',
    ]);
  }, 300_000);

  it('sanhook holds the disk past the Keep Alive timeout (Keep Alive sent), then sanboot boots it; the target never expires the controller', async () => {
    // Twice the 10 s Keep Alive timeout asked for in Connect.
    const d = scriptWith('hook', bv, [`sanhook --drive 0x81 ${diskUri()} || echo HOOK-FAILED`, 'echo HOOKED', 'sleep 20', 'sanboot --drive 0x81 || echo BOOT-FAILED']);
    await target.exec('dmesg -C');
    const r = await boot('hook', d);
    expect(r.serial).toContain('HOOKED');
    expect(r.serial).not.toContain('HOOK-FAILED');
    expect(r.serial).toContain(BOOT_MARKER);
    const dmesg = await target.exec('dmesg');
    expect(dmesg).toContain(`for subsystem ${bv.disk_nqn} for NQN ${bv.hostnqn} with DH-HMAC-CHAP`);
    expect(dmesg).not.toMatch(/keep-alive|keep alive/i);
  }, 300_000);

  it('BIOS: our ipxe.pxe hooks the NVMe/TCP disk (TLS 1.3, DH-HMAC-CHAP) as INT 13h drive 0x80; real-mode code reads it through INT 13h', async () => {
    await waitForMaster(t, '_tpl_bios.img');
    const d = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'windows', os_version: '10', name: '_tpl_bios.img' });
    expect([d.status, d.status === 201 ? null : d.body]).toEqual([201, null]);
    const bios = d.body.disks.find((x: { os: string }) => x.os === 'windows');
    // The stock PXE ROM (i386) runs boot.ipxe first and chains ours; ours (x86_64) goes on. An MBR
    // cannot be booted from this disk: nvmet exports a file on btrfs with 4096-byte blocks and the
    // BIOS boot path (INT 13h AH=02h) needs 512 (README); a PXE program stands in for it.
    const root = scriptWith('bios', bv, [
      'iseq ${buildarch} x86_64 || chain tftp://${next-server}/ipxe.pxe',
      // sanunhook first: the drive goes away and the disk can be hooked again at once.
      `sanhook --drive 0x81 nvme://${bv.storager_ip}:${bv.nvme_port}/${bios.nqn} || echo KURRENT-BIOS-REFUSED`,
      'sanunhook --drive 0x81 || echo KURRENT-BIOS-UNHOOK-FAILED',
      `sanhook --drive 0x80 nvme://${bv.storager_ip}:${bv.nvme_port}/${bios.nqn} || echo KURRENT-BIOS-REFUSED`,
      'chain tftp://${next-server}/int13-reader.pxe',
    ]);
    fs.copyFileSync(path.join(ipxe.out, 'ipxe.pxe'), path.join(root, 'ipxe.pxe'));
    fs.writeFileSync(path.join(root, 'int13-reader.pxe'), int13Reader());
    await target.exec('dmesg -C');
    const r = await boot('bios', root, 'bios');
    figures.bios_power_on_to_int13_read_ms = Math.round(r.ms);
    expect(r.serial).not.toMatch(/KURRENT-BIOS-(REFUSED|UNHOOK-FAILED)/);
    expect(r.serial).toMatch(/Registered SAN device 0x81[^]*Unregistered SAN device 0x81[^]*Registered SAN device 0x80/);
    // LBA 1 holds the marker: only an INT 13h read of the NVMe/TCP disk can print it.
    expect(r.serial).toContain(`${BOOT_MARKER} bios int13`);
    expect(r.serial).not.toContain('KURRENT-BIOS: int13 read failed');
    // Two controllers, one per hook, each authenticated.
    expect((await target.exec('dmesg')).match(new RegExp(`for subsystem ${bios.nqn} for NQN ${bv.hostnqn} with DH-HMAC-CHAP`, 'g'))).toHaveLength(2);
  }, 300_000);

  it('writes reach the disk: GRUB saves two environment blocks through UEFI Block I/O (1 KiB: in-capsule data; 64 KiB: R2T and H2CData); the next boot of the clone reads it back, the master is untouched', async () => {
    await waitForMaster(t, '_tpl_grub.img');
    const d = await t.req('POST', '/workers/seat-01/luns/disk', { type: 'master', os: 'centos', os_version: '9', name: '_tpl_grub.img' });
    expect([d.status, d.status === 201 ? null : d.body]).toEqual([201, null]);
    const grub = d.body.disks.find((x: { os: string }) => x.os === 'centos');
    expect((await t.req('PUT', '/workers/seat-01/default-disk', { os_tag: grub.os_tag })).status).toBe(200);
    try {
      const first = await boot('grub-write');
      expect(first.serial).toContain('KURRENT-GRUB: up');
      expect(first.serial).toContain('KURRENT-GRUB: stamp=. stamp64=.'); // the master's blocks have none
      expect(first.serial).toContain('KURRENT-GRUB: saved');
      expect(first.serial).not.toMatch(/error:/);
      const second = await boot('grub-read-back');
      expect(second.serial).toContain(`KURRENT-GRUB: stamp=${STAMP}. stamp64=${STAMP}.`);
      // The write went to the worker's clone, never to the master it was cloned from.
      expect((await target.exec(`grep -c -e 'stamp=${STAMP}' -e 'stamp64=${STAMP}' ${GUEST_DISK_DIR}/_tpl_grub.img || true`)).trim()).toBe('0');
      // 64 KiB is past what the port takes in a capsule: that write went by R2T and H2CData.
      const inline = Number((await target.exec('cat /sys/kernel/config/nvmet/ports/*/param_inline_data_size')).trim().split('\n')[0]);
      expect(inline).toBeGreaterThan(1024);
      expect(inline).toBeLessThan(65536);
    } finally {
      expect((await t.req('PUT', '/workers/seat-01/default-disk', { os_tag: firstTag })).status).toBe(200);
    }
  }, 400_000);

  /** Controllers the target created since the last `dmesg -C`. */
  const controllers = async () => ((await target.exec('dmesg')).match(/creating nvm controller/g) ?? []).length;
  const REASON = 'Kurrent: the default disk does not boot now: ';

  // Last: it rotates and revokes the credential the tests above use (bv).
  it('a rotated key not yet on the target, then a revoked credential: the control plane withholds the disk, the console says why, the target is never asked; after the push it boots', async () => {
    const before = (await t.req('GET', '/workers/seat-01/credential')).body;
    // The agent frozen: the rotation's push times out (2x the probe timeout) and stays pending.
    await target.exec('pkill -STOP -f agent.js');
    let rotated;
    try {
      rotated = await t.req('PUT', '/workers/seat-01/credential', { generate: true });
    } finally {
      await target.exec('pkill -CONT -f agent.js');
    }
    expect(rotated.status).toBe(200);
    expect(rotated.body.agents).toEqual([expect.objectContaining({ agent: 'kn1', state: 'failed' })]);
    await target.exec('dmesg -C');
    const pending = await boot('rotated-not-pushed');
    figures.refused_not_pushed = pending.serial.split(REASON)[1]?.split(/\r?\n/)[0] ?? '(none)';
    expect(pending.serial).toContain(`${REASON}the worker's current credential is not yet on the disk's agent (the reconciler pushes it)`);
    expect(pending.serial).not.toContain(BOOT_MARKER);
    expect(pending.serial).not.toContain('nvme://');
    expect(await controllers()).toBe(0);

    // The reconciler's pass pushes it; the next power-on boots with the new keys.
    const pass = await t.req('POST', '/reconcile');
    expect(pass.status).toBe(200);
    const after = (await t.req('GET', '/workers/seat-01/credential')).body;
    expect(after.agents).toEqual([expect.objectContaining({ agent: 'kn1', state: 'pushed' })]);
    // New keys (the answers carry their hashes, never the secrets).
    expect([after.dhchap_key_sha256, after.tls_psk_sha256]).toEqual([rotated.body.dhchap_key_sha256, rotated.body.tls_psk_sha256]);
    expect([after.dhchap_key_sha256 === before.dhchap_key_sha256, after.tls_psk_sha256 === before.tls_psk_sha256]).toEqual([false, false]);
    const pushed = await boot('rotated-pushed');
    expect(pushed.serial).toContain(BOOT_MARKER);
    expect(await controllers()).toBeGreaterThan(0);

    // Revoked: the agent removed the host; nothing to boot with, and the console says so.
    expect((await t.req('DELETE', '/workers/seat-01/credential')).status).toBe(200);
    await target.exec('dmesg -C');
    const revoked = await boot('revoked');
    figures.refused_revoked = revoked.serial.split(REASON)[1]?.split(/\r?\n/)[0] ?? '(none)';
    expect(revoked.serial).toContain(`${REASON}the worker's storage credential is revoked`);
    expect(revoked.serial).not.toContain(BOOT_MARKER);
    expect(revoked.serial).not.toContain('nvme://');
    expect(await controllers()).toBe(0);
    const s = (await t.req('GET', `/boots?mac=${MAC}`)).body.items[0];
    expect(s.stages.find((x: { stage: string }) => x.stage === 'vars').detail).toMatchObject({ answer: 'empty', reason: "the worker's storage credential is revoked" });
  }, 600_000);
});
