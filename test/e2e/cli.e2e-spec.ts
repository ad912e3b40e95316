import { execFile, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { makeFile, spawnAgent, SpawnedAgent } from '../helpers/agent';
import { freePort, startApp, tempDir, TestApp } from '../helpers/app';
import { ChangeFeed } from '../../src/control-plane/changes/change-feed';

/**
 * The `kurrent` CLI as an operator runs it: a subprocess (bin/kurrent.js, the build the suite
 * made) against a listening control plane and a real agent process (nvmet backend on a
 * configfs-shaped root). Every verb once, --json parsed, exit codes per kind of failure.
 */

const BIN = path.join(__dirname, '../../bin/kurrent.js');
const NQN = 'nqn.2026-07.com.controller';

interface Run {
  code: number;
  out: string;
  err: string;
  json: any;
}

describe('kurrent CLI', () => {
  const dir = tempDir('kurrent-cli-');
  let t: TestApp;
  let agent: SpawnedAgent;
  let url = '';
  let agentUrl = '';
  const env = () => ({ PATH: process.env.PATH ?? '', KURRENT_URL: url, KURRENT_TOKEN: 'cli-token' });

  const cli = (args: string[], opts: { env?: Record<string, string>; stdin?: string } = {}): Promise<Run> =>
    new Promise((resolve) => {
      const p = execFile(process.execPath, [BIN, ...args], { env: { ...env(), ...opts.env }, timeout: 30_000 }, (err, out, errOut) => {
        let json: unknown = undefined;
        try {
          json = JSON.parse(out);
        } catch {
          /* not JSON */
        }
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out, err: errOut, json });
      });
      if (opts.stdin !== undefined) p.stdin!.end(opts.stdin);
      else p.stdin!.end();
    });
  const ok = async (args: string[], opts?: { env?: Record<string, string>; stdin?: string }) => {
    const r = await cli(args, opts);
    if (r.code !== 0) throw new Error(`kurrent ${args.join(' ')} exited ${r.code}: ${r.err}`);
    return r;
  };

  beforeAll(async () => {
    const port = await freePort();
    fs.mkdirSync(path.join(dir, 'images'), { recursive: true });
    makeFile(path.join(dir, 'images', '_tpl_ubuntu_2204.img'), 8 << 20);
    const agentPort = await freePort();
    agentUrl = `http://127.0.0.1:${agentPort}`;
    agent = await spawnAgent({
      IPXE_AGENT_PORT: String(agentPort),
      IPXE_AGENT_BACKEND: 'nvmet',
      IPXE_AGENT_CONFIGFS_ROOT: path.join(dir, 'nvmet'),
      IPXE_AGENT_TOKEN: 'agent-token',
      DISK_DIR: path.join(dir, 'images'),
      IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state'),
    });
    t = await startApp({ IPXE_CP_TOKEN: 'cli-token', IPXE_CP_RECONCILE_SECONDS: '0' }, { dir: path.join(dir, 'cp') });
    await t.app.listen(port, '127.0.0.1');
    url = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await t?.close();
    await agent?.stop();
  });

  it('help, completion and usage errors', async () => {
    const help = await ok(['--help']);
    expect(help.out).toMatch(/Exit codes: 0 ok/);
    // `npx kurrent` in the checkout runs the same program (package.json bin), without any install.
    const npx = await new Promise<string>((resolve) => execFile('npx', ['--no-install', 'kurrent', '--help'], { cwd: path.join(__dirname, '../..'), env: { ...process.env, ...env() } }, (_e, out) => resolve(out)));
    expect(npx).toBe(help.out);
    for (const v of [['workers', 'disk', 'create'], ['devices', 'window', 'open'], ['workers', 'credential', 'set'], ['ops', 'list']]) {
      expect((await ok([...v, '--help'])).out).toMatch(new RegExp(`Example:\\n  \\$ kurrent ${v.join(' ')}`));
    }
    const completion = await ok(['completion']);
    expect(completion.out).toContain('complete -F _kurrent kurrent');
    expect(completion.out).toContain('"workers credential") opts="show set revoke');
    expect((await cli(['workers', 'frobnicate'])).code).toBe(2);
    expect((await cli(['devices', 'window', 'open', '--ttl', 'soon'])).code).toBe(2);
  });

  it('agents, masters and exit codes for auth, not found and conflict', async () => {
    const probe = await ok(['agents', 'probe', agentUrl, '--agent-token', 'agent-token', '--json']);
    expect(probe.json).toMatchObject({ backend: 'nvmet', base_url: agentUrl });
    expect((await ok(['agents', 'add', 'n1', '--base-url', agentUrl, '--agent-token', 'agent-token', '--iscsi-server', '10.0.0.9', '--role', 'disk', '--tag', 'storage,nvmet', '--json'])).json).toMatchObject({ id: 'n1', iscsi_server: '10.0.0.9' });
    const again = await cli(['agents', 'add', 'n1', '--base-url', agentUrl]);
    expect([again.code, again.err]).toEqual([5, expect.stringMatching(/^kurrent: 409: /)]);
    // update changes what it is given and keeps the rest (PUT replaces: the CLI merges first).
    expect((await ok(['agents', 'update', 'n1', '--iscsi-server', '10.0.0.10', '--json'])).json).toMatchObject({ iscsi_server: '10.0.0.10', tags: ['storage', 'nvmet'], role: { disk: true, cd: false } });
    const list = await ok(['agents', 'list', '--json']);
    expect(list.json).toEqual([expect.objectContaining({ id: 'n1', health: 'ok' })]);
    expect((await ok(['agents', 'list'])).out).toMatch(/^ID +BASE_URL/);
    expect((await ok(['agents', 'drain', 'n1', '--json'])).json).toMatchObject({ enabled: false, iscsi_server: '10.0.0.10', tags: ['storage', 'nvmet'] });
    expect((await ok(['agents', 'enable', 'n1', '--json'])).json.enabled).toBe(true);
    expect((await ok(['masters', '--json'])).json.agents[0].masters).toEqual([expect.objectContaining({ name: '_tpl_ubuntu_2204.img' })]);
    expect((await ok(['agents', 'luns', 'n1', '--json'])).json).toEqual([]);
    const denied = await cli(['workers', 'list'], { env: { KURRENT_TOKEN: 'wrong' } });
    expect([denied.code, denied.err]).toEqual([3, 'kurrent: 401: missing or invalid bearer token\n']);
    const byFlag = await cli(['--token', 'wrong', 'workers', 'list']);
    expect(byFlag.code).toBe(3);
    const missing = await cli(['workers', 'show', 'nobody']);
    expect([missing.code, missing.err]).toEqual([4, 'kurrent: 404: worker not found: nobody\n']);
    const down = await cli(['workers', 'list'], { env: { KURRENT_URL: `http://127.0.0.1:${await freePort()}` } });
    expect([down.code, down.err]).toEqual([6, 'kurrent: cannot reach the control plane: ECONNREFUSED\n']);
    // A server that accepts and never answers: the request gives up after --request-timeout, it never hangs.
    const silent = net.createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    try {
      const hung = await cli(['--request-timeout', '1', 'workers', 'list'], { env: { KURRENT_URL: `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}` } });
      expect([hung.code, hung.err]).toEqual([6, 'kurrent: the control plane did not answer within the timeout (--request-timeout / KURRENT_REQUEST_TIMEOUT)\n']);
      const bad = await cli(['--request-timeout', 'soon', 'workers', 'list']);
      expect(bad.code).toBe(2);
    } finally {
      silent.close();
    }
  });

  it('devices: register, import, window, bind, batch bind with preview, key reset, revoke', async () => {
    expect((await ok(['devices', 'register', '52:54:00:00:00:01', '--serial', 'SN1', '--json'])).json).toMatchObject({ mac: '52:54:00:00:00:01', state: 'pooled' });
    const csv = path.join(dir, 'devices.csv');
    fs.writeFileSync(csv, 'mac,serial,product\n52:54:00:00:00:02,SN2,PC\n52:54:00:00:00:03,SN3,PC\nnot-a-mac,SN4,PC\n');
    const imp = await ok(['devices', 'import', csv]);
    expect(imp.out).toBe('created 2, skipped 0, failed 1\n  failed not-a-mac: invalid MAC address: not-a-mac\n');
    expect(imp.err).toBe('importing 3 devices...\n');
    expect((await ok(['devices', 'import', '-', '--json'], { stdin: JSON.stringify([{ mac: '52:54:00:00:00:04' }]) })).json.created).toHaveLength(1);
    expect((await ok(['devices', 'list', '--search', 'sn2', '--json'])).json.map((d: { mac: string }) => d.mac)).toEqual(['52:54:00:00:00:02']);
    expect((await ok(['devices', 'list', '--state', 'pooled'])).out.split('\n').filter((l) => l.startsWith('52:54')).length).toBe(4);
    // Searched and paged by the control plane: a MAC in another spelling, and --limit in MAC order.
    expect((await ok(['devices', 'list', '--search', '5254-0000-0003', '--json'])).json.map((d: { mac: string }) => d.mac)).toEqual(['52:54:00:00:00:03']);
    expect((await ok(['devices', 'list', '--limit', '2', '--json'])).json.map((d: { mac: string }) => d.mac)).toEqual(['52:54:00:00:00:01', '52:54:00:00:00:02']);
    expect((await ok(['devices', 'show', '52-54-00-00-00-01', '--json'])).json.fingerprint.serial).toBe('SN1');
    expect((await ok(['devices', 'window', 'open', '--ttl', '15', '--max', '50', '--json'])).json).toMatchObject({ open: true, max_devices: 50, remaining: 50 });
    expect((await ok(['devices', 'window', 'show', '--json'])).json.open).toBe(true);
    expect((await ok(['devices', 'window', 'close', '--json'])).json.open).toBe(false);

    await ok(['workers', 'create', 'seat-01']);
    await ok(['workers', 'batch', '--prefix', 'seat-', '--count', '3']);
    expect((await ok(['devices', 'bind', '52:54:00:00:00:01', 'seat-01', '--json'])).json).toMatchObject({ state: 'bound', bound_worker_id: 'seat-01' });
    const manifest = path.join(dir, 'manifest.csv');
    fs.writeFileSync(manifest, 'mac,worker_id\n52:54:00:00:00:02,seat-02\n52:54:00:00:00:03,seat-03\n52:54:00:00:00:09,seat-01\n');
    const preview = await ok(['devices', 'batch-bind', manifest, '--preview', '--json']);
    expect(preview.json).toMatchObject({ matched: [expect.anything(), expect.anything()] });
    expect((await ok(['devices', 'list', '--state', 'bound', '--json'])).json).toHaveLength(1); // the preview wrote nothing
    const bound = await ok(['devices', 'batch-bind', manifest]);
    expect(bound.out).toMatch(/succeeded 2/);
    expect((await ok(['devices', 'unbind', '52:54:00:00:00:03', '--json'])).json.state).toBe('pooled');
    // Destructive verbs: refused without --yes off a terminal (exit 2, nothing done), done with it.
    const refused = await cli(['devices', 'revoke', '52:54:00:00:00:04']);
    expect([refused.code, refused.err]).toEqual([2, 'kurrent: refusing to revoke device 52:54:00:00:00:04 without --yes (not a terminal)\n']);
    expect((await ok(['devices', 'show', '52:54:00:00:00:04', '--json'])).json.state).toBe('pooled');
    expect((await cli(['devices', 'bind', '52:54:00:00:00:04', 'seat-01', '--force'])).code).toBe(2);
    const nokey = await cli(['devices', 'key-reset', '52:54:00:00:00:04', '--yes']);
    expect([nokey.code, nokey.err]).toEqual([5, 'kurrent: 409: device has no key: 52:54:00:00:00:04\n']);
    await ok(['devices', 'revoke', '52:54:00:00:00:04', '--yes']);
    expect((await ok(['devices', 'show', '52:54:00:00:00:04', '--json'])).json.state).toBe('revoked');
    const conflict = await cli(['devices', 'bind', '52:54:00:00:00:04', 'seat-03']);
    expect(conflict.code).toBe(5);
  });

  it('workers: disks with a dry-run batch, default disk and os, mac, status, credential, delete', async () => {
    const created = await ok(['workers', 'disk', 'create', 'seat-01', '--os', 'ubuntu', '--os-version', '22.04', '--master', '_tpl_ubuntu_2204.img', '--json']);
    const tag = created.json.disks[0].os_tag;
    expect(created.json.disks[0]).toMatchObject({ transport: 'nvme-tcp', nqn: `${NQN}:seat-01.${tag}` });
    expect((await cli(['workers', 'disk', 'create', 'seat-02', '--os', 'ubuntu'])).code).toBe(2); // neither --master nor --size
    const plan = await ok(['workers', 'disk', 'batch', '--workers', 'seat-02,seat-03', '--os', 'debian', '--size', '1G', '--dry-run', '--json']);
    expect(plan.json).toMatchObject({ dry_run: true, succeeded: [{ worker_id: 'seat-02', agent: 'n1' }, { worker_id: 'seat-03', agent: 'n1' }] });
    expect((await ok(['workers', 'show', 'seat-02', '--json'])).json.disks).toEqual([]);
    const batch = await ok(['workers', 'disk', 'batch', '--workers', 'seat-02', '--os', 'debian', '--size', '1G']);
    expect(batch.out).toMatch(/^done: 1 ok, 0 skipped, 0 failed/);
    expect(batch.err).toBe('creating 1 disks...\n');
    // Disk modes: the table shows each disk's; reset only for a master clone (400 names why), and the 404 of an unknown tag.
    const mode = await ok(['workers', 'disk', 'mode', 'seat-01', tag, 'persistent']);
    expect(mode.out).toMatch(new RegExp(`ubuntu\\s+22\\.04\\s+${tag}\\s+persistent\\s+n1`));
    const emptyTag = (await ok(['workers', 'show', 'seat-02', '--json'])).json.disks[0].os_tag;
    const noMaster = await cli(['workers', 'disk', 'mode', 'seat-02', emptyTag, 'reset']);
    expect([noMaster.code, noMaster.err]).toEqual([1, expect.stringContaining('400: mode: reset needs a disk cloned from a master')]);
    expect((await cli(['workers', 'disk', 'mode', 'seat-02', 'aaaaaaaaaaaa', 'reset'])).code).toBe(4);
    // Master versions: the disk holds version 1 (its create took the file as version 1); notes; deleting a version in use is a conflict.
    expect(created.json.disks[0].source).toEqual({ type: 'master', name: '_tpl_ubuntu_2204.img', version: 1 });
    const pinned = await ok(['workers', 'disk', 'create', 'seat-03', '--os', 'centos', '--master', '_tpl_ubuntu_2204.img', '--master-version', '1', '--json']);
    expect(pinned.json.disks[0].source.version).toBe(1);
    expect((await cli(['workers', 'disk', 'create', 'seat-03', '--os', 'debian', '--size', '1G', '--master-version', '1'])).code).toBe(2);
    expect((await cli(['workers', 'disk', 'create', 'seat-03', '--os', 'debian', '--master', '_tpl_ubuntu_2204.img', '--master-version', 'one'])).code).toBe(2);
    expect((await ok(['masters', 'note', '_tpl_ubuntu_2204.img', '1', 'first drop'])).out).toBe('_tpl_ubuntu_2204.img version 1: first drop\n');
    const versions = await ok(['masters', 'versions', '_tpl_ubuntu_2204.img', '--json']);
    expect(versions.json).toMatchObject({ name: '_tpl_ubuntu_2204.img', latest: 1, versions: [{ version: 1, agents: ['n1'], disks: 2, note: 'first drop', origin: 'drop' }] });
    expect((await ok(['masters', 'versions'])).out).toMatch(/^MASTER +VERSION +SIZE +SHA256[^\n]*\n_tpl_ubuntu_2204\.img +1 +\S+ +[0-9a-f]{12} .* n1 +2 +first drop/);
    expect((await ok(['masters'])).out).toMatch(/n1 +_tpl_ubuntu_2204\.img +\S+ +\S+ +1\n/);
    const inUse = await cli(['masters', 'delete-version', '_tpl_ubuntu_2204.img', '1', '--yes']);
    expect([inUse.code, inUse.err]).toEqual([5, expect.stringContaining('409: version 1 of _tpl_ubuntu_2204.img is in use by 2 disk(s)')]);
    expect((await cli(['masters', 'delete-version', '_tpl_ubuntu_2204.img', '1'])).code).toBe(2); // destructive: --yes off a terminal
    expect((await cli(['masters', 'versions', '_tpl_none.img'])).code).toBe(4);
    // Distribution: with one agent the version is already everywhere; an unknown version is a 404.
    expect((await ok(['masters', 'distribute', '_tpl_ubuntu_2204.img', '1', '--wait'])).out).toMatch(/^_tpl_ubuntu_2204\.img version 1 \(sha256 [0-9a-f]{12}\): on every agent holding the master\nAGENT +STATE +SOURCE +PROGRESS +ERROR\nn1 +present/);
    expect((await ok(['masters', 'distribution', '_tpl_ubuntu_2204.img', '1', '--json'])).json).toMatchObject({ version: 1, complete: true, agents: [{ agent: 'n1', state: 'present' }] });
    expect((await cli(['masters', 'distribution', '_tpl_ubuntu_2204.img', '9'])).code).toBe(4);
    // Rollout (to the same version here: one version exists): canary, status, promote, rollback refused without a version before.
    const ro = await ok(['masters', 'rollout', '_tpl_ubuntu_2204.img', '1', '--canary', 'seat-03', '--json']);
    expect(ro.json).toMatchObject({ version: 1, phase: 'canary', canary: ['seat-03'], summary: { disks: 2, on_target: 1, not_reached: 1 } });
    expect((await ok(['masters', 'rollout', '_tpl_ubuntu_2204.img'])).out).toMatch(/^_tpl_ubuntu_2204\.img: rollout to version 1 \(from 1\), phase canary, canary seat-03\n1\/2 on target, 0 at next boot, 0 need a rebase, 1 not reached; booted 0, failed 0\nWORKER_ID +OS /);
    expect((await ok(['masters', 'promote', '_tpl_ubuntu_2204.img', '--json'])).json.phase).toBe('all');
    expect((await cli(['masters', 'rollout', '_tpl_ubuntu_2204.img', 'one'])).code).toBe(2);
    expect((await cli(['masters', 'rollout', '_tpl_ubuntu_2204.img', '1', '--canary-percent', 'ten'])).code).toBe(2);
    const again = await cli(['masters', 'rollout', '_tpl_ubuntu_2204.img', '1']);
    expect([again.code, again.err]).toEqual([5, expect.stringContaining('409: every disk of _tpl_ubuntu_2204.img is already to hold version 1')]);
    // Maintenance: started, exclusive, shown, discarded (promote needs sessions this nvmet test node cannot see).
    expect((await ok(['masters', 'maintenance', 'start', '_tpl_ubuntu_2204.img', 'seat-02', '--os', 'windows', '--json'])).json).toMatchObject({ worker_id: 'seat-02', os: 'windows', from_version: 1 });
    const busy = await cli(['masters', 'maintenance', 'start', '_tpl_ubuntu_2204.img', 'seat-03', '--os', 'windows']);
    expect([busy.code, busy.err]).toEqual([5, expect.stringContaining('is in maintenance by seat-02 (windows)')]);
    expect((await ok(['masters', 'maintenance', 'show', '_tpl_ubuntu_2204.img'])).out).toMatch(/worker_id +seat-02/);
    const promote = await cli(['masters', 'maintenance', 'promote', '_tpl_ubuntu_2204.img', '--note', 'x']);
    expect([promote.code, promote.err]).toEqual([5, expect.stringContaining('cannot see initiator sessions here')]);
    expect((await cli(['masters', 'maintenance', 'discard', '_tpl_ubuntu_2204.img'])).code).toBe(2);
    expect((await ok(['masters', 'maintenance', 'discard', '_tpl_ubuntu_2204.img', '--yes'])).out).toBe('_tpl_ubuntu_2204.img: maintenance disk of seat-02 discarded\n');
    expect((await cli(['masters', 'maintenance', 'show', '_tpl_ubuntu_2204.img'])).code).toBe(4);
    // A rebase discards data: --yes off a terminal; this nvmet test node cannot see sessions, so the agent refuses (nothing changed).
    expect((await cli(['workers', 'disk', 'rebase', 'seat-01', tag])).code).toBe(2);
    const rebase = await cli(['workers', 'disk', 'rebase', 'seat-01', tag, '--yes']);
    expect([rebase.code, rebase.err]).toEqual([5, expect.stringContaining('cannot see initiator sessions here')]);
    expect((await ok(['workers', 'default-disk', 'seat-01', tag, '--json'])).json).toMatchObject({ default_disk: tag, default_os: 'ubuntu' });
    expect((await ok(['workers', 'default-os', 'seat-01', '--timeout', '3000', '--json'])).json.boot.menu_timeout).toBe(3000);
    expect((await ok(['workers', 'mac', 'seat-01', '52:54:00:00:00:03', '--json'])).json).toMatchObject({ mac: '52:54:00:00:00:03', changed: true });
    expect((await ok(['workers', 'status', 'seat-01', '--json'])).json.actual.disks).toEqual([expect.objectContaining({ os: 'ubuntu', exists: true })]);
    // The boots column is the API's boot readiness: yes, or no and the reason codes.
    const br = (await ok(['workers', 'show', 'seat-01', '--json'])).json.boot_readiness as { bootable: boolean; reasons: { code: string; message: string }[] };
    const cell = br.bootable ? 'yes' : `no: ${br.reasons.map((x) => x.code).join(', ')}`;
    expect((await ok(['workers', 'list'])).out).toMatch(new RegExp(`seat-01 +seat-01 +52:54:00:00:00:03 +ready +${cell.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} `));
    expect((await ok(['workers', 'show', 'seat-01'])).out).toContain(br.bootable ? 'yes' : `no: ${br.reasons[0].code} (${br.reasons[0].message}`);

    const show = await ok(['workers', 'credential', 'show', 'seat-01', '--json']);
    expect(show.json).toMatchObject({ hostnqn: `${NQN}:host.seat-01`, agents: [{ agent: 'n1', state: 'pushed' }] });
    const rotated = await ok(['workers', 'credential', 'set', 'seat-01', '--generate', '--json']);
    expect(rotated.json.dhchap_key_sha256).not.toBe(show.json.dhchap_key_sha256);
    const keyFile = path.join(dir, 'key');
    fs.writeFileSync(keyFile, 'DHHC-1:00:c2VjcmV0:\n');
    const bad = await cli(['workers', 'credential', 'set', 'seat-01', '--key-file', keyFile]);
    expect([bad.code, bad.err]).toEqual([1, expect.stringMatching(/^kurrent: 400: dhchap_key: /)]);
    expect(bad.err).not.toContain('c2VjcmV0');
    expect((await cli(['workers', 'credential', 'revoke', 'seat-01'])).code).toBe(2);
    expect((await ok(['workers', 'credential', 'revoke', 'seat-01', '--yes', '--json'])).json.revoked).toBe(true);
    expect((await ok(['reconcile', '--json'])).json).toMatchObject({ agents_checked: ['n1'], failed: [] });
    expect((await ok(['workers', 'disk', 'delete', 'seat-02', 'debian', '--delete-file', '--yes', '--json'])).json.disks).toEqual([]);
    expect((await ok(['workers', 'delete', 'seat-01', '--delete-disk', '--yes', '--json'])).json).toMatchObject({ deleted: 'seat-01', delete_disk: true });
    expect((await cli(['workers', 'show', 'seat-01'])).code).toBe(4);
  });

  it('settings and ops: list, filter by MAC, --follow sees an operation made after it started', async () => {
    expect((await ok(['settings', 'auto-register', 'off', '--json'])).json.enabled).toBe(false);
    expect((await ok(['settings', 'auto-register', '--json'])).json.enabled).toBe(false);
    expect((await ok(['settings', 'enforcement', '--json'])).json.enabled).toBe(false);
    expect((await cli(['settings', 'auto-register', 'maybe'])).code).toBe(2);
    const all = await ok(['ops', 'list', '--json']);
    const entries = all.out.trim().split('\n').map((l) => JSON.parse(l));
    expect(entries.map((e: { op: string }) => e.op)).toEqual(expect.arrayContaining(['agent.create', 'device.register', 'worker.create', 'credential.revoke']));
    expect((await ok(['ops', 'list', '--mac', '52:54:00:00:00:04'])).out).toMatch(/device\.revoke/);

    const feed = t.app.get(ChangeFeed);
    const before = feed.waiting;
    const follow = spawn(process.execPath, [BIN, 'ops', 'list', '--follow', '--since', String(entries.at(-1).id)], { env: env() });
    let seen = '';
    follow.stdout.on('data', (b) => (seen += b));
    // It printed its first page (empty) and now waits on the change feed, not on a timer.
    for (let i = 0; i < 200 && feed.waiting <= before; i++) await new Promise((r) => setTimeout(r, 50));
    expect(feed.waiting).toBeGreaterThan(before);
    await ok(['workers', 'create', 'late-worker']);
    for (let i = 0; i < 100 && !seen.includes('worker.create'); i++) await new Promise((r) => setTimeout(r, 100));
    follow.kill('SIGINT');
    // The first thing it printed is the operation made while it waited.
    expect(seen).toMatch(/^\d+ {2}\S+ {2}worker\.create {2}ok {2}.*worker_id=late-worker.*\n/);
  });
  it('boots: the boot policy, a device\'s boots with their stages, and the release of a held device', async () => {
    const MAC = '52:54:00:00:25:01';
    await t.req('POST', '/devices', { mac: MAC });
    await t.req('POST', '/workers', { worker_id: 'cli-seat', mac: MAC });
    expect((await ok(['settings', 'boot-policy', '--json'])).json).toEqual({ loop_threshold: 3, loop_window_minutes: 10, loop_action: 'hold', stuck_after_seconds: 300 });
    expect((await ok(['settings', 'boot-policy', '--stuck-after', '120', '--json'])).json.stuck_after_seconds).toBe(120);
    const bad = await cli(['settings', 'boot-policy', '--loop-action', 'explode']);
    expect(bad.code).not.toBe(0);
    expect(bad.err).toMatch(/loop_action/);
    for (let i = 0; i < 4; i++) {
      await t.req('GET', `/devices/report?mac=${MAC}`);
      await t.req('GET', `/boot-vars?mac=${MAC}`);
    }
    const list = await ok(['boots', 'list', '--mac', MAC]);
    expect(list.out).toMatch(/^STARTED_AT +MAC +WORKER_ID +OUTCOME +STAGES +REASON$/m);
    expect(list.out).toMatch(new RegExp(`${MAC} +cli-seat +held +report\\+0\\.0s vars\\+0\\.0s +looping`));
    expect((await ok(['boots', 'list', '--outcome', 'failed', '--json'])).json.items).toHaveLength(3);
    expect((await ok(['boots', 'release', MAC])).out).toBe(`${MAC} released: it boots normally at its next power-on\n`);
    expect((await ok(['boots', 'release', MAC])).out).toBe(`${MAC} was not looping\n`);
    expect((await cli(['boots', 'release', '52:54:00:00:99:99'])).code).not.toBe(0);
  });
});
