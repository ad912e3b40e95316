import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { deriveIscsiChapSecret } from '../../src/shared/nvme-keys';
import { freePort, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';
import { BOOT_MARKER, writeBootableMaster } from '../helpers/images';
import { KernelNode } from '../../scripts/kernel-node';

/**
 * LIO on a real kernel: the storage agent drives the iSCSI target of a Linux 6.12 guest through
 * configfs; stock iPXE (Debian's ROM, BIOS) in a second qemu boots the worker's disk from it
 * through the shipped boot.ipxe chain, admitted by the node ACL the agent set for the worker's
 * initiator name and answering the CHAP challenge with the user and secret /boot-vars gave it.
 * The kernel refuses an initiator the ACL does not name and a wrong CHAP secret; ACL and CHAP
 * set right by the reconciler after a change behind its back admit the worker again.
 */

const MAC = '52:54:00:12:34:77';
const TOKEN = 'kn-lio-token';
const BASE = 'iqn.2026-07.com.controller';
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

describe('LIO on a real kernel: targets, LUNs, node ACLs, CHAP, a BIOS iPXE boot', () => {
  const dir = tempDir('kurrent-kernel-lio-');
  let target: KernelNode;
  let t: TestApp;
  let cpPort = 0;
  let qemu: ChildProcess | undefined;

  beforeAll(async () => {
    cpPort = await freePort();
    const master = path.join(dir, '_tpl_boot.img');
    writeBootableMaster(master);
    // iPXE's sanboot iscsi:<server>::::<iqn> dials port 3260 of 10.0.2.2: the host's 3260 is forwarded.
    target = new KernelNode({
      dir: path.join(dir, 'target'),
      env: { IPXE_AGENT_BACKEND: 'lio', IPXE_AGENT_TOKEN: TOKEN, IPXE_AGENT_LOG_LEVEL: 'warn' },
      ports: { iscsi: 3260 },
      seed: { '_tpl_boot.img': master },
    });
    await target.start();
    // No periodic reconciler: a pass of its own between a change behind its back and the one
    // the test asks for would set things right first (a flake seen in CI).
    t = await startApp({ IPXE_CP_TOKEN: 'cp', IPXE_CP_RECONCILE_SECONDS: '0', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', KN_AGENT_TOKEN: TOKEN }, { dir: path.join(dir, 'cp') });
    await t.app.listen(cpPort, '127.0.0.1');
    expect((await t.req('POST', '/agents', { id: 'lio1', base_url: target.agentUrl, token: '${KN_AGENT_TOKEN}', iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['lio'] })).status).toBe(201);
  }, 300_000);

  afterAll(async () => {
    qemu?.kill('SIGKILL');
    await t?.close();
    await target?.stop();
  });

  const cfs = async (p: string) => (await target.exec(`cat ${sh(`/sys/kernel/config/target/${p}`)} 2>&1`)).trim();
  const ls = async (p: string) => (await target.exec(`ls ${sh(`/sys/kernel/config/target/${p}`)} 2>/dev/null`)).trim().split('\n').filter(Boolean);
  const targets = async () => (await ls('iscsi')).filter((n) => n.startsWith('iqn.'));
  /** The worker's CHAP secret as the control plane derives it from the credential in its 0600 file. */
  const chapSecret = () => deriveIscsiChapSecret(JSON.parse(t.read('state/nvme-credentials.json')).credentials['seat-lio'].dhchap_key, 'seat-lio');
  /** LIO's login counters of the target and the initiator of its last failed login (fabric_statistics). */
  const loginStats = async () => {
    const dir = `iscsi/${iqn}/fabric_statistics`;
    return {
      accepts: Number(await cfs(`${dir}/iscsi_login_stats/accepts`)),
      authenticate_fails: Number(await cfs(`${dir}/iscsi_login_stats/authenticate_fails`)),
      fail_intr_name: await cfs(`${dir}/iscsi_tgt_attr/fail_intr_name`),
    };
  };

  let iqn = '';

  it('a worker disk on LIO: fileio backstore on the clone, LUN 0, closed TPG with the worker\'s node ACL', async () => {
    const caps = (await (await fetch(`${target.agentUrl}/capabilities`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as Record<string, unknown>;
    expect(caps).toMatchObject({ backend: 'lio', transport: 'iscsi', fs_type: 'btrfs', clone: 'reflink (FICLONE)', kernel: expect.objectContaining({ release: target.kernelVersion, missing: [] }) });
    await t.req('POST', '/devices', { mac: MAC });
    expect((await t.req('POST', '/workers', { worker_id: 'seat-lio', mac: MAC })).status).toBe(201);
    await waitForMaster(t, '_tpl_boot.img');
    const d = await t.req('POST', '/workers/seat-lio/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_boot.img' });
    expect([d.status, d.status === 201 ? null : d.body]).toEqual([201, null]);
    iqn = d.body.disks[0].iqn;
    expect(iqn).toBe(`${BASE}:seat-lio.ubuntu`);
    await t.req('PUT', '/workers/seat-lio/default-os', { os: 'ubuntu', menu_timeout: 100 });

    expect(await targets()).toEqual([iqn]);
    expect(await cfs(`iscsi/${iqn}/tpgt_1/enable`)).toBe('1');
    expect(await ls(`iscsi/${iqn}/tpgt_1/np`)).toEqual(['0.0.0.0:3260']);
    expect(await cfs(`iscsi/${iqn}/tpgt_1/attrib/generate_node_acls`)).toBe('0');
    // CHAP required of the one ACL: the worker id and the secret derived from its credential.
    expect(await cfs(`iscsi/${iqn}/tpgt_1/attrib/authentication`)).toBe('1');
    expect(await ls(`iscsi/${iqn}/tpgt_1/acls`)).toEqual([`${BASE}:seat-lio`]);
    expect(await ls(`iscsi/${iqn}/tpgt_1/acls/${BASE}:seat-lio/lun_0`)).toContain('mapped');
    expect(await cfs(`iscsi/${iqn}/tpgt_1/acls/${BASE}:seat-lio/auth/userid`)).toBe('seat-lio');
    expect(await cfs(`iscsi/${iqn}/tpgt_1/acls/${BASE}:seat-lio/auth/password`)).toBe(chapSecret());
    expect((await t.req('GET', `/boot-vars?mac=${MAC}&format=json`)).body).toMatchObject({ iscsi_username: 'seat-lio', iscsi_password: chapSecret() });
    expect(await cfs('core/fileio_0/seat-lio.ubuntu/udev_path')).toBe(d.body.disks[0].backing);
    expect(await cfs('core/fileio_0/seat-lio.ubuntu/enable')).toBe('1');
    const agentLuns = (await t.req('GET', '/agents/lio1/luns')).body;
    expect(agentLuns).toEqual(expect.arrayContaining([expect.objectContaining({ iqn, allowed_initiators: [`${BASE}:seat-lio`], chap_userid: 'seat-lio' })]));
  });

  /** The shipped TFTP files pointed at this control plane; `menuPrefix` goes first into menu.ipxe (after /boot-vars ran). */
  const tftpDir = (name = 'tftp', menuPrefix = '') => {
    const tftp = path.join(dir, name);
    if (fs.existsSync(tftp)) return tftp;
    fs.mkdirSync(tftp);
    for (const f of ['boot.ipxe', 'boot.ipxe.cfg', 'menu.ipxe']) fs.copyFileSync(path.join(__dirname, '../../docker/tftp', f), path.join(tftp, f));
    const cfg = path.join(tftp, 'boot.ipxe.cfg');
    fs.writeFileSync(cfg, fs.readFileSync(cfg, 'utf8').replace(/set controller http:\/\/\S+/, `set controller http://10.0.2.2:${cpPort}`));
    const menu = path.join(tftp, 'menu.ipxe');
    if (menuPrefix) fs.writeFileSync(menu, fs.readFileSync(menu, 'utf8').replace('#!ipxe\n', `#!ipxe\n${menuPrefix}\n`));
    return tftp;
  };

  /**
   * Stock iPXE (BIOS) with the DHCP hostname given, until `done` holds (or 180 s); resolves with
   * the serial console (Debian's BIOS iPXE prints to VGA only: the serial carries the disk's marker).
   */
  async function boot(hostname: string, done: (serial: string) => Promise<boolean>, tftp = tftpDir()): Promise<string> {
    const serial = path.join(dir, `serial-${hostname}.log`);
    fs.writeFileSync(serial, '');
    qemu = spawn('qemu-system-x86_64', [
      '-accel', 'tcg', '-m', '256', '-display', 'none', '-no-reboot', '-boot', 'n',
      '-netdev', `user,id=n0,tftp=${tftp},bootfile=boot.ipxe,hostname=${hostname}`,
      '-device', `e1000,netdev=n0,mac=${MAC},romfile=/usr/lib/ipxe/qemu/pxe-e1000.rom`,
      '-serial', `file:${serial}`,
    ], { stdio: 'ignore' });
    const end = Date.now() + 180_000;
    while (Date.now() < end && qemu.exitCode === null) {
      if (await done(fs.readFileSync(serial, 'latin1'))) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    qemu.kill('SIGKILL');
    return fs.readFileSync(serial, 'latin1');
  }

  it('BIOS iPXE boots the disk from the kernel target, as the initiator the ACL admits, with the CHAP credential /boot-vars gave', async () => {
    const before = await loginStats();
    // Stops early on a refused login, so a failure says why (dmesg) instead of waiting out the boot.
    const out = await boot('seat-lio', async (serial) => serial.includes(BOOT_MARKER) || (await loginStats()).authenticate_fails > before.authenticate_fails);
    expect([out.includes(BOOT_MARKER), await target.exec('dmesg | grep -E "CHAP|Security negotiation|Login negotiation|not authorized" || true')]).toEqual([true, '']);
    expect(await target.exec('dmesg | grep -iE "iscsi.*(error|not authorized)" || true')).toBe('');
    const after = await loginStats();
    expect([after.accepts > before.accepts, after.authenticate_fails - before.authenticate_fails]).toEqual([true, 0]);
  }, 240_000);

  it('a wrong CHAP secret is refused by the kernel (its login statistics count the authentication failure)', async () => {
    const before = await loginStats();
    // The chain as shipped, with the secret /boot-vars set replaced before the menu sanboots.
    const tftp = tftpDir('tftp-wrong-secret', 'set password this-is-not-the-secret');
    const out = await boot('seat-lio', async () => (await loginStats()).authenticate_fails > before.authenticate_fails, tftp);
    expect(out).not.toContain(BOOT_MARKER);
    const after = await loginStats();
    expect([after.authenticate_fails - before.authenticate_fails >= 1, after.accepts, after.fail_intr_name]).toEqual([true, before.accepts, `${BASE}:seat-lio`]);
  }, 240_000);

  it('ACL and CHAP changed behind the control plane: one reconciler pass sets them right in the kernel, and the worker boots again', async () => {
    const wrong = await fetch(`${target.agentUrl}/luns/access`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ iqn, allowed_initiators: [`${BASE}:someone-else`], chap: { userid: 'seat-lio', secret: 'not-the-right-secret' } }),
    });
    expect(wrong.status).toBe(200);
    expect(await ls(`iscsi/${iqn}/tpgt_1/acls`)).toEqual([`${BASE}:someone-else`]);
    const pass = (await t.req('POST', '/reconcile')).body;
    expect(pass.iscsi_access).toEqual([{ worker_id: 'seat-lio', agent: 'lio1', iqn, reason: 'rename' }]);
    expect(await ls(`iscsi/${iqn}/tpgt_1/acls`)).toEqual([`${BASE}:seat-lio`]);
    expect(await cfs(`iscsi/${iqn}/tpgt_1/acls/${BASE}:seat-lio/auth/password`)).toBe(chapSecret());
    expect(await cfs(`iscsi/${iqn}/tpgt_1/attrib/authentication`)).toBe('1');
    const before = await loginStats();
    await target.exec('dmesg -C');
    const out = await boot('seat-lio', async (serial) => serial.includes(BOOT_MARKER) || (await loginStats()).authenticate_fails > before.authenticate_fails);
    expect([out.includes(BOOT_MARKER), await target.exec('dmesg | grep -E "CHAP|Security negotiation|Login negotiation|not authorized" || true')]).toEqual([true, '']);
  }, 240_000);

  it('an initiator the ACL does not name is refused by the kernel', async () => {
    await target.exec('dmesg -C');
    // Same bound MAC, so /boot-vars hands out the same disk; iPXE names itself ...:intruder.
    const out = await boot('intruder', async () => /is not authorized/.test(await target.exec('dmesg')));
    expect(out).not.toContain(BOOT_MARKER);
    const dmesg = await target.exec('dmesg');
    expect(dmesg).toMatch(new RegExp(`${BASE.replace(/\./g, '\\.')}:intruder is not authorized`));
  }, 240_000);

  it('removal: the target, its ACL and the backstore leave the kernel; a restart rebuilds what is left', async () => {
    const seat2 = await t.req('POST', '/workers', { worker_id: 'seat-two' });
    expect(seat2.status).toBe(201);
    const d = await t.req('POST', '/workers/seat-two/luns/disk', { type: 'empty', os: 'debian', size: '16M' });
    expect(d.status).toBe(201);
    expect(await targets()).toEqual([iqn, `${BASE}:seat-two.debian`]);
    expect((await t.req('DELETE', '/workers/seat-two/luns/disk/debian?delete_file=true')).status).toBe(200);
    expect(await targets()).toEqual([iqn]);
    expect(await ls('core/fileio_0')).not.toContain('seat-two.debian');

    await target.stop();
    await target.start();
    expect(await targets()).toEqual([iqn]);
    expect(await ls(`iscsi/${iqn}/tpgt_1/acls`)).toEqual([`${BASE}:seat-lio`]);
    expect(await cfs(`iscsi/${iqn}/tpgt_1/enable`)).toBe('1');
    expect(await cfs(`iscsi/${iqn}/tpgt_1/attrib/authentication`)).toBe('1');
    expect(await cfs(`iscsi/${iqn}/tpgt_1/acls/${BASE}:seat-lio/auth/password`)).toBe(chapSecret());
  }, 240_000);
});
