import * as fs from 'node:fs';
import { execFileSync } from 'node:child_process';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { StorageNodesService } from '../../src/control-plane/storage-nodes/storage-nodes.service';
import { FileSystem } from '../../src/shared/files/file-system';
import { makeFile, spawnAgent, Tgtd } from '../helpers/agent';
import { itFiles, startApp, tempDir, TestApp } from '../helpers/app';

const IQN = 'iqn.2026-07.com.controller';
const NQN = 'nqn.2026-07.com.controller';
const off = process.pid % 500;
const CONTROL = 4000 + off;
const PORT_A = 24000 + off;
const PORT_B = 24500 + off;
const PORT_FAKE = 25000 + off;

/** A misbehaving agent: hangs, 500s, drops connections or dribbles its body, per path. */
function fakeAgent(): http.Server {
  return http.createServer((req, res) => {
    const mode = (req.url ?? '').split('?')[0];
    if (mode === '/healthz') return res.end('{"status":"ok"}');
    if (mode === '/capabilities') return; // hangs: timeouts
    if (mode === '/masters') {
      res.writeHead(500, { 'content-type': 'application/json' });
      return res.end('{"statusCode":500,"message":"disk on fire"}');
    }
    if (mode === '/luns') return req.socket.destroy(); // dropped connection
    if (mode === '/luns/scan') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"created":');
      return; // slow body that never ends
    }
    res.writeHead(404);
    res.end();
  });
}

describe('control plane with real agents (stgt on tgtd, nvmet on a configfs root)', () => {
  const tgtd = new Tgtd(CONTROL, CONTROL + 10000);
  const dir = tempDir('kurrent-disks-');
  const diskA = path.join(dir, 'a/images');
  const diskB = path.join(dir, 'b/images');
  let agentA: Awaited<ReturnType<typeof spawnAgent>>;
  let agentB: Awaited<ReturnType<typeof spawnAgent>>;
  const fake = fakeAgent();
  let t: TestApp;
  const mbr = Buffer.from('KURRENT-MBR'.padEnd(446, '.'));

  beforeAll(async () => {
    await tgtd.start();
    makeFile(path.join(diskA, '_tpl_ubuntu_2204.img'), 64 << 20, [{ offset: 0, bytes: mbr }]);
    makeFile(path.join(diskA, 'Win11_24H2.iso'), 4 << 20);
    makeFile(path.join(diskB, '_tpl_ubuntu_2204.img'), 64 << 20, [{ offset: 0, bytes: mbr }]);
    makeFile(path.join(diskB, '_tpl_debian_12.img'), 64 << 20, [{ offset: 0, bytes: mbr }]);
    [agentA, agentB] = await Promise.all([
      spawnAgent({ IPXE_AGENT_PORT: String(PORT_A), IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL), IPXE_AGENT_ISCSI_PORT: String(CONTROL + 10000), IPXE_AGENT_TOKEN: 'token-a', DISK_DIR: diskA, IPXE_AGENT_STATE_DIR: path.join(dir, 'a/state') }),
      spawnAgent({ IPXE_AGENT_PORT: String(PORT_B), IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: path.join(dir, 'b/nvmet'), IPXE_AGENT_TOKEN: 'token-b', DISK_DIR: diskB, IPXE_AGENT_STATE_DIR: path.join(dir, 'b/state') }),
    ]);
    await new Promise<void>((r) => fake.listen(PORT_FAKE, '127.0.0.1', r));
  });
  afterAll(async () => {
    await Promise.all([agentA?.stop(), agentB?.stop()]);
    await tgtd.stop();
    fake.closeAllConnections();
    await new Promise((r) => fake.close(r));
  });
  beforeEach(async () => {
    t = await startApp({ AGENT_A_TOKEN: 'token-a', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '500', IPXE_CP_AGENT_TIMEOUT_MS: '3000' });
  });
  afterEach(async () => {
    // Leave the real agents empty for the next test.
    for (const w of (await t.req('GET', '/workers')).body) await t.req('DELETE', `/workers/${w.worker_id}?delete_disk=true&ignore_missing_target=true`);
    for (const a of ['a', 'b']) {
      const luns = await t.req('GET', `/agents/${a}/luns`);
      if (luns.status === 200) for (const l of luns.body) await t.req('DELETE', `/agents/${a}/luns?iqn=${l.iqn ?? l.nqn}&delete_file=${!l.cd}`);
    }
    await t.close();
  });

  const register = async (withFake = false) => {
    expect((await t.req('POST', '/agents', { id: 'A', base_url: `http://127.0.0.1:${PORT_A}/`, token: '${AGENT_A_TOKEN}', iscsi_server: '192.168.80.3', role: { disk: true, cd: true }, tags: ['storage', 'stgt'] })).status).toBe(201);
    expect((await t.req('POST', '/agents', { id: 'b', base_url: `http://127.0.0.1:${PORT_B}`, token: 'token-b', role: { disk: true } })).status).toBe(201);
    if (withFake) await t.req('POST', '/agents', { id: 'fake', base_url: `http://127.0.0.1:${PORT_FAKE}`, role: { disk: true, cd: false } });
  };

  it('registers agents (201/400/409), never returns tokens, keeps a blank token on PUT, probes', async () => {
    await register();
    const yml = t.read('config/agents.yml');
    expect(yml).toContain('token: ${AGENT_A_TOKEN}');
    expect(fs.statSync(path.join(t.dir, 'config/agents.yml')).mode & 0o777).toBe(0o600);
    const list = await t.req('GET', '/agents?live=false');
    expect(list.body).toEqual([
      { id: 'a', base_url: `http://127.0.0.1:${PORT_A}`, iscsi_server: '192.168.80.3', role: { disk: true, cd: true }, enabled: true, tags: ['storage', 'stgt'] },
      { id: 'b', base_url: `http://127.0.0.1:${PORT_B}`, iscsi_server: '127.0.0.1', role: { disk: true, cd: false }, enabled: true, tags: [] },
    ]);
    expect(list.text).not.toContain('token');
    expect((await t.req('POST', '/agents', { id: 'a', base_url: 'http://x' })).status).toBe(409);
    for (const body of [{ id: 'a/b', base_url: 'http://x' }, { id: 'ok', base_url: 'ftp://x' }, { id: 'ok', base_url: 'x' }, { id: 'ok' }]) {
      expect([JSON.stringify(body), (await t.req('POST', '/agents', body)).status]).toEqual([JSON.stringify(body), 400]);
    }
    const put = await t.req('PUT', '/agents/b', { base_url: `http://127.0.0.1:${PORT_B}`, token: '', role: { disk: true }, tags: ['storage', 'nvmet'] });
    expect(put.status).toBe(200);
    expect(t.read('config/agents.yml')).toContain('token: token-b');
    expect((await t.req('PUT', '/agents/nope', { base_url: 'http://x' })).status).toBe(404);
    const probe = await t.req('POST', '/agents/probe', { base_url: `http://127.0.0.1:${PORT_A}`, agent_id: 'a' });
    expect(probe.body).toEqual({
      base_url: `http://127.0.0.1:${PORT_A}`,
      role: { disk: true, cd: true },
      tags: ['storage', 'stgt'],
      iscsi_server: '127.0.0.1',
      enabled: true,
      backend: 'stgt',
      fs_type: expect.any(String),
      base_iqn: IQN,
      clone: expect.any(String),
      empty_disk: 'truncate (sparse)',
      persistent: expect.any(String),
    });
    expect((await t.req('POST', '/agents/probe', { base_url: `http://127.0.0.1:${PORT_A}`, token: 'wrong' })).status).toBe(502);
    expect((await t.req('POST', '/agents/probe', { base_url: `http://127.0.0.1:${PORT_FAKE + 1}` })).status).toBe(502);
    expect((await t.req('POST', '/agents/probe', { base_url: 'nope' })).status).toBe(400);

    // A stored token goes only to its own address, and a probe caches nothing (/boot-vars reads the cache).
    const seen: string[] = [];
    const other = http.createServer((req, res) => {
      seen.push(`${req.url} ${req.headers.authorization ?? '-'}`);
      res.setHeader('content-type', 'application/json');
      res.end(req.url === '/capabilities' ? JSON.stringify({ backend: 'stgt', base_iqn: 'iqn.2026-01.evil:x', cd: true, fs_type: 'btrfs', clone: 'reflink', empty_disk: 'truncate (sparse)', persistent: 'yes' }) : '{"status":"ok"}');
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', () => r()));
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      const agents = t.app.get(StorageNodesService);
      await t.req('GET', '/agents?live=true');
      const cachedA = agents.cachedCapabilities('a');
      expect(cachedA?.base_iqn).toBe(IQN);
      const stolen = await t.req('POST', '/agents/probe', { base_url: otherUrl, agent_id: 'a' });
      expect(stolen.status).toBe(400);
      expect(stolen.body.message).toMatch(/^base_url: http:\/\/127\.0\.0\.1:\d+ is not the registered address of a \(/);
      expect(seen).toEqual([]);
      const given = await t.req('POST', '/agents/probe', { base_url: otherUrl, agent_id: 'a', token: 'given' });
      expect([given.status, given.body.base_iqn]).toEqual([200, 'iqn.2026-01.evil:x']);
      expect(seen).toEqual(['/healthz Bearer given', '/capabilities Bearer given']);
      expect(agents.cachedCapabilities('a')).toEqual(cachedA);
      expect(agents.cachedCapabilities('probe')).toBeUndefined();
    } finally {
      other.closeAllConnections();
      await new Promise((r) => other.close(r));
    }
    // Token placeholders name token variables only, never the control plane's own configuration.
    for (const token of ['${IPXE_CP_DATABASE_URL}', '${IPXE_CP_TOKEN}', '${HOME}', 'x${PATH}']) {
      const r = await t.req('POST', '/agents', { id: 'leak', base_url: otherUrl, token });
      expect([token, r.status]).toEqual([token, 400]);
      expect(r.body.message).toMatch(/token: a \$\{VAR\} placeholder must name a variable ending in _TOKEN and not starting with IPXE_CP_/);
    }
    expect((await t.req('GET', '/agents?live=false')).body.map((a: { id: string }) => a.id)).toEqual(['a', 'b']);
  });

  it('one registration per address; DELETE /agents refused while workers have disks there, force removes the registration only; long host NQNs reach the agent', async () => {
    await register();
    const dup = await t.req('POST', '/agents', { id: 'a2', base_url: `http://127.0.0.1:${PORT_A}/`, role: { disk: true } });
    expect(dup.status).toBe(409);
    expect(dup.body.message).toBe(`base_url: http://127.0.0.1:${PORT_A} is already the address of agent a`);
    const moved = await t.req('PUT', '/agents/b', { base_url: `http://127.0.0.1:${PORT_A}`, role: { disk: true } });
    expect([moved.status, moved.body.message]).toEqual([409, `base_url: http://127.0.0.1:${PORT_A} is already the address of agent a`]);
    expect(t.read('config/agents.yml')).not.toContain('a2');

    await t.req('POST', '/workers', { worker_id: 'w9' });
    expect((await t.req('POST', '/workers/w9/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img', disk_agent: 'a' })).status).toBe(201);
    const before = t.read('config/agents.yml');
    const refused = await t.req('DELETE', '/agents/a');
    expect(refused.status).toBe(409);
    expect(refused.body.message).toBe('agent a holds 1 disk(s)/CD(s) of workers: w9/ubuntu; delete or move them first, or force=true to remove the registration and leave them unbootable');
    expect(t.read('config/agents.yml')).toBe(before);
    expect((await t.req('DELETE', '/agents/nope')).status).toBe(404);
    // An agent without disks goes at once; the target of w9 on a is never touched by a forced removal.
    expect((await t.req('DELETE', '/agents/b')).body).toEqual({ deleted: 'b', force: false, targets_left: [] });
    expect((await t.req('DELETE', '/agents/a?force=true')).body).toEqual({ deleted: 'a', force: true, targets_left: ['w9/ubuntu'] });
    expect((await t.req('GET', '/agents?live=false')).body).toEqual([]);
    expect(tgtd.show()).toContain(`${IQN}:w9.ubuntu`);
    const ops = (await t.req('GET', '/operations?op=agent.delete')).body.entries.map((e: any) => [e.agent, e.force, e.targets_left]);
    expect(ops).toEqual([
      ['b', false, 0],
      ['a', true, 1],
    ]);
    // Registered again under its id, the disk is bootable again (and cleaned up by afterEach).
    await register();

    // A host NQN longer than Fastify's default path-parameter limit (100) is answered by the agent itself.
    const host = `${NQN}:host.${'w'.repeat(150)}`;
    const r = await fetch(`http://127.0.0.1:${PORT_B}/nvme/hosts/${host}`, { method: 'DELETE', headers: { authorization: 'Bearer token-b' } });
    expect(r.status).toBe(404);
    expect(((await r.json()) as { message: string }).message).toMatch(/host/);
  });

  it('lists live health in parallel: a hanging agent costs one probe timeout, not the list', async () => {
    await register(true);
    await t.req('PUT', '/agents/b', { base_url: `http://127.0.0.1:${PORT_B}`, enabled: false, role: { disk: true } });
    const t0 = Date.now();
    const r = await t.req('GET', '/agents?live=true');
    const ms = Date.now() - t0;
    expect(ms).toBeLessThan(5000); // loose: the bench measures it; this only proves parallel + bounded
    const by = Object.fromEntries(r.body.map((a: any) => [a.id, a]));
    expect(by.a).toMatchObject({ health: 'ok', capabilities: { backend: 'stgt', base_iqn: IQN, cd: true } });
    expect(by.b).toMatchObject({ health: 'disabled', capabilities: null });
    expect(by.fake).toMatchObject({ health: 'unreachable', capabilities: null, error: expect.stringMatching(/timeout after 500 ms/) });
  });

  it('GET /masters: per-agent errors with an audit record, 502 when all fail, [] with none', async () => {
    expect((await t.req('GET', '/masters')).body).toEqual({ agents: [], catalog: [] });
    await register(true);
    const r = await t.req('GET', '/masters');
    expect(r.status).toBe(200);
    const by = Object.fromEntries(r.body.agents.map((a: any) => [a.agent, a]));
    expect(by.a.masters.map((m: any) => m.name)).toEqual(['_tpl_ubuntu_2204.img']);
    expect(by.a.iscsi_server).toBe('192.168.80.3');
    expect(by.b.masters.map((m: any) => m.name)).toEqual(['_tpl_debian_12.img', '_tpl_ubuntu_2204.img']);
    expect(by.fake).toMatchObject({ masters: [], error: expect.stringContaining('disk on fire') });
    expect((await t.req('GET', '/operations')).body.entries.find((e: any) => e.op === 'master.list')).toMatchObject({ status: 'failed', agent: 'fake' });
    for (const [id, off] of [['a', 2], ['b', 3]] as const) expect((await t.req('PUT', `/agents/${id}`, { base_url: `http://127.0.0.1:${PORT_FAKE + off}`, role: { disk: true } })).status).toBe(200);
    expect((await t.req('GET', '/masters')).status).toBe(502);
  });

  it('passes LUN calls through with role checks and the agent error shape; misbehaving agents map to 503/502', async () => {
    await register(true);
    const d = await t.req('POST', '/agents/a/luns/disk', { iqn: `${IQN}:manual.ubuntu`, size: '1G' });
    expect(d.status).toBe(201);
    expect(tgtd.show()).toContain(`${IQN}:manual.ubuntu`);
    const dup = await t.req('POST', '/agents/a/luns/disk', { iqn: `${IQN}:manual.ubuntu`, size: '1G' });
    expect([dup.status, dup.body.agent, dup.body.error]).toEqual([409, 'a', expect.stringMatching(/exists/)]);
    const mismatch = await t.req('POST', '/agents/a/luns/disk', { iqn: 'iqn.2026-07.com.other:x', size: '1G' });
    expect([mismatch.status, mismatch.body.agent, mismatch.body.error]).toEqual([400, 'a', expect.stringMatching(/^iqn base mismatch: /)]);
    expect((await t.req('GET', '/agents/a/luns')).body.map((l: any) => l.iqn)).toContain(`${IQN}:manual.ubuntu`);
    expect((await t.req('POST', '/agents/b/luns/cd', { iso: 'x.iso' })).body.message).toBe('agent b not configured for cd role');
    expect((await t.req('GET', '/agents/ghost/luns')).body.message).toBe('agent not found: ghost');
    const del = await t.req('DELETE', `/agents/a/luns?iqn=${IQN}:manual.ubuntu&delete_file=true`);
    expect(del.body).toEqual({ deleted: `${IQN}:manual.ubuntu`, delete_file: true });
    expect((await t.req('DELETE', `/agents/a/luns?iqn=${IQN}:manual.ubuntu`)).status).toBe(404);
    expect((await t.req('DELETE', `/agents/a/luns?iqn=${IQN}:manual.ubuntu&ignore_missing=true`)).body).toEqual({
      deleted: `${IQN}:manual.ubuntu`,
      delete_file: false,
      ignored_missing: true,
    });
    expect((await t.req('POST', '/agents/a/luns/scan')).status).toBe(200);
    // The fake agent: dropped connection, slow body (timeout), 5xx.
    const dropped = await t.req('GET', '/agents/fake/luns');
    expect([dropped.status, dropped.body.agent]).toEqual([503, 'fake']);
    const slow = await t.req('POST', '/agents/fake/luns/scan');
    expect([slow.status, slow.body.error]).toEqual([503, 'timeout after 3000 ms']);
    const ops = (await t.req('GET', '/operations')).body.entries.map((e: any) => `${e.op}:${e.status}`);
    expect(ops).toEqual(expect.arrayContaining(['agent.create_disk:ok', 'agent.create_disk:failed', 'agent.scan:failed']));
  });

  it('creates, projects, defaults and deletes worker disks on stgt; boot-vars follows', async () => {
    await register();
    await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
    await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
    const r = await t.req('POST', '/workers/w1/luns/disk', { type: 'master', os: 'Ubuntu', name: '_tpl_ubuntu_2204.img', disk_agent: 'a' });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ state: 'ready', readiness: 'ready', mac: '02:00:00:00:00:01' });
    expect(r.body.disks).toEqual([
      {
        agent: 'a',
        transport: 'iscsi',
        iqn: `${IQN}:w1.ubuntu`,
        filename: 'w1.ubuntu.img',
        backing: path.join(diskA, 'w1.ubuntu.img'),
        os: 'ubuntu',
        os_version: null,
        os_tag: expect.stringMatching(/^[0-9a-f]{12}$/),
        source: { type: 'master', name: '_tpl_ubuntu_2204.img', version: 1 },
        mode: 'persistent',
      },
    ]);
    expect(fs.readFileSync(path.join(diskA, 'w1.ubuntu.img')).subarray(0, 11).toString()).toBe('KURRENT-MBR');
    expect(tgtd.show()).toContain(`${IQN}:w1.ubuntu`);
    expect((await t.req('POST', '/workers/w1/luns/disk', { type: 'empty', os: 'ubuntu', size: '1G', disk_agent: 'a' })).status).toBe(409);
    const bv = await t.req('GET', '/boot-vars?mac=02:00:00:00:00:01&hostname=w1&format=json');
    // The agent's tgtd listens on another port than 3260: it goes into the separator (`:<proto>:<port>:<lun>:`).
    expect(bv.body).toEqual({ base_iqn: IQN, iscsi_server: '192.168.80.3', iscsi_sep: `::${CONTROL + 10000}:1:`, menu_default: 'reboot', menu_timeout: 1 });
    // readiness (the reference's projection) says ready; boot readiness says what /boot-vars does.
    const reasons = async () => ((await t.req('GET', '/workers/w1')).body.boot_readiness as { reasons: { code: string }[] }).reasons.map((x) => x.code);
    expect(r.body.boot_readiness).toEqual({ bootable: false, reasons: [{ code: 'no-default-disk', message: expect.stringContaining('menu-default reboot') }] });
    expect((await t.req('PUT', '/workers/w1/default-os', { os: 'windows' })).status).toBe(400);
    await t.req('PUT', '/workers/w1/default-os', { menu_default: 'exit' });
    expect(await reasons()).toEqual(['default-not-a-disk']);
    await t.req('PUT', '/workers/w1/default-os', { os: 'ubuntu', menu_default: 'ubuntu' });
    expect((await t.req('GET', '/workers')).body.find((w: any) => w.worker_id === 'w1').boot_readiness).toEqual({ bootable: true, reasons: [] });
    // Signature enforcement on a keyless device: /boot-vars would deny it.
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true, force: true })).status).toBe(200);
    expect(await reasons()).toEqual(['no-device-key']);
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: false })).status).toBe(200);
    expect(await reasons()).toEqual([]);
    // stgt closes the disk to the worker's initiator name and CHAP: iPXE gets the credential it answers with.
    const script = (await t.req('GET', '/boot-vars?mac=02:00:00:00:00:01&hostname=w1')).text;
    const secret = /^set password (\S+)$/m.exec(script)?.[1] ?? '';
    expect(secret).toMatch(/^[A-Za-z0-9_-]{24}$/);
    expect(script).toBe(
      `#!ipxe\n# boot vars for w1\nset base-iqn ${IQN}\nset iscsi-server 192.168.80.3\nset iscsi-sep ::${CONTROL + 10000}:1:\nset username w1\nset password ${secret}\nset menu-default ubuntu\nset menu-timeout 5000\n`,
    );
    expect(tgtd.show()).toMatch(new RegExp(`Target \\d+: ${IQN.replace(/\./g, '\\.')}:w1\\.ubuntu[\\s\\S]*?Account information:\\s+w1\\s+ACL information:\\s+${IQN.replace(/\./g, '\\.')}:w1\\n`));
    const menu = (await t.req('GET', '/boot-menu?mac=02:00:00:00:00:01&format=json')).body;
    expect(menu.items[0].root).toBe(`iscsi:192.168.80.3::${CONTROL + 10000}:1:${IQN}:w1.ubuntu`);
    // A disk open to every initiator (as earlier versions made stgt disks; here opened by hand) is
    // closed again by the next reconciler pass.
    const tid = /Target (\d+): \S+:w1\.ubuntu/.exec(tgtd.show())![1];
    execFileSync('tgtadm', ['-C', String(CONTROL), '--lld', 'iscsi', '--mode', 'target', '--op', 'unbind', '--tid', tid, '--initiator-name', `${IQN}:w1`]);
    execFileSync('tgtadm', ['-C', String(CONTROL), '--lld', 'iscsi', '--mode', 'target', '--op', 'bind', '--tid', tid, '--initiator-address', 'ALL']);
    const pass = (await t.req('POST', '/reconcile')).body.iscsi_access;
    expect(pass).toEqual([{ worker_id: 'w1', agent: 'a', iqn: `${IQN}:w1.ubuntu`, reason: 'drift' }]);
    expect(tgtd.show()).toMatch(new RegExp(`:w1\\.ubuntu[\\s\\S]*?ACL information:\\s+${IQN.replace(/\./g, '\\.')}:w1\\n(?!\\s+ALL)`));
    expect((await t.req('POST', '/reconcile')).body.iscsi_access).toEqual([]);
    const st = (await t.req('GET', '/workers/w1/status')).body.actual;
    expect(st.disks).toEqual([{ os: 'ubuntu', exists: true, target: { iqn: `${IQN}:w1.ubuntu`, luns: [{ backing: path.join(diskA, 'w1.ubuntu.img') }] } }]);
    const del = await t.req('DELETE', '/workers/w1/luns/disk/UBUNTU?delete_file=true');
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ state: 'registered', disks: [], default_os: null, boot: { menu_default: null } });
    expect(await reasons()).toEqual(['no-disk']);
    expect((await t.req('DELETE', '/devices/02:00:00:00:00:01/bind')).status).toBe(200);
    expect(await reasons()).toEqual(['no-bound-device', 'no-disk']);
    expect(fs.existsSync(path.join(diskA, 'w1.ubuntu.img'))).toBe(false);
    expect(tgtd.show()).not.toContain('w1.ubuntu');
    expect((await t.req('DELETE', '/workers/w1/luns/disk/ubuntu')).status).toBe(404);
    expect((await t.req('POST', '/workers/w1/luns/disk', { type: 'master', os: 'ubuntu' })).body.message).toBe('name: required when type=master');
    expect((await t.req('POST', '/workers/w1/luns/disk', { type: 'empty', os: 'plan9', size: '1G' })).status).toBe(400);
    expect((await t.req('POST', '/workers/nope/luns/disk', { type: 'empty', os: 'ubuntu', size: '1G' })).status).toBe(404);
  });

  it('places disks on the healthy agent holding the master with the fewest disks; nvmet disks get NQNs', async () => {
    await register();
    await t.req('POST', '/workers/batch', { count: 3 });
    // Only b holds the debian master.
    const deb = await t.req('POST', '/workers/worker-01/luns/disk', { type: 'master', os: 'debian', name: '_tpl_debian_12.img' });
    expect(deb.status).toBe(201);
    const disk = deb.body.disks[0];
    expect(disk).toMatchObject({ agent: 'b', transport: 'nvme-tcp', os: 'debian', filename: `worker-01.${disk.os_tag}.img` });
    expect(disk.nqn).toBe(`${NQN}:worker-01.${disk.os_tag}`);
    expect(fs.existsSync(path.join(dir, 'b/nvmet/subsystems', disk.nqn, 'namespaces/1/device_path'))).toBe(true);
    // Both hold ubuntu; b already has one disk, so a gets the next, then they alternate.
    const u1 = await t.req('POST', '/workers/worker-02/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img' });
    expect(u1.body.disks[0].agent).toBe('a');
    const u2 = await t.req('POST', '/workers/worker-03/luns/disk', { type: 'empty', os: 'ubuntu', size: '2G' });
    expect(['a', 'b']).toContain(u2.body.disks[0].agent);
    // Drained agents take no new disks.
    await t.req('PUT', '/agents/b', { base_url: `http://127.0.0.1:${PORT_B}`, role: { disk: true }, enabled: false });
    // Every enabled agent answered and none holds it: 404 naming the master (not a 503 that says retry).
    const none = await t.req('POST', '/workers/worker-03/luns/disk', { type: 'master', os: 'debian', name: '_tpl_debian_12.img' });
    expect([none.status, none.body.message]).toEqual([404, 'master not found on any enabled disk agent: _tpl_debian_12.img (a: does not hold it)']);
    // Sizes: one grammar (40G, 40GB, 40GiB); the range is checked before any agent is called.
    for (const size of ['2GB', '2GiB', '2g']) expect((await t.req('POST', '/workers/luns/disk/batch', { type: 'empty', os: 'centos', size, targets: [{ worker_id: 'worker-03' }], dry_run: true })).status).toBe(200);
    const big = await t.req('POST', '/workers/worker-03/luns/disk', { type: 'empty', os: 'centos', size: '65T' });
    expect([big.status, big.body.message]).toEqual([400, 'size: must be between 1M and 64T, got "65T"']);
    const odd = await t.req('POST', '/workers/worker-03/luns/disk', { type: 'empty', os: 'centos', size: '2 gigs' });
    expect([odd.status, odd.body.message]).toEqual([400, 'size: must be a size like 40G, 40GB, 40GiB, 512M or 1T']);
    // A worker id with '_' cannot name an iSCSI target: refused up front when only iSCSI agents could take it.
    await t.req('POST', '/workers', { worker_id: 'seat_07' });
    const us = await t.req('POST', '/workers/seat_07/luns/disk', { type: 'empty', os: 'centos', size: '1G', disk_agent: 'a' });
    expect([us.status, us.body.message]).toEqual([400, expect.stringMatching(/^worker_id: seat_07 contains '_', which iSCSI target names \(IQN\) cannot hold/)]);
    expect((await t.req('POST', '/workers/worker-03/luns/disk', { type: 'master', os: 'debian', name: '_tpl_debian_12.img', disk_agent: 'b' })).body.message).toMatch(/drained/);
  });

  it('batch: dry_run returns the plan and changes nothing; execution follows it and sets default_os', async () => {
    await register();
    await t.req('POST', '/workers/batch', { count: 4 });
    await t.req('POST', '/workers/worker-02/luns/disk', { type: 'empty', os: 'ubuntu', size: '1G', disk_agent: 'a' });
    const body = {
      type: 'master',
      os: 'ubuntu',
      name: '_tpl_ubuntu_2204.img',
      targets: [{ worker_id: 'worker-01', agent: 'a' }, { worker_id: 'worker-02', agent: 'a' }, { worker_id: 'worker-03' }, { worker_id: 'ghost', agent: 'a' }],
    };
    const before = t.snapshot();
    const plan = await t.req('POST', '/workers/luns/disk/batch', { ...body, dry_run: true });
    expect(plan.status).toBe(200);
    expect(t.snapshot()['state/workers.yml']).toBe(before['state/workers.yml']);
    expect(plan.body).toEqual({
      dry_run: true,
      succeeded: [
        { worker_id: 'worker-01', agent: 'a', iqn: `${IQN}:worker-01.ubuntu` },
        { worker_id: 'worker-03', agent: 'b', iqn: expect.stringMatching(new RegExp(`^${NQN}:worker-03\\.[0-9a-f]{12}$`)) },
      ],
      skipped: [{ worker_id: 'worker-02', reason: 'already has a ubuntu system disk' }],
      failed: [{ worker_id: 'ghost', agent: 'a', error: 'worker not found: ghost' }],
    });
    const run = await t.req('POST', '/workers/luns/disk/batch', body);
    expect(run.body.succeeded.map((s: any) => [s.worker_id, s.agent])).toEqual([
      ['worker-01', 'a'],
      ['worker-03', 'b'],
    ]);
    expect(run.body.skipped).toEqual(plan.body.skipped);
    expect(run.body.failed).toEqual(plan.body.failed);
    expect((await t.req('GET', '/workers/worker-01')).body).toMatchObject({ default_os: 'ubuntu', state: 'ready' });
    expect((await t.req('GET', '/workers/worker-02')).body.default_os).toBeNull();
  });

  it('windows_iso: CD target on the cd-role agent, state installing; worker delete removes CD then disks', async () => {
    await register();
    await t.req('POST', '/devices', { mac: '02:00:00:00:00:11' });
    const r = await t.req('POST', '/workers', { worker_id: 'win', mac: '02:00:00:00:00:11', windows_iso: 'Win11_24H2.iso', boot: { menu_default: 'menu-install', menu_timeout: 3000 } });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ state: 'installing', disks: [], cd: { agent: 'a', iqn: `${IQN}:win.windows.iso`, iso: 'Win11_24H2.iso', backing: path.join(diskA, 'Win11_24H2.iso') } });
    expect(tgtd.show()).toMatch(new RegExp(`${IQN}:win\\.windows\\.iso[\\s\\S]*Type: cd/dvd`));
    const d = await t.req('POST', '/workers/win/luns/disk', { type: 'empty', os: 'windows', size: '8G', disk_agent: 'a' });
    expect(d.body.state).toBe('installing');
    expect((await t.req('POST', '/workers', { worker_id: 'win2', windows_iso: 'Missing.iso' })).status).toBe(404);
    expect((await t.req('GET', '/workers/win2')).status).toBe(404);
    const del = await t.req('DELETE', '/workers/win?delete_disk=true');
    expect(del.body).toEqual({ deleted: 'win', delete_disk: true, dnsmasq_removed: true });
    expect(tgtd.show()).not.toContain('win.');
    expect(fs.existsSync(path.join(diskA, 'Win11_24H2.iso'))).toBe(true); // the shared ISO stays
    expect(fs.existsSync(path.join(diskA, 'win.windows.img'))).toBe(false);
    const ops = (await t.req('GET', '/operations')).body.entries.filter((e: any) => e.op === 'agent.delete_disk').map((e: any) => e.iqn);
    expect(ops).toEqual([`${IQN}:win.windows.iso`, `${IQN}:win.windows`]);
  });

  it('a missing target blocks deletion unless ignore_missing_target; status shows it gone', async () => {
    await register();
    await t.req('POST', '/workers/batch', { count: 2 });
    await t.req('POST', '/workers/luns/disk/batch', { type: 'empty', os: 'ubuntu', size: '1G', targets: [{ worker_id: 'worker-01', agent: 'a' }, { worker_id: 'worker-02', agent: 'a' }] });
    await t.req('DELETE', `/agents/a/luns?iqn=${IQN}:worker-01.ubuntu`);
    expect((await t.req('GET', '/workers/worker-01/status')).body.actual.disks).toEqual([{ os: 'ubuntu', exists: false, target: null }]);
    const blocked = await t.req('DELETE', '/workers/worker-01');
    expect([blocked.status, blocked.body.agent]).toEqual([404, 'a']);
    expect((await t.req('GET', '/workers/worker-01')).status).toBe(200);
    const r = await t.req('POST', '/workers/delete/batch', { worker_ids: ['worker-01', 'worker-02'], ignore_missing_target: true, delete_disk: true });
    expect(r.body.succeeded.map((s: any) => s.worker_id)).toEqual(['worker-01', 'worker-02']);
    expect(tgtd.show()).not.toContain('worker-02.ubuntu');
  });

  it('a worker deleted while its disk is being created leaves no orphan target', async () => {
    await register();
    await t.req('POST', '/workers/batch', { count: 3 });
    const results = await Promise.all([
      t.req('POST', '/workers/worker-01/luns/disk', { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu_2204.img', disk_agent: 'a' }),
      t.req('DELETE', '/workers/worker-01?delete_disk=true'),
      t.req('POST', '/workers/luns/disk/batch', { type: 'empty', os: 'debian', size: '1G', targets: [{ worker_id: 'worker-02', agent: 'a' }, { worker_id: 'worker-03', agent: 'a' }] }),
      t.req('POST', '/workers/delete/batch', { worker_ids: ['worker-02', 'worker-03'], delete_disk: true }),
    ]);
    expect(results.map((r) => r.status).every((s) => s < 500)).toBe(true);
    const ledger = (await t.req('GET', '/workers')).body;
    const targets = (await t.req('GET', '/agents/a/luns')).body.filter((l: any) => !l.cd).map((l: any) => l.iqn);
    const recorded = ledger.flatMap((w: any) => w.disks.map((d: any) => d.iqn));
    expect(targets.sort()).toEqual(recorded.sort()); // every target is in the ledger and vice versa
  });

  itFiles('a disk whose ledger write fails leaves no target behind', async () => {
    await register();
    await t.req('POST', '/workers', { worker_id: 'w9' });
    const fsys = t.app.get(FileSystem);
    const orig = fsys.appendDurable.bind(fsys);
    // The commit point is the change-log append: make it hit a full disk.
    fsys.appendDurable = async (file: string, data: string | Buffer) => {
      if (file.endsWith('ledger.wal')) throw Object.assign(new Error('ENOSPC: no space left on device (injected)'), { code: 'ENOSPC' });
      return orig(file, data);
    };
    const r = await t.req('POST', '/workers/w9/luns/disk', { type: 'empty', os: 'ubuntu', size: '1G', disk_agent: 'a' });
    fsys.appendDurable = orig;
    expect(r.status).toBe(507);
    expect(r.body.message).toMatch(/no space left writing .*ledger\.wal.*nothing was changed.*; the agent target was removed again/);
    expect(tgtd.show()).not.toContain('w9.ubuntu');
    expect(fs.existsSync(path.join(diskA, 'w9.ubuntu.img'))).toBe(false);
    expect((await t.req('GET', '/workers/w9')).body.disks).toEqual([]);
    const ops = (await t.req('GET', '/operations')).body.entries.filter((e: any) => e.op === 'agent.delete_disk');
    expect(ops.pop()).toMatchObject({ status: 'ok', iqn: `${IQN}:w9.ubuntu`, reason: 'rollback: ledger write failed' });
  });
});
