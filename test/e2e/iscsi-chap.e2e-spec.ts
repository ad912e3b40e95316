import * as fs from 'node:fs';
import * as path from 'node:path';
import { deriveIscsiChapSecret } from '../../src/shared/nvme-keys';
import { makeFile, spawnAgent, SpawnedAgent } from '../helpers/agent';
import { freePort, itFiles, Res, startApp, tempDir, TestApp, waitForMaster } from '../helpers/app';

/**
 * iSCSI CHAP on LIO end to end: a control plane (in process) and a real agent process on the lio
 * backend against a configfs-shaped temp root. Each LIO target is closed to the worker's
 * initiator name and requires CHAP with a secret derived from the worker's credential; /boot-vars
 * gives it to the bound MAC only; rotation, revocation, a renamed worker and a target changed
 * behind the control plane's back all reach configfs. (The kernel run, test/kernel/lio, shows the
 * real LIO accepting the credential and refusing a wrong one.)
 */

const IQN = 'iqn.2026-07.com.controller';
const MAC = '02:00:00:00:30:01';

describe('iSCSI CHAP on LIO: the worker credential, /boot-vars and the reconciler (real lio agent process)', () => {
  const dir = tempDir('kurrent-chap-');
  const root = path.join(dir, 'node/target');
  const disks = path.join(dir, 'node/images');
  const agentState = path.join(dir, 'node/state');
  let agent: SpawnedAgent;
  let t: TestApp;
  const seen: Res[] = [];
  const req = async (method: string, url: string, body?: unknown) => {
    const r = await t.req(method, url, body);
    seen.push(r);
    return r;
  };
  const keyOf = (): string => JSON.parse(t.read('state/nvme-credentials.json')).credentials.w1?.dhchap_key;
  const acl = (p: string) => {
    const f = path.join(root, 'iscsi', `${IQN}:w1.ubuntu`, 'tpgt_1', p);
    return fs.existsSync(f) ? fs.readFileSync(f, 'utf8').trim() : null;
  };
  const acls = () => fs.readdirSync(path.join(root, 'iscsi', `${IQN}:w1.ubuntu`, 'tpgt_1', 'acls')).sort();
  const bootVars = async () => (await req('GET', `/boot-vars?mac=${MAC}&format=json`)).body;
  const secrets = new Set<string>();

  beforeAll(async () => {
    makeFile(path.join(disks, '_tpl_ubuntu.img'), 8 << 20, [{ offset: 510, bytes: Buffer.from([0x55, 0xaa]) }]);
    const port = await freePort();
    agent = await spawnAgent({
      IPXE_AGENT_PORT: String(port),
      IPXE_AGENT_BACKEND: 'lio',
      IPXE_AGENT_CONFIGFS_ROOT: root,
      IPXE_AGENT_LIO_SAVECONFIG: path.join(dir, 'node/saveconfig.json'),
      IPXE_AGENT_TOKEN: 'lio-token',
      IPXE_AGENT_LOG_LEVEL: 'debug',
      DISK_DIR: disks,
      IPXE_AGENT_STATE_DIR: agentState,
    });
    t = await startApp({ IPXE_CP_TOKEN: 'cp-token', IPXE_CP_RECONCILE_SECONDS: '0', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '3000', LIO_TOKEN: 'lio-token' }, { dir: path.join(dir, 'cp') });
    expect((await req('POST', '/agents', { id: 'lio1', base_url: agent.url, token: '${LIO_TOKEN}', iscsi_server: '192.168.80.3', role: { disk: true }, tags: ['lio'] })).status).toBe(201);
    expect((await req('POST', '/devices', { mac: MAC })).status).toBe(201);
    expect((await req('POST', '/workers', { worker_id: 'w1', mac: MAC, hostname: 'seat-1' })).status).toBe(201);
    await waitForMaster(t, '_tpl_ubuntu.img');
  });

  afterAll(async () => {
    await t?.close();
    await agent?.stop();
  });

  it('the first LIO disk issues the credential; the target is closed to the worker initiator and requires its CHAP secret', async () => {
    const r = await req('POST', '/workers/w1/luns/disk', { type: 'master', name: '_tpl_ubuntu.img', os: 'ubuntu' });
    expect([r.status, r.status === 201 ? null : r.body]).toEqual([201, null]);
    // No default yet: the reboot loop, which boots nothing, carries no CHAP secret.
    expect(await bootVars()).toEqual({ base_iqn: IQN, iscsi_server: '192.168.80.3', iscsi_sep: '::::', menu_default: 'reboot', menu_timeout: 1 });
    expect((await req('PUT', '/workers/w1/default-os', { os: 'ubuntu' })).status).toBe(200);
    const secret = deriveIscsiChapSecret(keyOf(), 'w1');
    secrets.add(secret);
    expect(acls()).toEqual([`${IQN}:seat-1`]);
    expect([acl('attrib/authentication'), acl('attrib/generate_node_acls'), acl(`acls/${IQN}:seat-1/auth/userid`), acl(`acls/${IQN}:seat-1/auth/password`)]).toEqual(['1', '0', 'w1', secret]);
    const issue = (await req('GET', '/operations?op=credential.issue')).body.entries;
    expect(issue).toEqual([expect.objectContaining({ worker_id: 'w1', reason: 'first iSCSI disk (CHAP)', source: 'generated' })]);
    // The agent tells the credential apart by hash; its state files holding the secret are 0600.
    const listed = (await req('GET', '/agents/lio1/luns')).body.find((x: { iqn: string }) => x.iqn === `${IQN}:w1.ubuntu`);
    expect(listed).toMatchObject({ allowed_initiators: [`${IQN}:seat-1`], chap_userid: 'w1', chap_secret_sha256: expect.stringMatching(/^[0-9a-f]{12}$/) });
    expect(fs.statSync(path.join(agentState, 'targets.json')).mode & 0o777).toBe(0o600);
    expect(fs.statSync(path.join(dir, 'node/saveconfig.json')).mode & 0o777).toBe(0o600);
  });

  it('/boot-vars gives the bound MAC the CHAP user and secret as iPXE settings; a hostname alone gets the variables without them', async () => {
    const secret = deriveIscsiChapSecret(keyOf(), 'w1');
    expect(await bootVars()).toEqual({
      base_iqn: IQN, iscsi_server: '192.168.80.3', iscsi_sep: '::::', iscsi_username: 'w1', iscsi_password: secret, menu_default: 'ubuntu', menu_timeout: 5000,
    });
    expect((await req('GET', `/boot-vars?mac=${MAC}`)).text).toBe(
      `#!ipxe\n# boot vars for seat-1\nset base-iqn ${IQN}\nset iscsi-server 192.168.80.3\nset iscsi-sep ::::\nset username w1\nset password ${secret}\nset menu-default ubuntu\nset menu-timeout 5000\n`,
    );
    // A hostname alone (seed 000 serves one) gets the reference's variables, never the CHAP pair: the target asks for it.
    expect((await req('GET', '/boot-vars?hostname=seat-1&format=json')).body).toEqual({ base_iqn: IQN, iscsi_server: '192.168.80.3', iscsi_sep: '::::', menu_default: 'ubuntu', menu_timeout: 5000 });
    expect((await req('GET', '/boot-vars?hostname=seat-1')).text).not.toMatch(/username|password/);
  });

  it('rotation reaches the target at once; revocation locks it and /boot-vars stops; a new credential opens it again', async () => {
    const old = deriveIscsiChapSecret(keyOf(), 'w1');
    expect((await req('PUT', '/workers/w1/credential', { generate: true })).status).toBe(200);
    const rotated = deriveIscsiChapSecret(keyOf(), 'w1');
    secrets.add(rotated);
    expect(rotated).not.toBe(old);
    expect(acl(`acls/${IQN}:seat-1/auth/password`)).toBe(rotated);
    expect((await bootVars()).iscsi_password).toBe(rotated);
    expect((await req('GET', '/operations?op=disk.access')).body.entries.pop()).toMatchObject({ worker_id: 'w1', iqn: `${IQN}:w1.ubuntu`, reason: 'rotate', chap: 'required' });

    expect((await req('DELETE', '/workers/w1/credential')).status).toBe(200);
    const locked = acl(`acls/${IQN}:seat-1/auth/password`);
    expect([locked === rotated, locked === old, acl('attrib/authentication')]).toEqual([false, false, '1']);
    expect(await bootVars()).toEqual({});
    expect((await req('GET', '/operations?op=disk.access')).body.entries.pop()).toMatchObject({ reason: 'revoke', chap: 'locked' });
    // A pass leaves a locked target alone (its secret is nobody's).
    expect((await req('POST', '/reconcile')).body.iscsi_access).toEqual([]);
    expect(acl(`acls/${IQN}:seat-1/auth/password`)).toBe(locked);

    expect((await req('PUT', '/workers/w1/credential', { generate: true })).status).toBe(200);
    const fresh = deriveIscsiChapSecret(keyOf(), 'w1');
    secrets.add(fresh);
    expect(acl(`acls/${IQN}:seat-1/auth/password`)).toBe(fresh);
    expect((await bootVars()).iscsi_password).toBe(fresh);
  });

  it('a target changed behind the control plane is set right by the next reconciler pass', async () => {
    const a = await fetch(`${agent.url}/luns/access`, {
      method: 'PUT',
      headers: { authorization: 'Bearer lio-token', 'content-type': 'application/json' },
      body: JSON.stringify({ iqn: `${IQN}:w1.ubuntu`, allowed_initiators: [`${IQN}:someone-else`], chap: { userid: 'w1', secret: 'not-the-right-one' } }),
    });
    expect(a.status).toBe(200);
    expect(acls()).toEqual([`${IQN}:someone-else`]);
    const pass = (await req('POST', '/reconcile')).body;
    expect(pass.iscsi_access).toEqual([{ worker_id: 'w1', agent: 'lio1', iqn: `${IQN}:w1.ubuntu`, reason: 'rename' }]);
    expect(acls()).toEqual([`${IQN}:seat-1`]);
    expect(acl(`acls/${IQN}:seat-1/auth/password`)).toBe(deriveIscsiChapSecret(keyOf(), 'w1'));
    expect((await req('POST', '/reconcile')).body.iscsi_access).toEqual([]);
  });

  itFiles('a worker renamed by a hand edit of workers.yml: the next pass moves the ACL to the new initiator name', async () => {
    const file = path.join(t.dir, 'state/workers.yml');
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('"hostname":"seat-1"', '"hostname":"seat-9"'));
    for (let i = 0; i < 50 && (await req('GET', '/workers/w1')).body.hostname !== 'seat-9'; i++) await new Promise((r) => setTimeout(r, 100));
    expect((await req('GET', '/workers/w1')).body.hostname).toBe('seat-9');
    expect((await req('POST', '/reconcile')).body.iscsi_access).toEqual([{ worker_id: 'w1', agent: 'lio1', iqn: `${IQN}:w1.ubuntu`, reason: 'rename' }]);
    expect(acls()).toEqual([`${IQN}:seat-9`]);
    expect(acl(`acls/${IQN}:seat-9/auth/userid`)).toBe('w1');
  });

  it('the agent refuses bad access requests with the field named; nothing changes', async () => {
    const before = acls();
    const put = (body: unknown) =>
      fetch(`${agent.url}/luns/access`, { method: 'PUT', headers: { authorization: 'Bearer lio-token', 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(async (r) => ({
        status: r.status,
        body: (await r.json()) as { message: string },
      }));
    const good = { iqn: `${IQN}:w1.ubuntu`, allowed_initiators: [`${IQN}:x`] };
    for (const [body, status, msg] of [
      [{ ...good, allowed_initiators: [] }, 400, /allowed_initiators/],
      [{ ...good, chap: { userid: 'w1', secret: 'short' } }, 400, /chap\.secret/],
      [{ ...good, chap: { userid: 'w 1', secret: 'long-enough-secret' } }, 400, /chap\.userid/],
      [{ ...good, iqn: `${IQN}:nope` }, 404, /not found/],
    ] as const) {
      const r = await put(body);
      expect([r.status, r.body.message]).toEqual([status, expect.stringMatching(msg)]);
    }
    expect(acls()).toEqual(before);
    const d = await fetch(`${agent.url}/luns/disk`, {
      method: 'POST',
      headers: { authorization: 'Bearer lio-token', 'content-type': 'application/json' },
      body: JSON.stringify({ iqn: `${IQN}:w9.x`, size: '1M', chap: { userid: 'w9', secret: 'long-enough-secret' } }),
    });
    expect([d.status, ((await d.json()) as { message: string }).message]).toEqual([400, expect.stringMatching(/^chap: needs allowed_initiators/)]);
  });

  it('no CHAP secret in any control-plane answer but /boot-vars, in the audit or in the agent log (the control plane log redacts iscsi_password and chap.secret, see unit/redaction)', async () => {
    const audit = JSON.stringify((await req('GET', '/operations?limit=1000')).body);
    const answers = seen.filter((r) => !/^#!ipxe\n# boot vars|"iscsi_password"/.test(r.text ?? '')).map((r) => r.text ?? JSON.stringify(r.body));
    for (const s of secrets) {
      expect(audit).not.toContain(s);
      for (const a of answers) expect(a).not.toContain(s);
      expect(agent.output()).not.toContain(s);
    }
  });
});
