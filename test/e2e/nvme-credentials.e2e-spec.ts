import { execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Clock } from '../../src/control-plane/common/clock';
import { readCredentialsOnDisk } from '../../src/control-plane/repositories/credentials/file-credential.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { deriveCtrlKey, deriveTlsPsk, dhchapKeyBytes } from '../../src/shared/nvme-keys';
import { listTree, makeFile, spawnAgent, SpawnedAgent } from '../helpers/agent';
import { describeFiles, freePort, onPostgres, Res, startApp, tempDir, TestApp } from '../helpers/app';

/**
 * NVMe/TCP credentials end to end: a control plane (in process, clock injected) and a real agent
 * process on the nvmet backend against a configfs-shaped temp root. Formats are cross-checked
 * with Debian's nvme-cli and the PSK derivation with OpenSSL's HKDF.
 */

const NQN = 'nqn.2026-07.com.controller';
const HOSTNQN = `${NQN}:host.w1`;
const MAC = '02:00:00:00:10:01';

const nvme = (...args: string[]) => execFileSync('nvme', args, { encoding: 'utf8' }).trim();

class NvmetNode {
  agent: SpawnedAgent | null = null;
  readonly root: string;
  readonly disks: string;
  readonly state: string;
  constructor(
    readonly dir: string,
    readonly port: number,
  ) {
    this.root = path.join(dir, 'nvmet');
    this.disks = path.join(dir, 'images');
    this.state = path.join(dir, 'state');
    fs.mkdirSync(this.disks, { recursive: true });
  }
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  async start(): Promise<void> {
    this.agent = await spawnAgent({
      IPXE_AGENT_PORT: String(this.port),
      IPXE_AGENT_BACKEND: 'nvmet',
      IPXE_AGENT_CONFIGFS_ROOT: this.root,
      IPXE_AGENT_TOKEN: 'node-token',
      IPXE_AGENT_LOG_LEVEL: 'debug',
      DISK_DIR: this.disks,
      IPXE_AGENT_STATE_DIR: this.state,
    });
  }
  async stop(): Promise<void> {
    await this.agent?.stop();
  }
  /** What the agent wrote for a host: configfs files, its 0600 state entry. */
  host(hostnqn = HOSTNQN): { key: string | null; links: string[]; state: { dhchap_key: string; tls_psk: string } | undefined } {
    const keyFile = path.join(this.root, 'hosts', hostnqn, 'dhchap_key');
    const links: string[] = [];
    for (const s of fs.existsSync(path.join(this.root, 'subsystems')) ? fs.readdirSync(path.join(this.root, 'subsystems')) : []) {
      if (fs.existsSync(path.join(this.root, 'subsystems', s, 'allowed_hosts', hostnqn))) links.push(s);
    }
    const stateFile = path.join(this.state, 'nvme-hosts.json');
    const state = fs.existsSync(stateFile) ? JSON.parse(fs.readFileSync(stateFile, 'utf8'))[hostnqn] : undefined;
    return { key: fs.existsSync(keyFile) ? fs.readFileSync(keyFile, 'utf8').trim() : null, links, state };
  }
  async api(method: string, p: string, body?: unknown): Promise<{ status: number; body: any }> {
    const r = await fetch(this.url + p, {
      method,
      headers: { authorization: 'Bearer node-token', ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: r.status, body: await r.json() };
  }
}

/** The control plane's secret file (the test may read it; nothing else may show it). */
const secretOf = (t: TestApp, id = 'w1'): string => JSON.parse(t.read('state/nvme-credentials.json')).credentials[id]?.dhchap_key;

describe('NVMe/TCP credentials, boot variables and the reconciler (real nvmet agent process)', () => {
  const dir = tempDir('kurrent-nvme-');
  let node: NvmetNode;
  let t: TestApp;
  let now = Date.parse('2026-12-01T10:00:00Z');
  const seen: Res[] = [];
  const secrets = new Set<string>();
  const req = async (method: string, url: string, body?: unknown) => {
    const r = await t.req(method, url, body);
    seen.push(Object.assign(r, { url }));
    return r;
  };
  const remember = () => {
    const data = JSON.parse(t.read('state/nvme-credentials.json'));
    for (const c of Object.values<any>(data.credentials)) {
      secrets.add(c.dhchap_key);
      secrets.add(deriveTlsPsk(c.dhchap_key, c.hostnqn));
    }
  };
  const bootVars = async () => (await req('GET', `/boot-vars?mac=${MAC}&format=json`)).body;
  const cred = async () => (await req('GET', '/workers/w1/credential')).body;
  const reconcile = async () => {
    const r = await req('POST', '/reconcile');
    expect(r.status).toBe(200);
    remember();
    return r.body;
  };

  beforeAll(async () => {
    node = new NvmetNode(path.join(dir, 'node'), await freePort());
    makeFile(path.join(node.disks, '_tpl_ubuntu_2204.img'), 64 << 20, [{ offset: 510, bytes: Buffer.from([0x55, 0xaa]) }]);
    await node.start();
    t = await startApp({ IPXE_CP_TOKEN: 'cp-token', IPXE_CP_RECONCILE_SECONDS: '0', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '3000', NODE_TOKEN: 'node-token' }, { dir: path.join(dir, 'cp') });
    t.app.get(Clock).now = () => new Date(now);
    expect((await req('POST', '/agents', { id: 'n1', base_url: node.url, token: '${NODE_TOKEN}', iscsi_server: '192.168.80.3', role: { disk: true }, tags: ['storage', 'nvmet'] })).status).toBe(201);
    expect((await req('POST', '/devices', { mac: MAC })).status).toBe(201);
    expect((await req('POST', '/workers', { worker_id: 'w1', mac: MAC })).status).toBe(201);
  });

  afterAll(async () => {
    await t?.close();
    await node?.stop();
  });

  let tag = '';
  let subsystem = '';

  it('issues a credential with the first NVMe disk, pushes it, and the subsystem allows exactly that host', async () => {
    const r = await req('POST', '/workers/w1/luns/disk', { type: 'master', name: '_tpl_ubuntu_2204.img', os: 'ubuntu', os_version: '22.04' });
    expect(r.status).toBe(201);
    const disk = r.body.disks[0];
    tag = disk.os_tag;
    subsystem = `${NQN}:w1.${tag}`;
    expect(disk).toMatchObject({ transport: 'nvme-tcp', nqn: subsystem, os: 'ubuntu', os_version: '22.04', os_tag: expect.stringMatching(/^[0-9a-f]{12}$/) });
    remember();

    const c = await cred();
    expect(c).toEqual({
      worker_id: 'w1',
      hostnqn: HOSTNQN,
      dhchap_key_sha256: expect.stringMatching(/^[0-9a-f]{12}$/),
      tls_psk_sha256: expect.stringMatching(/^[0-9a-f]{12}$/),
      issued_at: '2026-12-01T10:00:00+00:00',
      revoked: false,
      revoked_at: null,
      agents: [{ agent: 'n1', state: 'pushed', attempts: 0, last_error: null, last_attempt_at: '2026-12-01T10:00:00+00:00', next_attempt_at: null }],
    });

    // What the kernel would see: the host with its key, the subsystem closed but for that host, TLS on 4421.
    const secret = secretOf(t);
    expect(node.host()).toEqual({ key: secret, links: [subsystem], state: expect.objectContaining({ dhchap_key: secret, tls_psk: deriveTlsPsk(secret, HOSTNQN), dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'ffdhe2048' }) });
    expect(listTree(path.join(node.root, 'subsystems', subsystem))).toEqual([
      'allowed_hosts/',
      `allowed_hosts/${HOSTNQN} -> ../../../hosts/${HOSTNQN}`,
      'attr_allow_any_host=0',
      'namespaces/',
      'namespaces/1/',
      `namespaces/1/device_path=${path.join(node.disks, `w1.${tag}.img`)}`,
      'namespaces/1/enable=1',
    ]);
    expect(listTree(path.join(node.root, 'ports/1')).filter((l) => /trsvcid|tsas|treq/.test(l))).toEqual(['addr_treq=required', 'addr_trsvcid=4421', 'addr_tsas=tls1.3']);
    // The secret files: 0600 on both sides (on PostgreSQL the control plane's side is the credentials table).
    // Files: the checkpoint and its log (the log alone until the first checkpoint).
    if (!onPostgres()) {
      const secretFiles = ['nvme-credentials.json', 'nvme-credentials.wal'].map((f) => path.join(t.dir, 'state', f)).filter((f) => fs.existsSync(f));
      expect(secretFiles.length).toBeGreaterThan(0);
      for (const f of secretFiles) expect(fs.statSync(f).mode & 0o777).toBe(0o600);
    }
    expect(fs.statSync(path.join(node.state, 'nvme-hosts.json')).mode & 0o777).toBe(0o600);
    // The agent shows the same hash prefix the control plane does.
    expect((await node.api('GET', '/nvme/hosts')).body).toEqual([expect.objectContaining({ hostnqn: HOSTNQN, dhchap_key_sha256: c.dhchap_key_sha256, tls_psk_sha256: c.tls_psk_sha256, subsystems: [subsystem] })]);
    const ops = (await req('GET', '/operations?limit=50')).body.entries.map((e: { op: string }) => e.op);
    expect(ops).toEqual(expect.arrayContaining(['credential.issue', 'credential.push', 'worker.disk.create']));
  });

  it('formats: the secret is DHHC-1 with its CRC-32 and the PSK passes `nvme check-tls-key`; the derivation matches OpenSSL HKDF', () => {
    const secret = secretOf(t);
    expect(secret).toMatch(/^DHHC-1:00:[A-Za-z0-9+/]{48}:$/);
    const psk = deriveTlsPsk(secret, HOSTNQN);
    const crc = Buffer.from(psk.split(':')[2], 'base64').subarray(32).readUInt32LE(0).toString(16).padStart(8, '0');
    expect(nvme('check-tls-key', '-k', psk)).toBe(`Key is valid (HMAC 1, length 32, CRC ${crc})`);
    // HKDF-Expand-Label(HKDF-Extract(0, key), "HostNQN", hostnqn, 32), computed by OpenSSL.
    const label = Buffer.from('tls13 HostNQN');
    const info = Buffer.concat([Buffer.from([0, 32, label.length]), label, Buffer.from([HOSTNQN.length]), Buffer.from(HOSTNQN)]);
    const out = execFileSync('openssl', ['kdf', '-keylen', '32', '-kdfopt', 'digest:SHA256', '-kdfopt', `hexkey:${dhchapKeyBytes(secret).toString('hex')}`, '-kdfopt', `hexinfo:${info.toString('hex')}`, 'HKDF'], { encoding: 'utf8' });
    expect(Buffer.from(psk.split(':')[2], 'base64').subarray(0, 32).toString('hex')).toBe(out.trim().replace(/:/g, '').toLowerCase());
  });

  it('/boot-vars hands out NVMe variables only for the chosen default disk, never iSCSI ones; /boot-menu lists it', async () => {
    // No default yet: the reboot loop, and no secret.
    expect(await bootVars()).toEqual({ menu_default: 'reboot', menu_timeout: 1 });
    const set = await req('PUT', '/workers/w1/default-disk', { os_tag: tag });
    expect([set.status, set.body.default_disk, set.body.default_os]).toEqual([200, tag, 'ubuntu']);
    const psk = deriveTlsPsk(secretOf(t), HOSTNQN);
    const ctrl = deriveCtrlKey(secretOf(t), HOSTNQN);
    expect(await bootVars()).toEqual({
      disk_nqn: subsystem, storager_ip: '192.168.80.3', nvme_port: 4421, hostnqn: HOSTNQN, tls_psk: psk, dhchap_secret: secretOf(t), dhchap_ctrl_secret: ctrl,
      menu_default: `ubuntu-${tag}`, menu_timeout: 5000,
    });
    const text = (await req('GET', `/boot-vars?mac=${MAC}`)).text;
    expect(text).toBe(
      `#!ipxe\n# boot vars for w1\nset disk-nqn ${subsystem}\nset storager-ip 192.168.80.3\nset nvme-port 4421\nset hostnqn ${HOSTNQN}\nset tls-psk ${psk}\n` +
        `set dhchap-secret ${secretOf(t)}\nset dhchap-ctrl-secret ${ctrl}\nset menu-default ubuntu-${tag}\nset menu-timeout 5000\n`,
    );
    expect(text).not.toMatch(/base-iqn|iscsi/);
    // The PSK only to the bound MAC: a hostname alone (guessable) or with another MAC gets nothing.
    expect((await req('GET', '/boot-vars?hostname=w1')).text).toBe('#!ipxe\n# no per-worker boot vars found\n');
    expect((await req('GET', '/boot-vars?hostname=w1&format=json')).body).toEqual({});
    for (const other of [(await req('GET', '/boot-vars?hostname=w1&mac=02:00:00:00:10:99')).text, JSON.stringify((await req('GET', '/boot-vars?hostname=w1&format=json')).body)]) {
      for (const secret of [psk, secretOf(t), ctrl]) expect(other).not.toContain(secret);
    }
    expect((await req('GET', `/boot-vars?hostname=w1&mac=${MAC}&format=json`)).body.tls_psk).toBe(psk);
    expect((await req('GET', '/operations?op=boot.denied')).body.entries.pop()).toMatchObject({ worker_id: 'w1', reason: 'secret-bearing boot vars need the bound mac' });
    expect((await req('GET', `/boot-menu?mac=${MAC}`)).text).toBe(
      `#!ipxe\n# boot menu for w1\nset menu-count 1\nset menu-0-id ubuntu-${tag}\nset menu-0-label ubuntu 22.04 (nvme ${tag})\nset menu-0-root nvme://192.168.80.3:4421/${subsystem}\n`,
    );
    // default-os keeps working and sets the same field.
    expect((await req('PUT', '/workers/w1/default-os', { os: null })).body).toMatchObject({ default_os: null, default_disk: null });
    expect(await bootVars()).toEqual({ menu_default: 'reboot', menu_timeout: 1 });
    expect((await req('PUT', '/workers/w1/default-os', { os: 'ubuntu' })).body).toMatchObject({ default_os: 'ubuntu', default_disk: tag });
    expect((await bootVars()).tls_psk).toBe(psk);
    const bad = await req('PUT', '/workers/w1/default-disk', { os_tag: '000000000000' });
    expect([bad.status, bad.body.message]).toEqual([400, expect.stringMatching(/^os_tag: 000000000000 is not a disk of w1/)]);
    expect((await req('PUT', '/workers/w1/default-disk', { os_tag: 'nope' })).status).toBe(400);
  });

  it('rotation while the agent is down: failed with growing backoff (injected clock), pushed after one pass once it is back', async () => {
    const before = await cred();
    await node.stop();
    const r = await req('PUT', '/workers/w1/credential', { generate: true });
    remember();
    expect(r.status).toBe(200);
    expect(r.text).not.toContain(secretOf(t));
    expect(r.body.dhchap_key_sha256).not.toBe(before.dhchap_key_sha256);
    expect(r.body.tls_psk_sha256).not.toBe(before.tls_psk_sha256);
    expect(r.body.agents).toEqual([expect.objectContaining({ agent: 'n1', state: 'failed', attempts: 1, last_error: expect.stringMatching(/unavailable/) })]);
    // Not pushed: no boot with a key the agent does not hold, and no fallback.
    expect(await bootVars()).toEqual({});
    // The script carries no variable, and the reason for the console.
    const blocked = (await req('GET', `/boot-vars?mac=${MAC}`)).text;
    expect(blocked.startsWith('#!ipxe\n# no per-worker boot vars found\n')).toBe(true);
    expect(blocked).not.toMatch(/^set /m);
    expect(blocked).toContain("\necho Kurrent: the default disk does not boot now: the worker's current credential is not yet on the disk's agent (the reconciler pushes it)\n");

    // Backoff: a pass before next_attempt_at does nothing; after it, one attempt more and a longer wait.
    const gaps: number[] = [];
    let last = r.body.agents[0];
    gaps.push(Date.parse(last.next_attempt_at) - now);
    expect((await reconcile()).not_due).toBe(1);
    expect((await cred()).agents[0].attempts).toBe(1);
    for (const attempts of [2, 3]) {
      now = Date.parse(last.next_attempt_at) + 1;
      const pass = await reconcile();
      expect(pass).toMatchObject({ agents_unreachable: ['n1'], failed: [expect.objectContaining({ worker_id: 'w1', agent: 'n1' })] });
      last = (await cred()).agents[0];
      expect(last).toMatchObject({ state: 'failed', attempts });
      gaps.push(Date.parse(last.next_attempt_at) - now);
    }
    // base 30 s (IPXE_CP_RECONCILE_SECONDS unset = 30) doubling, plus up to 25% jitter.
    gaps.forEach((g, i) => {
      expect(g).toBeGreaterThanOrEqual(30_000 * 2 ** i);
      expect(g).toBeLessThanOrEqual(30_000 * 2 ** i * 1.25 + 1000); // + rounding up to whole seconds
    });

    await node.start();
    const pass = await reconcile(); // no clock change: the agent answering again makes it due
    expect(pass).toMatchObject({ agents_checked: ['n1'], pushed: [{ worker_id: 'w1', agent: 'n1', hostnqn: HOSTNQN, reason: 'retry' }], failed: [] });
    expect((await cred()).agents).toEqual([expect.objectContaining({ state: 'pushed', attempts: 0, last_error: null, next_attempt_at: null })]);
    expect(node.host().key).toBe(secretOf(t));
    expect((await bootVars()).tls_psk).toBe(deriveTlsPsk(secretOf(t), HOSTNQN));
    const audit = t.read('state/operations.jsonl');
    expect(audit).toContain('"op":"credential.rotate"');
    expect(audit.match(/"op":"credential\.push"[^\n]*"status":"failed"/g)?.length).toBeGreaterThanOrEqual(1);
  });

  it('an agent that restarts with empty state (state dir and configfs gone) gets the host and its link again in one pass', async () => {
    await node.stop();
    fs.rmSync(node.state, { recursive: true, force: true });
    fs.rmSync(node.root, { recursive: true, force: true });
    await node.start();
    // The start scan rebuilt the subsystem from its image, closed (no host).
    expect(node.host()).toEqual({ key: null, links: [], state: undefined });
    expect(fs.readFileSync(path.join(node.root, 'subsystems', subsystem, 'attr_allow_any_host'), 'utf8').trim()).toBe('0');
    // Until the reconciler notices, the record still says pushed; the pass finds the drift.
    const pass = await reconcile();
    expect(pass.pushed).toEqual([expect.objectContaining({ worker_id: 'w1', agent: 'n1', reason: 'drift' })]);
    expect(node.host()).toMatchObject({ key: secretOf(t), links: [subsystem] });
    // Another key on the agent (a hand edit) is drift too.
    const other = nvme('gen-dhchap-key');
    expect((await node.api('PUT', `/nvme/hosts/${HOSTNQN}`, { dhchap_key: other, dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null', subsystems: [] })).status).toBe(200);
    expect((await reconcile()).pushed).toEqual([expect.objectContaining({ reason: 'drift' })]);
    expect(node.host()).toMatchObject({ key: secretOf(t), links: [subsystem] });
    expect((await reconcile()).pushed).toEqual([]); // converged
    // Passes never overlap: a second caller joins the running pass and gets its result.
    expect((await node.api('DELETE', `/nvme/hosts/${HOSTNQN}`)).status).toBe(200);
    const [a, b] = await Promise.all([reconcile(), reconcile()]);
    expect(a).toEqual(b);
    expect(a.pushed).toEqual([expect.objectContaining({ reason: 'drift' })]);
    expect(node.host()).toMatchObject({ key: secretOf(t), links: [subsystem] });
  });

  it('a given secret from `nvme gen-dhchap-key` is accepted; malformed ones are refused naming the field, nothing changes', async () => {
    const given = nvme('gen-dhchap-key', '-n', HOSTNQN, '-m', '1');
    secrets.add(given);
    const before = await cred();
    const raw = Buffer.from(given.split(':')[2], 'base64');
    raw[3] ^= 1;
    const broken = `DHHC-1:01:${raw.toString('base64')}:`;
    secrets.add(broken);
    for (const [body, msg] of [
      [{ dhchap_key: broken }, /^dhchap_key: CRC-32 does not match$/],
      [{ dhchap_key: 'DHHC-1:01:AAAA:' }, /^dhchap_key: /],
      [{ generate: true, dhchap_key: given }, /exactly one of generate/],
      [{}, /exactly one of generate/],
      [{ generate: false }, /^generate: must be true/],
      [{ generate: true, extra: 1 }, /extra/],
    ] as const) {
      const r = await req('PUT', '/workers/w1/credential', body);
      expect([r.status, r.body.message]).toEqual([400, expect.stringMatching(msg)]);
    }
    expect(await cred()).toEqual(before);
    expect((await req('PUT', '/workers/nobody/credential', { generate: true })).status).toBe(404);
    const r = await req('PUT', '/workers/w1/credential', { dhchap_key: given });
    expect([r.status, r.body.agents[0].state]).toEqual([200, 'pushed']);
    expect(secretOf(t)).toBe(given);
    expect(node.host().key).toBe(given);
    expect(nvme('check-tls-key', '-k', deriveTlsPsk(given, HOSTNQN))).toMatch(/^Key is valid \(HMAC 1, length 32/);
    remember();
  });

  it('revoke: /boot-vars is empty at once and the host leaves the agent; PUT generate lifts it', async () => {
    const r = await req('DELETE', '/workers/w1/credential');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ revoked: true, revoked_at: expect.any(String), agents: [] });
    expect(await bootVars()).toEqual({});
    expect((await req('GET', `/boot-menu?mac=${MAC}&format=json`)).body).toEqual({ items: [] });
    expect(node.host()).toEqual({ key: null, links: [], state: undefined });
    expect(fs.existsSync(path.join(node.root, 'subsystems', subsystem))).toBe(true); // the disk stays, closed
    expect((await reconcile()).pushed).toEqual([]); // revoked stays revoked
    const again = await req('PUT', '/workers/w1/credential', { generate: true });
    remember();
    expect(again.body).toMatchObject({ revoked: false, revoked_at: null, agents: [expect.objectContaining({ state: 'pushed' })] });
    expect((await bootVars()).tls_psk).toBe(deriveTlsPsk(secretOf(t), HOSTNQN));
  });

  it('a second disk on the agent adds a link, deleting it removes the link; deleting the default disk clears default_disk', async () => {
    const r = await req('POST', '/workers/w1/luns/disk', { type: 'master', name: '_tpl_ubuntu_2204.img', os: 'ubuntu', os_version: '24.04' });
    expect(r.status).toBe(201);
    const tag2 = r.body.disks.find((d: { os_version: string }) => d.os_version === '24.04').os_tag;
    const sub2 = `${NQN}:w1.${tag2}`;
    expect(node.host().links.sort()).toEqual([subsystem, sub2].sort());
    const menu = (await req('GET', `/boot-menu?mac=${MAC}&format=json`)).body.items.map((i: { id: string }) => i.id);
    expect(menu).toEqual([`ubuntu-${tag}`, `ubuntu-${tag2}`]);
    // default-os is ambiguous now: the answer says to choose by os_tag.
    const amb = await req('PUT', '/workers/w1/default-os', { os: 'ubuntu' });
    expect([amb.status, amb.body.message]).toEqual([400, expect.stringMatching(/default-disk/)]);
    expect((await req('DELETE', `/workers/w1/luns/disk/ubuntu?os_version=24.04&delete_file=true`)).status).toBe(200);
    expect(node.host().links).toEqual([subsystem]);
    const del = await req('DELETE', `/workers/w1/luns/disk/ubuntu?os_version=22.04&delete_file=true`);
    expect(del.body).toMatchObject({ disks: [], default_disk: null, default_os: null });
    // The worker's last disk on the agent is gone: so is its host there.
    expect(node.host()).toEqual({ key: null, links: [], state: undefined });
    expect((await cred()).agents).toEqual([]);
  });

  it('worker delete: credential and pushes go, the host leaves the agent; a refused removal waits in the queue for the reconciler; orphans of ours go, foreign hosts stay', async () => {
    const r = await req('POST', '/workers/w1/luns/disk', { type: 'master', name: '_tpl_ubuntu_2204.img', os: 'ubuntu' });
    expect(r.status).toBe(201);
    remember();
    expect(node.host().links).toHaveLength(1);
    // The kernel refuses the host's rmdir (as nvmet does while a controller holds it): the agent answers 500.
    const busy = path.join(node.root, 'hosts', HOSTNQN, 'busy');
    fs.mkdirSync(busy);
    expect((await req('DELETE', '/workers/w1?delete_disk=true')).status).toBe(200);
    expect((await req('GET', '/workers/w1/credential')).status).toBe(404);
    // Push bookkeeping is written shortly after (production defaults: within 200 ms): poll for it.
    let file = JSON.parse(t.read('state/nvme-credentials.json'));
    for (const end = Date.now() + 5_000; Date.now() < end && file.removals[0]?.attempts !== 1; await new Promise((r) => setTimeout(r, 20))) file = JSON.parse(t.read('state/nvme-credentials.json'));
    expect([file.credentials, file.removals]).toEqual([{}, [expect.objectContaining({ worker_id: 'w1', hostnqn: HOSTNQN, agent: 'n1', attempts: 1, last_error: expect.stringMatching(/^agent n1: internal error \(error_id /) })]]);
    expect((await reconcile()).not_due).toBe(1); // backoff
    fs.rmdirSync(busy);
    // A host of ours nobody wants (another control plane's leftover) and a foreign one.
    const stray = `${NQN}:host.ghost`;
    const foreign = 'nqn.2014-08.org.nvmexpress:uuid:5b8f1d2c-1111-2222-3333-444455556666';
    for (const h of [stray, foreign]) expect((await node.api('PUT', `/nvme/hosts/${h}`, { dhchap_key: nvme('gen-dhchap-key'), dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'null' })).status).toBe(200);
    now = Date.parse(file.removals[0].next_attempt_at) + 1;
    const pass = await reconcile();
    expect(pass.removed.map((x: { hostnqn: string }) => x.hostnqn).sort()).toEqual([HOSTNQN, stray].sort());
    expect((await node.api('GET', '/nvme/hosts')).body.map((h: { hostnqn: string }) => h.hostnqn)).toEqual([foreign]);
    let removals = JSON.parse(t.read('state/nvme-credentials.json')).removals;
    for (const end = Date.now() + 5_000; Date.now() < end && removals.length; await new Promise((r) => setTimeout(r, 20))) removals = JSON.parse(t.read('state/nvme-credentials.json')).removals;
    expect(removals).toEqual([]);
    expect(fs.readdirSync(path.join(node.root, 'subsystems'))).toEqual([]);
    const audit = t.read('state/operations.jsonl');
    expect(audit).toContain('"op":"credential.delete"');
    expect(audit).toMatch(/"op":"credential\.remove"[^\n]*"reason":"orphan/);
  });

  it('no secret in any response but /boot-vars, in operations.jsonl or in the agent log', () => {
    expect(secrets.size).toBeGreaterThanOrEqual(8);
    const haystacks: [string, string][] = [
      ['operations.jsonl', t.read('state/operations.jsonl')],
      ['agent output', node.agent!.output()],
      ...seen.filter((r) => !(r as Res & { url: string }).url.startsWith('/boot-vars')).map((r) => [(r as Res & { url: string }).url, r.text] as [string, string]),
    ];
    for (const s of secrets) {
      const b64 = s.split(':')[2];
      for (const [where, text] of haystacks) {
        if (text.includes(b64)) throw new Error(`a secret appears in ${where}`);
      }
    }
  });
});

describe('the scheduled reconciler in a control plane process (IPXE_CP_RECONCILE_SECONDS=1), its log checked for secrets', () => {
  const dir = tempDir('kurrent-nvme-proc-');
  let node: NvmetNode;

  it('pushes a rotation made while the agent was down without anyone calling /reconcile', async () => {
    node = new NvmetNode(path.join(dir, 'node'), await freePort());
    makeFile(path.join(node.disks, '_tpl_debian_12.img'), 64 << 20, [{ offset: 510, bytes: Buffer.from([0x55, 0xaa]) }]);
    await node.start();
    const port = await freePort();
    const proc = spawn(process.execPath, [path.join(__dirname, '../../dist/src/control-plane/main.js')], {
      env: {
        PATH: process.env.PATH,
        IPXE_CP_PORT: String(port),
        IPXE_CP_HOST: '127.0.0.1',
        IPXE_CP_CONFIG_DIR: path.join(dir, 'cp/config'),
        IPXE_CP_STATE_DIR: path.join(dir, 'cp/state'),
        IPXE_CP_DNSMASQ_DIR: path.join(dir, 'cp/dnsmasq'),
        IPXE_CP_TOKEN: 'cp-token',
        IPXE_CP_LOG_LEVEL: 'debug',
        IPXE_CP_ACCESS_LOG: 'true',
        IPXE_CP_RECONCILE_SECONDS: '1',
        IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '3000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    proc.stdout!.on('data', (b) => (log += b));
    proc.stderr!.on('data', (b) => (log += b));
    const api = async (method: string, p: string, body?: unknown) => {
      const r = await fetch(`http://127.0.0.1:${port}${p}`, {
        method,
        headers: { authorization: 'Bearer cp-token', ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await r.text();
      return { status: r.status, text, body: text ? JSON.parse(text) : null };
    };
    const secrets = new Set<string>();
    const remember = () => {
      const c = readCredentialsOnDisk(path.join(dir, 'cp/state'), new FileSystem()).credentials.w2;
      if (c) secrets.add(c.dhchap_key).add(deriveTlsPsk(c.dhchap_key, c.hostnqn));
    };
    const texts: string[] = [];
    try {
      for (let i = 0; ; i++) {
        try {
          if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) break;
        } catch {
          /* starting */
        }
        if (i > 400 || proc.exitCode !== null) throw new Error(`control plane did not start: ${log.slice(-2000)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect((await api('POST', '/agents', { id: 'n2', base_url: node.url, token: 'node-token', iscsi_server: '10.0.0.9', role: { disk: true } })).status).toBe(201);
      expect((await api('POST', '/workers', { worker_id: 'w2' })).status).toBe(201);
      const disk = await api('POST', '/workers/w2/luns/disk', { type: 'master', name: '_tpl_debian_12.img', os: 'debian' });
      expect(disk.status).toBe(201);
      texts.push(disk.text);
      remember();
      await node.stop();
      const rot = await api('PUT', '/workers/w2/credential', { generate: true });
      texts.push(rot.text);
      remember();
      expect(rot.body.agents[0].state).toBe('failed');
      await node.start();
      let state = '';
      for (let i = 0; i < 100 && state !== 'pushed'; i++) {
        await new Promise((r) => setTimeout(r, 200));
        const c = await api('GET', '/workers/w2/credential');
        texts.push(c.text);
        state = c.body.agents[0].state;
      }
      expect(state).toBe('pushed');
      expect(node.host(`${NQN}:host.w2`).key).toBe(readCredentialsOnDisk(path.join(dir, 'cp/state'), new FileSystem()).credentials.w2.dhchap_key);
      texts.push((await api('DELETE', '/workers/w2/credential')).text);
      texts.push((await api('DELETE', '/workers/w2')).text);
      expect(node.host(`${NQN}:host.w2`).key).toBeNull();
    } finally {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
      await node.stop();
    }
    expect(log).toMatch(/credential|reconcil|nvme/i); // the log is there, at debug level
    const audit = fs.readFileSync(path.join(dir, 'cp/state/operations.jsonl'), 'utf8');
    expect(secrets.size).toBe(4);
    for (const s of secrets) {
      const b64 = s.split(':')[2];
      for (const [where, text] of [['control plane log', log], ['agent log', node.agent!.output()], ['operations.jsonl', audit], ['responses', texts.join('\n')]]) {
        if (text.includes(b64)) throw new Error(`a secret appears in the ${where}`);
      }
    }
  });
});

describeFiles('state/nvme-credentials.json at start', () => {
  it('a broken file stops the start naming the file, and a bad secret names the worker, never the value', async () => {
    for (const [text, msg] of [
      ['{"credentials": ', /nvme-credentials\.json.*invalid JSON/],
      [JSON.stringify({ version: 1, credentials: { w9: { hostnqn: HOSTNQN, dhchap_key: 'DHHC-1:00:c2VjcmV0LXZhbHVlOg==:' } }, removals: [] }), /credentials\.w9\.dhchap_key is not a DHHC-1 secret/],
    ] as const) {
      const dir = tempDir('kurrent-cred-file-');
      fs.mkdirSync(path.join(dir, 'state'), { recursive: true });
      fs.writeFileSync(path.join(dir, 'state/nvme-credentials.json'), text);
      const err = await startApp({}, { dir }).then(
        async (t) => {
          await t.close();
          return null;
        },
        (e: Error) => e,
      );
      expect(err?.message).toMatch(msg);
      expect(err?.message).not.toContain('c2VjcmV0');
    }
  });
});
