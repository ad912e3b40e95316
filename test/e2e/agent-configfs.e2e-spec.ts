import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { listTree, makeFile, startAgent, TestAgent } from '../helpers/agent';
import { tempDir } from '../helpers/app';

/**
 * The LIO and nvmet backends against a temp directory shaped like configfs. The kernel suites
 * (test/kernel) prove that a real 6.12 kernel accepts what the agent writes; these stay because
 * they check what a kernel run cannot, in seconds and in every pass: the exact files and the
 * targetcli-fb saveconfig.json written and restored, keys made by Debian's nvme-cli accepted and
 * never echoed, every refusal of bad input with nothing written, and the ordering rules (a port
 * address changed only while nothing is linked) as the agent applies them.
 */
const IQN = 'iqn.2026-07.com.controller';
const NQN = 'nqn.2026-07.com.controller';
const HOST = 'nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555';

describe('LIO backend (configfs under a test root, targetcli-fb semantics)', () => {
  let a: TestAgent;
  let root: string;
  let saveconfig: string;
  const env = () => ({ IPXE_AGENT_BACKEND: 'lio', IPXE_AGENT_CONFIGFS_ROOT: root, IPXE_AGENT_LIO_SAVECONFIG: saveconfig, IPXE_AGENT_PORTAL_ADDR: '192.168.80.3' });
  beforeEach(async () => {
    const d = tempDir();
    root = path.join(d, 'target');
    saveconfig = path.join(d, 'etc/saveconfig.json');
    a = await startAgent(env(), d);
  });
  afterEach(() => a.close());

  it('writes backstore, target, tpg, LUN 0, ACL attributes, portal and saveconfig.json; deletes all of it', async () => {
    const r = await a.req('POST', '/luns/disk', { iqn: `${IQN}:worker-01.ubuntu`, size: '2G' });
    expect(r.status).toBe(201);
    const backing = path.join(a.diskDir, 'worker-01.ubuntu.img');
    expect(listTree(root)).toEqual([
      'core/',
      'core/fileio_0/',
      'core/fileio_0/worker-01.ubuntu/',
      `core/fileio_0/worker-01.ubuntu/control=fd_dev_name=${backing},fd_dev_size=${2 * 2 ** 30}`,
      'core/fileio_0/worker-01.ubuntu/enable=1',
      `core/fileio_0/worker-01.ubuntu/udev_path=${backing}`,
      'iscsi/',
      `iscsi/${IQN}:worker-01.ubuntu/`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/attrib/`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/attrib/authentication=0`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/attrib/cache_dynamic_acls=1`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/attrib/demo_mode_write_protect=0`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/attrib/generate_node_acls=1`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/enable=1`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/lun/`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/lun/lun_0/`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/lun/lun_0/worker-01.ubuntu -> ../../../../../core/fileio_0/worker-01.ubuntu`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/np/`,
      `iscsi/${IQN}:worker-01.ubuntu/tpgt_1/np/192.168.80.3:3260/`,
    ]);
    const saved = JSON.parse(fs.readFileSync(saveconfig, 'utf8'));
    expect(saved.storage_objects).toEqual([{ plugin: 'fileio', name: 'worker-01.ubuntu', dev: backing, size: 2 * 2 ** 30, write_back: true }]);
    expect(saved.targets[0]).toMatchObject({
      wwn: `${IQN}:worker-01.ubuntu`,
      fabric: 'iscsi',
      tpgs: [{ tag: 1, enable: true, luns: [{ index: 0, storage_object: '/backstores/fileio/worker-01.ubuntu' }], portals: [{ ip_address: '192.168.80.3', port: 3260 }] }],
    });
    expect((await a.req('GET', '/luns')).body).toEqual([{ iqn: `${IQN}:worker-01.ubuntu`, cd: false, luns: [{ backing }] }]);
    expect((await a.req('GET', '/capabilities')).body).toMatchObject({ backend: 'lio', cd: false, persistent: 'saveconfig (auto-load on start)' });
    const cd = await a.req('POST', '/luns/cd', { iso: 'x.iso' });
    expect([cd.status, cd.body.message]).toEqual([400, 'the lio backend has no CD (ISO) support']);
    expect((await a.req('DELETE', `/luns?iqn=${IQN}:worker-01.ubuntu`)).status).toBe(200);
    expect(listTree(root)).toEqual(['core/', 'core/fileio_0/', 'iscsi/']);
    expect(JSON.parse(fs.readFileSync(saveconfig, 'utf8')).targets).toEqual([]);
  });

  it('restores targets from saveconfig.json into an empty configfs at start', async () => {
    await a.req('POST', '/luns/disk', { iqn: `${IQN}:w1.ubuntu`, size: '1G' });
    const tree = listTree(root);
    await a.close();
    fs.rmSync(root, { recursive: true }); // a reboot: configfs starts empty
    a = await startAgent(env(), a.dir);
    expect(listTree(root)).toEqual(tree);
    // The start-up scan found it present: nothing created twice.
    expect((await a.req('POST', '/luns/scan')).body).toEqual({ created: [], skipped: [{ iqn: `${IQN}:w1.ubuntu`, reason: 'exists' }] });
  });

  it('GET /sessions: initiators of open targets (dynamic_sessions) and of closed ones (the ACL info of a logged-in initiator)', async () => {
    await a.req('POST', '/luns/disk', { iqn: `${IQN}:w1.ubuntu`, size: '1G' });
    await a.req('POST', '/luns/disk', { iqn: `${IQN}:w2.ubuntu`, size: '1G', allowed_initiators: [`${IQN}:w2`, `${IQN}:w2b`] });
    expect((await a.req('GET', '/sessions')).body).toEqual({ supported: true, sessions: [] });
    // What the kernel shows while initiators are logged in (the files are the kernel's on real configfs).
    fs.writeFileSync(path.join(root, 'iscsi', `${IQN}:w1.ubuntu`, 'tpgt_1', 'dynamic_sessions'), 'iqn.2010-04.org.ipxe:w1\n');
    fs.writeFileSync(
      path.join(root, 'iscsi', `${IQN}:w2.ubuntu`, 'tpgt_1', 'acls', `${IQN}:w2`, 'info'),
      `InitiatorName: ${IQN}:w2\nInitiatorAlias: \nLIO Session ID: 7   ISID: 0x00023d000001  TSIH: 1  SessionType: Normal\nSession State: TARG_SESS_STATE_LOGGED_IN\n` +
        '----------------------[iSCSI Connections]-------------------------\nCID: 0  Connection State: TARG_CONN_STATE_LOGGED_IN\n   Address 10.0.0.22 TCP  StatSN: 0x00000010\n',
    );
    fs.writeFileSync(path.join(root, 'iscsi', `${IQN}:w2.ubuntu`, 'tpgt_1', 'acls', `${IQN}:w2b`, 'info'), `No active iSCSI Session for Initiator Endpoint: ${IQN}:w2b\n`);
    expect((await a.req('GET', '/sessions')).body).toEqual({
      supported: true,
      sessions: [
        { target: `${IQN}:w1.ubuntu`, initiator: 'iqn.2010-04.org.ipxe:w1', address: null, id: null },
        { target: `${IQN}:w2.ubuntu`, initiator: `${IQN}:w2`, address: '10.0.0.22', id: '7' },
      ],
    });
  });
});

describe('nvmet backend (NVMe/TCP configfs under a test root)', () => {
  let a: TestAgent;
  let root: string;
  const env = () => ({ IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: root, IPXE_AGENT_PORTAL_ADDR: '192.168.80.3' });
  const nvme = (...args: string[]) => execFileSync('nvme', args, { encoding: 'utf8' }).trim();
  beforeEach(async () => {
    const d = tempDir();
    root = path.join(d, 'nvmet');
    a = await startAgent(env(), d);
  });
  afterEach(() => a.close());

  it('GET /sessions says it cannot see connections without nvmet debugfs (a test root, or a kernel without CONFIG_NVME_TARGET_DEBUGFS)', async () => {
    expect((await a.req('GET', '/sessions')).body).toEqual({ supported: false, sessions: [] });
  });

  it('sets up one TLS port on 4421 at start', async () => {
    expect(listTree(path.join(root, 'ports'))).toEqual([
      '1/',
      '1/addr_adrfam=ipv4',
      '1/addr_traddr=192.168.80.3',
      '1/addr_treq=required',
      '1/addr_trsvcid=4421',
      '1/addr_trtype=tcp',
      '1/addr_tsas=tls1.3',
      '1/subsystems/',
    ]);
    expect((await a.req('GET', '/capabilities')).body).toMatchObject({ backend: 'nvmet', transport: 'nvme-tcp', base_nqn: NQN, base_iqn: null, cd: false });
  });

  it('stores host credentials made by nvme-cli, never echoes them, links allowed hosts to the subsystem', async () => {
    const key = nvme('gen-dhchap-key', '-n', HOST, '-m', '1');
    const ctrl = nvme('gen-dhchap-key', '-n', HOST, '-m', '0', '-l', '48');
    const psk = nvme('gen-tls-key', '-m', '1').split('\n').pop()!;
    const put = await a.req('PUT', `/nvme/hosts/${HOST}`, { dhchap_key: key, dhchap_ctrl_key: ctrl, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'ffdhe2048', tls_psk: psk });
    expect(put.status).toBe(200);
    expect(put.text).not.toContain(key.split(':')[2]);
    expect(put.body).toEqual({
      hostnqn: HOST,
      dhchap_hash: 'hmac(sha256)',
      dhchap_dhgroup: 'ffdhe2048',
      dhchap_key_sha256: expect.stringMatching(/^[0-9a-f]{12}$/),
      dhchap_ctrl_key_sha256: expect.stringMatching(/^[0-9a-f]{12}$/),
      tls_psk_sha256: expect.stringMatching(/^[0-9a-f]{12}$/),
      subsystems: [],
    });
    const list = await a.req('GET', '/nvme/hosts');
    expect(list.body).toEqual([put.body]);
    expect(list.text).not.toMatch(/DHHC-1|NVMeTLSkey/);
    expect(fs.readFileSync(path.join(root, 'hosts', HOST, 'dhchap_key'), 'utf8').trim()).toBe(key);
    expect(fs.readFileSync(path.join(root, 'hosts', HOST, 'dhchap_hash'), 'utf8').trim()).toBe('hmac(sha256)');
    expect(fs.statSync(path.join(a.dir, 'state/nvme-hosts.json')).mode & 0o777).toBe(0o600);

    const r = await a.req('POST', '/luns/disk', { iqn: `${NQN}:worker-01.3f2a9c1b7d4e`, size: '8G', allowed_hosts: [HOST] });
    expect(r.status).toBe(201);
    const sub = path.join(root, 'subsystems', `${NQN}:worker-01.3f2a9c1b7d4e`);
    expect(listTree(sub)).toEqual([
      'allowed_hosts/',
      `allowed_hosts/${HOST} -> ../../../hosts/${HOST}`,
      'attr_allow_any_host=0',
      'namespaces/',
      'namespaces/1/',
      `namespaces/1/device_path=${path.join(a.diskDir, 'worker-01.3f2a9c1b7d4e.img')}`,
      'namespaces/1/enable=1',
    ]);
    expect(fs.readlinkSync(path.join(root, 'ports/1/subsystems', `${NQN}:worker-01.3f2a9c1b7d4e`))).toBe(`../../../subsystems/${NQN}:worker-01.3f2a9c1b7d4e`);
    expect((await a.req('GET', '/luns')).body).toEqual([
      { nqn: `${NQN}:worker-01.3f2a9c1b7d4e`, cd: false, luns: [{ backing: path.join(a.diskDir, 'worker-01.3f2a9c1b7d4e.img') }], allowed_hosts: [HOST] },
    ]);

    expect((await a.req('GET', '/nvme/hosts')).body[0].subsystems).toEqual([`${NQN}:worker-01.3f2a9c1b7d4e`]);

    // A declarative PUT: `subsystems` is the exact set of links (made, removed, unknown = 404, nothing changed).
    const sub2 = `${NQN}:worker-01.0123456789ab`;
    expect((await a.req('POST', '/luns/disk', { iqn: sub2, size: '8G' })).status).toBe(201);
    const creds = { dhchap_key: key, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'ffdhe2048', tls_psk: psk };
    const missing = await a.req('PUT', `/nvme/hosts/${HOST}`, { ...creds, subsystems: [sub2, `${NQN}:worker-01.ffffffffffff`] });
    expect([missing.status, missing.body.message]).toEqual([404, `subsystems: subsystem not found: ${NQN}:worker-01.ffffffffffff`]);
    expect(fs.existsSync(path.join(root, 'subsystems', sub2, 'allowed_hosts', HOST))).toBe(false);
    const moved = await a.req('PUT', `/nvme/hosts/${HOST}`, { ...creds, subsystems: [sub2] });
    expect([moved.status, moved.body.subsystems]).toEqual([200, [sub2]]);
    expect(fs.readlinkSync(path.join(root, 'subsystems', sub2, 'allowed_hosts', HOST))).toBe(`../../../hosts/${HOST}`);
    expect(fs.existsSync(path.join(sub, 'allowed_hosts', HOST))).toBe(false);
    const manifest = JSON.parse(fs.readFileSync(path.join(a.dir, 'state/targets.json'), 'utf8')).targets;
    expect([manifest[sub2].allowed_hosts, manifest[`${NQN}:worker-01.3f2a9c1b7d4e`].allowed_hosts]).toEqual([[HOST], undefined]);
    expect((await a.req('PUT', `/nvme/hosts/${HOST}`, { ...creds, subsystems: [`${NQN}:worker-01.3f2a9c1b7d4e`, sub2] })).body.subsystems).toEqual([`${NQN}:worker-01.0123456789ab`, `${NQN}:worker-01.3f2a9c1b7d4e`]);
    expect((await a.req('DELETE', `/luns?iqn=${sub2}&delete_file=true`)).status).toBe(200);

    // Removing the host removes its links; removing the disk removes the subsystem and the port link.
    expect((await a.req('DELETE', `/nvme/hosts/${HOST}`)).status).toBe(200);
    expect(fs.existsSync(path.join(sub, 'allowed_hosts', HOST))).toBe(false);
    expect((await a.req('DELETE', `/luns?iqn=${NQN}:worker-01.3f2a9c1b7d4e&delete_file=true`)).status).toBe(200);
    expect(listTree(path.join(root, 'subsystems'))).toEqual([]);
    expect(listTree(path.join(root, 'ports/1/subsystems'))).toEqual([]);
    expect((await a.req('DELETE', `/nvme/hosts/${HOST}`)).status).toBe(404);
  });

  it('rejects malformed keys, unknown hosts and iSCSI names', async () => {
    const key = nvme('gen-dhchap-key', '-n', HOST, '-m', '1');
    const raw = Buffer.from(key.split(':')[2], 'base64');
    raw[0] ^= 1; // CRC no longer matches
    const bad: [unknown, RegExp][] = [
      [{ dhchap_key: `DHHC-1:01:${raw.toString('base64')}:`, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null' }, /dhchap_key: CRC-32/],
      [{ dhchap_key: 'DHHC-1:01:short:', dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null' }, /dhchap_key/],
      [{ dhchap_key: 'secret', dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null' }, /dhchap_key/],
      [{ dhchap_key: key, dhchap_hash: 'md5', dhchap_dhgroup: 'null' }, /dhchap_hash/],
      [{ dhchap_key: key, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'ffdhe1' }, /dhchap_dhgroup/],
      [{ dhchap_key: key, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null', tls_psk: 'NVMeTLSkey-1:01:AAAA:' }, /tls_psk/],
    ];
    for (const [body, msg] of bad) {
      const r = await a.req('PUT', `/nvme/hosts/${HOST}`, body);
      expect([r.status, r.body.message]).toEqual([400, expect.stringMatching(msg)]);
      expect(r.text).not.toContain(key.split(':')[2]);
    }
    expect((await a.req('PUT', '/nvme/hosts/not-an-nqn', { dhchap_key: key, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null' })).status).toBe(400);
    expect(fs.existsSync(path.join(root, 'hosts'))).toBe(false);
    const nohost = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w1.aaaaaaaaaaaa`, size: '1G', allowed_hosts: [HOST] });
    expect([nohost.status, nohost.body.message]).toEqual([400, expect.stringMatching(/host not found/)]);
    expect(fs.readdirSync(a.diskDir)).toEqual(['.masters']); // no image, only the (empty) version store
    expect((await a.req('POST', '/luns/disk', { iqn: `${IQN}:w1.ubuntu`, size: '1G' })).body.message).toMatch(/^iqn base mismatch/);
  });

  it('changes the port address only while no subsystem is linked (unlink, set, relink)', async () => {
    makeFile(path.join(a.diskDir, 'w1.aaaaaaaaaaaa.img'), 1 << 20);
    await a.req('POST', '/luns/scan');
    await a.close();
    a = await startAgent({ ...env(), IPXE_AGENT_PORTAL_ADDR: '10.9.9.9', IPXE_AGENT_NVME_PORT: '4420', IPXE_AGENT_NVME_TLS: 'false' }, a.dir);
    expect(fs.readFileSync(path.join(root, 'ports/1/addr_traddr'), 'utf8').trim()).toBe('10.9.9.9');
    expect(fs.readFileSync(path.join(root, 'ports/1/addr_trsvcid'), 'utf8').trim()).toBe('4420');
    expect(fs.readlinkSync(path.join(root, 'ports/1/subsystems', `${NQN}:w1.aaaaaaaaaaaa`))).toBe(`../../../subsystems/${NQN}:w1.aaaaaaaaaaaa`);
  });
});
