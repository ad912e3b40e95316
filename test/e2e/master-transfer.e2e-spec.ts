import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { signTransferTicket } from '../../src/shared/transfer-ticket';
import { makeFile, spawnAgent, SpawnedAgent, Tgtd, useLoopMount } from '../helpers/agent';
import { freePort, startApp, tempDir, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

// tgtd management numbers in a range no other suite uses (tgtd takes small ones only); the TCP
// ports (portals, agents) are free ports picked at the start.
const CONTROL_A = 10100 + (process.pid % 500);
const CONTROL_B = 10600 + (process.pid % 500);
let PORT_A = 0;
let PORT_B = 0;
const MASTER = '_tpl_win11.img';
const TOKEN_A = 'agent-a-token-7c1e9b';
const TOKEN_B = 'agent-b-token-52d0aa';
const MiB = 1 << 20;
const GiB = 1 << 30;

/** Of a 4 GiB sparse file: OpenSSL reads it in seconds (Node cannot read it into one Buffer). */
const sha256 = (file: string) => execFileSync('openssl', ['dgst', '-sha256', '-r', file], { encoding: 'utf8' }).slice(0, 64);

/**
 * Distribution (issue 26 item 4): a version taken on one agent reaches the other agents holding
 * its master, agent to agent over their own API with a read ticket signed with the sender's token,
 * only its data ranges,
 * checkpointed, checksummed before it becomes a version; a receiver killed mid-way resumes where
 * it stopped, and never shows a half-written version. Real parts: two stgt agents (two tgtd) on a
 * btrfs loop mount, and the control plane.
 */
describe('master version distribution between agents', () => {
  const mnt = useLoopMount('kurrent-transfer-btrfs-', GiB, ['mkfs.btrfs', '-q', '-f']);
  describe('two stgt agents on a btrfs loop mount, and the control plane', () => {
    let tgtdA: Tgtd;
    let tgtdB: Tgtd;
    const portals: Record<'a' | 'b', number> = { a: 0, b: 0 };
    const dir = tempDir('kurrent-master-transfer-');
    const diskDir = (agent: 'a' | 'b') => path.join(mnt, agent);
    const versionFile = (agent: 'a' | 'b', n: number) => path.join(diskDir(agent), '.masters', MASTER, `${n}.img`);
    let a: SpawnedAgent;
    let b: SpawnedAgent;
    let t: TestApp;
    const env = (agent: 'a' | 'b', extra: Record<string, string> = {}) => ({
      IPXE_AGENT_PORT: String(agent === 'a' ? PORT_A : PORT_B),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(agent === 'a' ? CONTROL_A : CONTROL_B),
      IPXE_AGENT_ISCSI_PORT: String(portals[agent]),
      IPXE_AGENT_TOKEN: agent === 'a' ? TOKEN_A : TOKEN_B,
      DISK_DIR: diskDir(agent),
      IPXE_AGENT_STATE_DIR: path.join(dir, `state-${agent}`),
      IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
      IPXE_AGENT_MASTER_SETTLE_SECONDS: '1',
      ...extra,
    });
    // Version 2's data: six 32 MiB runs in a 4 GiB image (192 MiB to move, not 4 GiB).
    const runs = [0, 600 * MiB, GiB + 3 * MiB, 2 * GiB, 3 * GiB + 512 * MiB, 4 * GiB - 32 * MiB].map((offset) => ({ offset, bytes: randomBytes(32 * MiB) }));
    type Dist = { complete: boolean; agents: { agent: string; state: string; source?: string; data_bytes?: number; bytes_done?: number; error?: string }[] };
    const distribution = async (v: number) => (await t.req('GET', `/masters/${MASTER}/versions/${v}/distribution`)).body as Dist;
    const agentB = (p: string, init?: RequestInit) => fetch(`http://127.0.0.1:${PORT_B}${p}`, { ...init, headers: { authorization: `Bearer ${TOKEN_B}`, 'content-type': 'application/json', ...(init?.headers ?? {}) } });
    type Transfer = { name: string; version: number; state: string; data_bytes: number; bytes_done: number; moved_bytes: number; error: string | null; source: string };
    const transfersOfB = async () => (await (await agentB('/masters/transfers')).json()) as Transfer[];

    beforeAll(async () => {
      [PORT_A, PORT_B, portals.a, portals.b] = [await freePort(), await freePort(), await freePort(), await freePort()];
      tgtdA = new Tgtd(CONTROL_A, portals.a);
      tgtdB = new Tgtd(CONTROL_B, portals.b);
      await tgtdA.start();
      await tgtdB.start();
      // The same version 1 dropped on both agents (an operator copied one file to each).
      for (const x of ['a', 'b'] as const) makeFile(path.join(diskDir(x), MASTER), 4 * GiB, [{ offset: 0, bytes: Buffer.from('KURRENT-MASTER-V1'.padEnd(512, '.')) }]);
      a = await spawnAgent(env('a'));
      // The receiver pulls at 16 MB/s here, so that it can be killed mid-way.
      b = await spawnAgent(env('b', { IPXE_AGENT_TRANSFER_MAX_MBPS: '16' }));
      t = await startApp({ IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '2000' });
      for (const [id, port, token] of [['a', PORT_A, TOKEN_A], ['b', PORT_B, TOKEN_B]] as const) {
        expect((await t.req('POST', '/agents', { id, base_url: `http://127.0.0.1:${port}`, token, iscsi_server: '127.0.0.1', role: { disk: true } })).status).toBe(201);
      }
      expect((await t.req('POST', '/workers', { worker_id: 'lab-01' })).status).toBe(201);
    }, 120_000);
    afterAll(async () => {
      await t?.close();
      await a?.stop();
      await b?.stop();
      await tgtdA?.stop();
      await tgtdB?.stop();
    });

    it('a version on one agent only: the distribution says where it is missing, and a rollout is refused there', async () => {
      // Each agent hashes its 4 GiB image before it reports it: seconds on a shared CI machine.
      const v1 = await until(async () => (await distribution(1)).complete, 60_000);
      expect(v1).toBe(true);
      const disk = await t.req('POST', '/workers/lab-01/luns/disk', { type: 'master', os: 'windows', name: MASTER, mode: 'reset', disk_agent: 'b' });
      expect([disk.status, disk.body.disks[0].agent, disk.body.disks[0].source.version]).toEqual([201, 'b', 1]);

      const aside = path.join(diskDir('a'), '.incoming');
      makeFile(aside, 4 * GiB, runs);
      fs.renameSync(aside, path.join(diskDir('a'), MASTER));
      const d2 = await until(async () => {
        const r = await t.req('GET', `/masters/${MASTER}/versions/2/distribution`);
        return r.status === 200 ? (r.body as Dist) : null;
      }, 60_000); // version 2 is known once agent a has hashed the new 4 GiB file
      expect(d2).toMatchObject({ version: 2, sha256: sha256(path.join(diskDir('a'), MASTER)), size: 4 * GiB, complete: false });
      expect(d2!.agents).toEqual([
        { agent: 'a', state: 'present' },
        { agent: 'b', state: 'missing' },
      ]);
      const refused = await t.req('POST', `/masters/${MASTER}/rollout`, { version: 2, canary_workers: ['lab-01'] });
      expect([refused.status, refused.body.message]).toEqual([409, `version 2 of ${MASTER} is not on b, where disks of it are; distribute it first (POST /masters/${MASTER}/versions/2/distribute); nothing was started`]);
      const unknown = await t.req('POST', `/masters/${MASTER}/versions/7/distribute`);
      expect([unknown.status, unknown.body.message]).toEqual([404, `version not found: no enabled disk agent holds version 7 of ${MASTER}`]);
    }, 180_000);

    it('a transfer survives killing the receiving agent mid-way: nothing half-written is a version, and asking again resumes after what was written', async () => {
      const started = await t.req('POST', `/masters/${MASTER}/versions/2/distribute`);
      expect(started.status).toBe(202);
      expect(started.body.agents).toEqual([
        { agent: 'a', state: 'present' },
        { agent: 'b', state: 'running', source: 'a', data_bytes: 192 * MiB, bytes_done: 0 },
      ]);
      // Killed (SIGKILL) after its first checkpoint (64 MiB), before the second.
      const mid = await until(async () => (await transfersOfB()).find((x) => x.version === 2 && x.bytes_done >= 80 * MiB), 60_000);
      expect(mid).toMatchObject({ state: 'running', source: `http://127.0.0.1:${PORT_A}` });
      await new Promise<void>((resolve) => {
        b.proc.once('exit', () => resolve());
        b.proc.kill('SIGKILL');
      });
      expect(fs.existsSync(versionFile('b', 2))).toBe(false);
      expect(fs.existsSync(path.join(diskDir('b'), '.masters', MASTER, '.2.img.transfer'))).toBe(true);

      b = await spawnAgent(env('b'));
      const listed = (await t.req('GET', '/masters')).body.agents.find((x: { agent: string }) => x.agent === 'b').masters[0];
      expect(listed.versions.map((v: { version: number }) => v.version)).toEqual([1]);
      const interrupted = (await distribution(2)).agents.find((x) => x.agent === 'b')!;
      expect(interrupted).toMatchObject({ state: 'interrupted', data_bytes: 192 * MiB, error: expect.stringContaining('asking for the transfer again resumes it') });
      expect(interrupted.bytes_done).toBeGreaterThanOrEqual(64 * MiB);
      expect((await t.req('POST', `/masters/${MASTER}/rollout`, { version: 2, canary_workers: ['lab-01'] })).status).toBe(409);

      const resumed = await t.req('POST', `/masters/${MASTER}/versions/2/distribute`);
      expect(resumed.body.agents[1]).toMatchObject({ agent: 'b', state: 'running', bytes_done: interrupted.bytes_done });
      expect(await until(async () => (await distribution(2)).complete, 60_000)).toBe(true);
      const done = (await transfersOfB()).find((x) => x.version === 2)!;
      expect(done).toMatchObject({ state: 'done', data_bytes: 192 * MiB, bytes_done: 192 * MiB, error: null });
      // Only what was left moved the second time.
      expect(done.moved_bytes).toBe(192 * MiB - interrupted.bytes_done!);

      // The same bytes, read-only, sparse where the sender's were, recorded as a transfer.
      expect(sha256(versionFile('b', 2))).toBe(sha256(versionFile('a', 2)));
      const st = fs.statSync(versionFile('b', 2));
      expect([st.size, st.mode & 0o777]).toEqual([4 * GiB, 0o444]);
      expect(st.blocks * 512).toBeLessThan(256 * MiB);
      const v2 = (await t.req('GET', '/masters')).body.catalog[0].versions[1];
      expect(v2).toMatchObject({ version: 2, agents: ['a', 'b'], origin: 'drop' });
      const onB = (await t.req('GET', '/masters')).body.agents.find((x: { agent: string }) => x.agent === 'b').masters[0].versions[1];
      expect(onB).toMatchObject({ version: 2, origin: 'transfer', sha256: v2.sha256 });
      expect(fs.readdirSync(path.join(diskDir('b'), '.masters', MASTER)).filter((f) => f.startsWith('.'))).toEqual([]);

      // Now the rollout can use it on b.
      expect((await t.req('POST', `/masters/${MASTER}/rollout`, { version: 2, canary_workers: ['lab-01'] })).status).toBe(200);
      const audit = (await t.req('GET', '/operations?op=master.version.distribute')).body.entries;
      expect(audit.map((e: { transfers: string[] }) => e.transfers)).toEqual([['b<-a'], ['b<-a']]);
      // The sender's token never left the control plane (the receiver got a ticket): in no log, no record.
      expect(JSON.stringify(audit)).not.toContain(TOKEN_A);
      expect(b.output() + a.output()).not.toContain(TOKEN_A);
    }, 120_000);

    it('the sender opens one version to a ticket, nothing else; the receiver checks what it is given', async () => {
      const ticket = (v: number, expires = Math.floor(Date.now() / 1000) + 60) => signTransferTicket(TOKEN_A, MASTER, v, expires);
      const onA = (p: string, t: string) => fetch(`http://127.0.0.1:${PORT_A}${p}`, { headers: { 'x-kurrent-transfer-ticket': t } });
      expect((await onA(`/masters/${MASTER}/versions/2/extents`, ticket(2))).status).toBe(200);
      expect((await onA(`/masters/${MASTER}/versions/2/content?offset=0&length=4096`, ticket(2))).status).toBe(200);
      // Not another version, not another route, not once expired, not signed with another token.
      for (const [p, t] of [
        [`/masters/${MASTER}/versions/1/extents`, ticket(2)],
        ['/luns', ticket(2)],
        ['/masters/transfers', ticket(2)],
        [`/masters/${MASTER}/versions/2/extents`, ticket(2, Math.floor(Date.now() / 1000) - 1)],
        [`/masters/${MASTER}/versions/2/extents`, signTransferTicket(TOKEN_B, MASTER, 2, Math.floor(Date.now() / 1000) + 60)],
      ]) {
        expect([p, (await onA(p, t)).status]).toEqual([p, 401]);
      }
      const post = (body: Record<string, unknown>) => agentB(`/masters/${MASTER}/transfers`, { method: 'POST', body: JSON.stringify(body) });
      const wrong = await post({ version: 2, source_url: `http://127.0.0.1:${PORT_A}`, source_ticket: 'not-a-ticket' });
      expect([wrong.status, ((await wrong.json()) as { message: string }).message]).toEqual([502, expect.stringMatching(/^source_url: the sending agent could not give version 2 of _tpl_win11\.img: http:\/\/127\.0\.0\.1:\d+ answered 401: invalid or expired transfer ticket/)]);
      const withPath = await post({ version: 2, source_url: `http://127.0.0.1:${PORT_A}/x`, source_ticket: ticket(2) });
      expect([withPath.status, ((await withPath.json()) as { message: string }).message]).toEqual([400, expect.stringMatching(/^source_url: must be http\(s\):\/\/host\[:port\] without credentials, path or query/)]);
      const tokenField = await post({ version: 2, source_url: `http://127.0.0.1:${PORT_A}`, source_token: TOKEN_A });
      expect([tokenField.status, ((await tokenField.json()) as { message: string }).message]).toEqual([400, 'source_token: unknown field source_token; source_ticket: is required']);
      // Asked again for a version it holds with the same bytes: done at once, nothing moved.
      const again = await post({ version: 2, source_url: `http://127.0.0.1:${PORT_A}`, source_ticket: ticket(2) });
      expect([again.status, await again.json()]).toEqual([202, expect.objectContaining({ state: 'done', moved_bytes: 0 })]);

      // Version 3 dropped separately on b (other bytes) cannot be overwritten by a's version 3.
      makeFile(path.join(diskDir('b'), '.incoming'), MiB, [{ offset: 0, bytes: Buffer.from('B-ONLY') }]);
      fs.renameSync(path.join(diskDir('b'), '.incoming'), path.join(diskDir('b'), MASTER));
      makeFile(path.join(diskDir('a'), '.incoming'), MiB, [{ offset: 0, bytes: Buffer.from('A-ONLY') }]);
      fs.renameSync(path.join(diskDir('a'), '.incoming'), path.join(diskDir('a'), MASTER));
      const v3 = await until(async () => {
        const r = await t.req('GET', `/masters/${MASTER}/versions/3/distribution`);
        return r.status === 200 && r.body.agents.every((x: { state: string }) => x.state !== 'missing') ? (r.body as Dist) : null;
      });
      expect(v3!.agents.map((x) => x.state).sort()).toEqual(['conflict', 'present']);
      const clash = await post({ version: 3, source_url: `http://127.0.0.1:${PORT_A}`, source_ticket: ticket(3) });
      expect([clash.status, ((await clash.json()) as { message: string }).message]).toEqual([409, expect.stringMatching(/^version: _tpl_win11\.img has another version 3 here \(sha256 [0-9a-f]{12}, the sender's [0-9a-f]{12}\); nothing was copied$/)]);
    }, 60_000);
  });
});
