import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as http from 'node:http';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { readCredentialsOnDisk } from '../../src/control-plane/repositories/credentials/file-credential.repository';
import { FileSystem, TEMP_FILE } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';

/**
 * kill -9 under a mixed write storm: a child control plane (dist/, the production build) is
 * killed at random moments and at injected points between the files of one commit or checkpoint,
 * restarted, and checked: every acknowledged write is there, every invariant holds, audit ids
 * strictly increase, no temp file is left.
 */

const MAIN = path.join(__dirname, '../../dist/src/control-plane/main.js');
const PRELOAD = path.join(__dirname, '../support/fault-preload.js');
const KILLS = 24;

function rng(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hex = (n: number) => n.toString(16).padStart(2, '0');

class ControlPlane {
  proc: ChildProcess | null = null;
  exited: Promise<void> = Promise.resolve();
  stderr = '';
  constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  async start(fault = ''): Promise<void> {
    this.stderr = '';
    // The fault points are armed by a preloaded test module, not by the production code.
    const proc = spawn(process.execPath, ['--require', PRELOAD, MAIN], {
      env: {
        PATH: process.env.PATH,
        IPXE_CP_PORT: String(this.port),
        IPXE_CP_HOST: '127.0.0.1',
        IPXE_CP_CONFIG_DIR: path.join(this.dir, 'config'),
        IPXE_CP_STATE_DIR: path.join(this.dir, 'state'),
        IPXE_CP_DNSMASQ_DIR: path.join(this.dir, 'dnsmasq'),
        IPXE_CP_LOG_LEVEL: 'warn',
        // Checkpoints happen during the storm, so kills land inside them too.
        IPXE_CP_CHECKPOINT_MS: '60',
        IPXE_CP_REPORT_FLUSH_MS: '50',
        KURRENT_TEST_FAULT: fault,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.proc = proc;
    proc.stderr!.on('data', (b) => (this.stderr += b.toString()));
    this.exited = new Promise((r) => proc.once('exit', () => r()));
    const end = Date.now() + 20_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode) throw new Error(`control plane exited at start: ${this.stderr}`);
      try {
        if ((await this.req('GET', '/healthz')).status === 200) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > end) throw new Error(`control plane did not start: ${this.stderr}`);
      await sleep(50);
    }
  }

  get alive(): boolean {
    return !!this.proc && this.proc.exitCode === null && !this.proc.signalCode;
  }

  async kill(): Promise<void> {
    if (this.alive) this.proc!.kill('SIGKILL');
    await this.exited;
  }

  /** Every 5xx answered (a killed process answers nothing; a live one must never fail a request). */
  serverErrors: string[] = [];

  /** One request on a fresh connection (no keep-alive socket outlives the test). */
  req(method: string, url: string, body?: unknown): Promise<{ status: number; body: any }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const r = http.request(
        {
          host: '127.0.0.1',
          port: this.port,
          path: url,
          method,
          agent: false,
          timeout: 10_000,
          headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c) => (text += c));
          res.on('end', () => {
            let parsed: unknown;
            try {
              parsed = text ? JSON.parse(text) : undefined;
            } catch {
              parsed = text;
            }
            const status = res.statusCode ?? 0;
            // A kill shows as a failed connection, never as an answer: any 5xx is a defect.
            if (status >= 500) this.serverErrors.push(`${method} ${url} -> ${status} ${text.slice(0, 200)}`);
            resolve({ status, body: parsed });
          });
          res.on('error', reject);
        },
      );
      r.on('timeout', () => r.destroy(new Error('timeout')));
      r.on('error', reject);
      r.end(payload);
    });
  }
}

/** What the storm was told succeeded: all of it must survive any kill. */
interface Acked {
  devices: Set<string>;
  workers: Set<string>;
  deleted: Set<string>;
  pairs: Map<string, string>;
}

describe('crash consistency (kill -9 under a write storm)', () => {
  let cp: ControlPlane;

  /** Ends the control plane of the test before (if any) and starts one on a new state directory. */
  const freshControlPlane = async (prefix: string) => {
    if (cp) {
      await cp.kill();
      fs.rmSync(cp.dir, { recursive: true, force: true });
    }
    cp = new ControlPlane(tempDir(prefix), await freePort());
    await cp.start();
  };
  afterAll(async () => {
    await cp?.kill();
    if (cp) fs.rmSync(cp.dir, { recursive: true, force: true });
  });

  it(`${KILLS} kills at random moments and between the files of one commit lose no acknowledged write`, async () => {
    cp = new ControlPlane(tempDir('kurrent-crash-'), await freePort());
    const rand = rng(7);
    const pick = (n: number) => Math.floor(rand() * n);
    const acked: Acked = { devices: new Set(), workers: new Set(), deleted: new Set(), pairs: new Map() };
    const shared = Array.from({ length: 12 }, (_, i) => `02:5a:00:00:00:${hex(i)}`);

    await cp.start();
    for (const mac of shared) expect((await cp.req('POST', '/devices', { mac })).status).toBe(201);
    expect((await cp.req('POST', '/workers/batch', { count: 8, name_prefix: 'pool-' })).status).toBe(200);

    // Injected kill points: inside a checkpoint between devices.yml and workers.yml, right after a
    // commit is durable but before anything else, between the ledger and dhcp-hosts.conf, and
    // right after an audit append.
    const injected = ['rename:devices.yml', 'append:ledger.wal', 'rename:dhcp-hosts.conf', 'append:operations.jsonl'];
    let injectedKills = 0;
    const faultOf = (cycle: number) => (cycle % 2 === 1 ? `${injected[(cycle >> 1) % injected.length]}@${2 + pick(25)}` : '');
    let fault = '';
    for (let cycle = 0; cycle < KILLS; cycle++) {
      let stop = false;
      let n = 0;
      // What the lanes met besides acknowledgements, for the message of a cycle that made no progress.
      const met = new Map<string, number>();
      const note = (what: string): void => void met.set(what, (met.get(what) ?? 0) + 1);
      const lane = async (fn: (i: number) => Promise<void>) => {
        while (!stop && cp.alive) {
          try {
            await fn(n++);
          } catch (e) {
            // A connection reset by the kill ends the lane; on a live process it is noted and the
            // lane goes on (one failed connection must not silence a lane for the whole cycle).
            if (stop || !cp.alive) return;
            note(`error ${(e as Error).message}`);
            await sleep(20);
          }
        }
      };
      const lanes = [
        // Registrations through the unauthenticated report (durable before the answer).
        lane(async (i) => {
          const mac = `02:cc:${hex(cycle)}:${hex(i >> 8)}:${hex(i & 255)}:01`;
          const r = await cp.req('GET', `/devices/report?mac=${mac}&serial=S${i}`);
          if (r.status === 200) acked.devices.add(mac);
          else note(`report ${r.status}`);
        }),
        // Worker identities, a third of them deleted again.
        lane(async (i) => {
          const id = `k${cycle}-${i}`;
          const r = await cp.req('POST', '/workers', { worker_id: id });
          if (r.status !== 201) return;
          acked.workers.add(id);
          if (i % 3 !== 0) return;
          // While the delete is in flight, either outcome is correct.
          acked.workers.delete(id);
          if ((await cp.req('DELETE', `/workers/${id}`)).status === 200) acked.deleted.add(id);
        }),
        // A device and a worker bound in one request (devices.yml + workers.yml + dhcp-hosts.conf).
        lane(async (i) => {
          const mac = `02:dd:${hex(cycle)}:${hex(i >> 8)}:${hex(i & 255)}:02`;
          const d = await cp.req('POST', '/devices', { mac });
          if (d.status !== 201) return note(`POST /devices ${d.status}`);
          acked.devices.add(mac);
          const id = `p${cycle}-${i}`;
          const w = await cp.req('POST', '/workers', { worker_id: id, mac });
          if (w.status === 201) {
            acked.workers.add(id);
            acked.pairs.set(mac, id);
          } else note(`POST /workers with mac ${w.status}`);
        }),
        // Batches.
        lane(async (i) => {
          const r = await cp.req('POST', '/workers/batch', { count: 3, name_prefix: `b${cycle}x${i}-` });
          if (r.status === 200) for (const w of r.body.succeeded) acked.workers.add(w.worker_id);
        }),
        // Chaos on a shared pool: binds, forced swaps, unbinds (checked through the invariants).
        lane(async () => {
          const mac = shared[pick(shared.length)];
          const w = `pool-${String(pick(8) + 1).padStart(2, '0')}`;
          const k = pick(3);
          if (k === 0) await cp.req('POST', `/devices/${mac}/bind?worker_id=${w}`);
          else if (k === 1) await cp.req('POST', `/devices/${mac}/bind?worker_id=${w}&force=true`);
          else await cp.req('DELETE', `/devices/${mac}/bind`);
        }),
        // Settings.
        lane(async () => {
          await cp.req('PUT', '/settings/auto-register', { enabled: true });
        }),
      ];
      // A random kill comes after a random delay AND after this cycle's storm has been acknowledged
      // some writes, so a slow machine gets as much work as a fast one (the delay alone once left CI
      // with too few writes to mean anything). A storm that stalls fails the test at its deadline.
      const devicesBefore = acked.devices.size;
      const pairsBefore = acked.pairs.size;
      const progressed = () => acked.devices.size - devicesBefore >= 20 && acked.pairs.size - pairsBefore >= 2;
      const earliest = Date.now() + (fault ? 3000 : 150 + pick(700));
      const deadline = Date.now() + 30_000;
      while (cp.alive && Date.now() < deadline && (Date.now() < earliest || (!fault && !progressed()))) await sleep(10);
      if (fault && !cp.alive) injectedKills++;
      if (!fault && !progressed()) {
        const seen = JSON.stringify(Object.fromEntries(met));
        throw new Error(
          `cycle ${cycle}: the storm was not acknowledged 20 registrations and 2 pairs in 30 s (got ${acked.devices.size - devicesBefore} and ${acked.pairs.size - pairsBefore}; alive ${cp.alive}); lanes met ${seen}; stderr: ${cp.stderr.slice(-2000)}`,
        );
      }
      await cp.kill();
      stop = true;
      await Promise.all(lanes);

      // Restart (armed with the next cycle's fault point: reads do not pass it) and check.
      fault = faultOf(cycle + 1);
      await cp.start(fault);
      await verify(cp, acked);
    }
    // A second control plane on the same state directory is refused (exit 4, naming the holder, no stack).
    const second = spawnSync(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH, IPXE_CP_PORT: String(await freePort()), IPXE_CP_HOST: '127.0.0.1', IPXE_CP_STATE_DIR: path.join(cp.dir, 'state'), IPXE_CP_CONFIG_DIR: path.join(cp.dir, 'config'), IPXE_CP_DNSMASQ_DIR: path.join(cp.dir, 'dnsmasq'), IPXE_CP_LOG_LEVEL: 'silent' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(second.status).toBe(4);
    expect(second.stderr).not.toMatch(/^\s+at /m);
    expect(second.stderr).toContain(`kurrent: cannot start: state directory ${path.join(cp.dir, 'state')} is in use by another running control plane (pid ${cp.proc!.pid}); stop it, or give this one its own IPXE_CP_STATE_DIR\n`);
    // A port in use: a message naming it and the variable, exit 4, no stack.
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    const busyPort = (busy.address() as net.AddressInfo).port;
    const third = spawnSync(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH, IPXE_CP_PORT: String(busyPort), IPXE_CP_HOST: '127.0.0.1', IPXE_CP_STATE_DIR: tempDir('kurrent-busy-'), IPXE_CP_CONFIG_DIR: path.join(cp.dir, 'config'), IPXE_CP_DNSMASQ_DIR: tempDir('kurrent-busy-dns-'), IPXE_CP_LOG_LEVEL: 'silent' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    busy.close();
    expect(third.status).toBe(4);
    expect(third.stderr).not.toMatch(/^\s+at /m);
    expect(third.stderr).toContain(`kurrent: cannot start: 127.0.0.1:${busyPort} is already in use by another process (EADDRINUSE); choose another with IPXE_CP_PORT / IPXE_CP_HOST\n`);
    // The injected points were reached (not only random kills).
    expect(injectedKills).toBeGreaterThanOrEqual(6);
    // "Not acknowledged" means the connection died with the process, never a 5xx from a live one.
    expect(cp.serverErrors).toEqual([]);
    expect(acked.devices.size).toBeGreaterThan(200);
    expect(acked.pairs.size).toBeGreaterThan(20);
  }, 400_000); // 24 restarts on a loaded 2-core CI machine: the default 120 s is too tight

  it('a kill right after a commit is durable, before its audit entry is written: the entry is recovered at start', async () => {
    await freshControlPlane('kurrent-crash-audit-');
    expect((await cp.req('POST', '/devices', { mac: '02:5b:00:00:00:01' })).status).toBe(201);
    await cp.kill();
    // The first change-log append of this process is the worker's commit: it dies right after it.
    await cp.start('append:ledger.wal@1');
    await expect(cp.req('POST', '/workers', { worker_id: 'cut', mac: '02:5b:00:00:00:01' })).rejects.toThrow();
    await cp.exited;
    expect(fs.readFileSync(path.join(cp.dir, 'state/operations.jsonl'), 'utf8')).not.toContain('"worker_id":"cut"');
    await cp.start();
    expect((await cp.req('GET', '/workers/cut')).status).toBe(200);
    const ops = (await cp.req('GET', '/operations?worker_id=cut')).body.entries.map((e: any) => [e.op, e.status, e.mac]);
    expect(ops).toEqual([
      ['worker.create', 'ok', '02:5b:00:00:00:01'],
      ['device.bind', 'ok', '02:5b:00:00:00:01'],
    ]);
    // Ids stay increasing after the recovered ones.
    expect((await cp.req('POST', '/devices', { mac: '02:5b:00:00:00:02' })).status).toBe(201);
    await expectIdsInOrder(cp);
    await verify(cp, { devices: new Set(['02:5b:00:00:00:01', '02:5b:00:00:00:02']), workers: new Set(['cut']), deleted: new Set(), pairs: new Map([['02:5b:00:00:00:01', 'cut']]) });
  });

  it('a kill right after a credential rotation is durable, before its audit entry is written: the entry is recovered at start', async () => {
    await freshControlPlane('kurrent-crash-cred-audit-');
    expect((await cp.req('POST', '/workers', { worker_id: 'rot' })).status).toBe(201);
    const issued = await cp.req('PUT', '/workers/rot/credential', { generate: true });
    expect(issued.status).toBe(200);
    await cp.kill();
    // The first credential-log append of this process is the rotation: it dies right after it.
    await cp.start('append:nvme-credentials.wal@1');
    await expect(cp.req('PUT', '/workers/rot/credential', { generate: true })).rejects.toThrow();
    await cp.exited;
    const trail = () => fs.readFileSync(path.join(cp.dir, 'state/operations.jsonl'), 'utf8');
    expect(trail()).not.toContain('credential.rotate');
    await cp.start();
    const now = await cp.req('GET', '/workers/rot/credential');
    expect(now.status).toBe(200);
    expect(now.body.dhchap_key_sha256).not.toBe(issued.body.dhchap_key_sha256);
    // The rotation that survived the kill is audited, with the hash of the secret it set.
    const ops = (await cp.req('GET', '/operations?worker_id=rot')).body.entries.map((e: any) => [e.op, e.dhchap_key_sha256]);
    expect(ops).toEqual([
      ['worker.create', undefined],
      ['credential.issue', issued.body.dhchap_key_sha256],
      ['credential.rotate', now.body.dhchap_key_sha256],
    ]);
    expect(trail()).not.toMatch(/DHHC-1:/);
    // Ids stay increasing and unique after the recovered one.
    expect((await cp.req('PUT', '/workers/rot/credential', { generate: true })).status).toBe(200);
    await expectIdsInOrder(cp);
  });

  it('a kill right after a settings change is in place, before its audit entry is written: the entry is recovered at start', async () => {
    await freshControlPlane('kurrent-crash-settings-audit-');
    expect((await cp.req('GET', '/settings/auto-register')).body).toEqual({ enabled: true });
    await cp.kill();
    // The first rename of settings.json in this process is the change: it dies right after it.
    await cp.start('rename:settings.json@1');
    await expect(cp.req('PUT', '/settings/auto-register', { enabled: false })).rejects.toThrow();
    await cp.exited;
    const trail = path.join(cp.dir, 'state/operations.jsonl');
    expect(fs.existsSync(trail) ? fs.readFileSync(trail, 'utf8') : '').not.toContain('settings.auto_register');
    await cp.start();
    expect((await cp.req('GET', '/settings/auto-register')).body).toEqual({ enabled: false });
    const ops = (await cp.req('GET', '/operations?op=settings.auto_register')).body.entries.map((e: any) => [e.enabled, e.previous]);
    expect(ops).toEqual([[false, true]]);
    // Ids stay increasing and unique after the recovered one.
    expect((await cp.req('PUT', '/settings/auto-register', { enabled: true })).status).toBe(200);
    await expectIdsInOrder(cp);
  });

  it('a kill right after agents.yml is replaced, before the registration is audited: the entry is recovered at start, and the token never lands in the log', async () => {
    await freshControlPlane('kurrent-crash-agent-audit-');
    await cp.kill();
    // The first rename of agents.yml in this process is the registration: it dies right after it.
    await cp.start('rename:agents.yml@1');
    await expect(cp.req('POST', '/agents', { id: 'sn1', base_url: 'http://127.0.0.1:9', token: 'secret-agent-token', role: { disk: true } })).rejects.toThrow();
    await cp.exited;
    const trail = path.join(cp.dir, 'state/operations.jsonl');
    expect(fs.existsSync(trail) ? fs.readFileSync(trail, 'utf8') : '').not.toContain('agent.create');
    const intent = fs.readFileSync(path.join(cp.dir, 'state/agents.wal'), 'utf8');
    expect(intent).toContain('agent.create');
    expect(intent).not.toContain('secret-agent-token');
    expect(fs.statSync(path.join(cp.dir, 'state/agents.wal')).mode & 0o777).toBe(0o600);
    await cp.start();
    expect((await cp.req('GET', '/agents')).body.map((a: any) => a.id)).toEqual(['sn1']);
    const ops = (await cp.req('GET', '/operations?op=agent.create')).body.entries.map((e: any) => [e.agent, e.base_url]);
    expect(ops).toEqual([['sn1', 'http://127.0.0.1:9']]);
    expect(fs.readFileSync(trail, 'utf8')).not.toContain('secret-agent-token');
  });

  it('a kill right after a boot-loop hold is released: the release was written before it was answered, and the device is not held again after the restart', async () => {
    await freshControlPlane('kurrent-crash-release-');
    const mac = '02:5c:00:00:00:01';
    expect((await cp.req('POST', '/devices', { mac })).status).toBe(201);
    // A worker with no disk: every boot is answered with a reboot, so three boots make a loop.
    expect((await cp.req('POST', '/workers', { worker_id: 'looper', mac })).status).toBe(201);
    const boot = async () => {
      expect((await cp.req('GET', `/devices/report?mac=${mac}`)).status).toBe(200);
      return (await cp.req('GET', `/boot-vars?mac=${mac}`)).body as string;
    };
    for (let i = 0; i < 3; i++) await boot();
    expect(await boot()).toContain('# boot-loop hold');
    const rel = await cp.req('POST', `/boots/${mac}/release`);
    expect(rel.body).toEqual({ mac, looping: false, held: false, released: true });
    // At once: boot events are otherwise written every 500 ms.
    await cp.kill();
    await cp.start();
    const after = (await cp.req('GET', `/boots?mac=${mac}`)).body.items;
    expect(after.length).toBeGreaterThanOrEqual(4);
    expect(after.every((b: any) => b.looping === false)).toBe(true);
    expect(await boot()).not.toContain('# boot-loop hold');
    expect((await cp.req('GET', '/operations?op=device.boot_hold.release')).body.entries.map((e: any) => e.mac)).toEqual([mac]);
  });

  it('a hand edit made while the control plane was down is never undone by the change-log replay: refused where they disagree, kept where they do not', async () => {
    await freshControlPlane('kurrent-crash-edit-');
    const devicesFile = path.join(cp.dir, 'state/devices.yml');
    for (const mac of ['02:5e:00:00:00:01', '02:5e:00:00:00:02']) expect((await cp.req('POST', '/devices', { mac })).status).toBe(201);
    const onDisk = () => (fs.existsSync(devicesFile) ? fs.readFileSync(devicesFile, 'utf8') : '');
    for (const end = Date.now() + 10_000; Date.now() < end && !onDisk().includes('02:5e:00:00:00:02'); ) await new Promise((r) => setTimeout(r, 50));
    await cp.kill();
    // The revoke of 01 is committed (in ledger.wal), then the process dies before any checkpoint.
    await cp.start('append:ledger.wal@1');
    await expect(cp.req('DELETE', '/devices/02:5e:00:00:00:01')).rejects.toThrow();
    await cp.exited;
    const checkpointed = fs.readFileSync(devicesFile, 'utf8');
    expect(checkpointed).toContain('"02:5e:00:00:00:01": {"mac":"02:5e:00:00:00:01"');
    // While it is down, the operator deletes 01 from devices.yml by hand: the commit says revoked.
    fs.writeFileSync(devicesFile, checkpointed.split('\n').filter((l) => !l.includes('"02:5e:00:00:00:01"')).join('\n'));
    const refused = spawnSync(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH, IPXE_CP_PORT: String(await freePort()), IPXE_CP_HOST: '127.0.0.1', IPXE_CP_STATE_DIR: path.join(cp.dir, 'state'), IPXE_CP_CONFIG_DIR: path.join(cp.dir, 'config'), IPXE_CP_DNSMASQ_DIR: path.join(cp.dir, 'dnsmasq'), IPXE_CP_LOG_LEVEL: 'silent' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(refused.status).toBe(3);
    expect(refused.stderr).toMatch(/devices\.yml:1: edited while the control plane was stopped, and 1 entr\(ies\) of the edit differ from acknowledged commits in ledger\.wal that this file does not hold yet \("02:5e:00:00:00:01"\)/);
    // An edit that does not touch what the log holds (a new device by hand) is kept, and the revoke replays.
    fs.writeFileSync(devicesFile, checkpointed.replace(/\n*$/, '\n') + '  "02:5e:00:00:00:09": {"state":"pooled"}\n');
    await cp.start();
    expect((await cp.req('GET', '/devices/02:5e:00:00:00:01')).body.state).toBe('revoked');
    expect((await cp.req('GET', '/devices/02:5e:00:00:00:09')).status).toBe(200);
    expect((await cp.req('GET', '/devices/02:5e:00:00:00:02')).body.state).toBe('pooled');
  });

  it('a kill between a worker delete and its credential removal: a worker re-created with that id never inherits the secret', async () => {
    await freshControlPlane('kurrent-crash-cred-');
    expect((await cp.req('POST', '/workers', { worker_id: 'again' })).status).toBe(201);
    const first = await cp.req('PUT', '/workers/again/credential', { generate: true });
    expect(first.status).toBe(200);
    const secretOf = () => readCredentialsOnDisk(path.join(cp.dir, 'state'), new FileSystem()).credentials.again?.dhchap_key;
    const oldSecret = secretOf()!;
    expect(oldSecret).toMatch(/^DHHC-1:/);
    await cp.kill();
    // The first change-log append of this process is the delete's commit: it dies right after it.
    await cp.start('append:ledger.wal@1');
    await expect(cp.req('DELETE', '/workers/again')).rejects.toThrow();
    await cp.exited;
    expect(secretOf()).toBe(oldSecret); // the kill landed between the two writes
    await cp.start();
    expect((await cp.req('GET', '/workers/again')).status).toBe(404);
    expect((await cp.req('POST', '/workers', { worker_id: 'again' })).status).toBe(201);
    // The leftover is not this worker's: no credential, nothing for /boot-vars, not pushed.
    const none = await cp.req('GET', '/workers/again/credential');
    expect(none.status).toBe(404);
    // The reconciler removes it (audited), and a new issue is a new secret.
    expect((await cp.req('POST', '/reconcile')).status).toBe(200);
    expect(secretOf()).toBeUndefined();
    const del = (await cp.req('GET', '/operations?op=credential.delete')).body.entries;
    expect(del).toEqual([expect.objectContaining({ worker_id: 'again', client: 'reconciler' })]);
    const second = await cp.req('PUT', '/workers/again/credential', { generate: true });
    expect(second.status).toBe(200);
    expect(secretOf()).not.toBe(oldSecret);
    expect(second.body.dhchap_key_sha256).not.toBe(first.body.dhchap_key_sha256);
  });
});

/** The trail's ids, as GET /operations pages them: increasing and unique. */
async function expectIdsInOrder(cp: ControlPlane): Promise<void> {
  const all = (await cp.req('GET', '/operations')).body.entries.map((e: any) => e.id);
  expect(all).toEqual([...all].sort((x: number, y: number) => x - y));
  expect(new Set(all).size).toBe(all.length);
}

async function verify(cp: ControlPlane, acked: Acked): Promise<void> {
  const devices: any[] = (await cp.req('GET', '/devices')).body;
  const workers: any[] = (await cp.req('GET', '/workers')).body;
  const byMac = new Map(devices.map((d) => [d.mac, d]));
  const byId = new Map(workers.map((w) => [w.worker_id, w]));
  for (const mac of acked.devices) expect(byMac.has(mac) ? mac : `missing ${mac}`).toBe(mac);
  for (const id of acked.workers) expect(byId.has(id) ? id : `missing worker ${id}`).toBe(id);
  for (const id of acked.deleted) expect(byId.has(id) ? `deleted worker ${id} is back` : id).toBe(id);
  for (const [mac, id] of acked.pairs) expect(`${mac}->${byMac.get(mac)?.bound_worker_id}`).toBe(`${mac}->${id}`);
  // One device <-> one existing worker.
  const bound = new Map<string, string>();
  for (const d of devices) {
    if (d.state !== 'bound') {
      expect(d.bound_worker_id).toBeNull();
      continue;
    }
    expect(byId.has(d.bound_worker_id) ? 'ok' : `${d.mac} bound to missing ${d.bound_worker_id}`).toBe('ok');
    expect(bound.has(d.bound_worker_id) ? `${d.bound_worker_id} bound twice` : 'ok').toBe('ok');
    bound.set(d.bound_worker_id, d.mac);
  }
  // The projection equals the ledger.
  const rows = [...bound].map(([w, mac]) => [byId.get(w).hostname, mac]).sort((a, b) => (a[0] < b[0] ? -1 : 1));
  expect(fs.readFileSync(path.join(cp.dir, 'dnsmasq/dhcp-hosts.conf'), 'utf8')).toBe(rows.map(([h, m]) => `${m},${h}\n`).join(''));
  // Audit ids strictly increase, and every line is whole JSON.
  const lines = fs.readFileSync(path.join(cp.dir, 'state/operations.jsonl'), 'utf8').split('\n');
  expect(lines.pop()).toBe('');
  let last = 0;
  const created = new Set<string>();
  const binds = new Set<string>();
  for (const l of lines) {
    const e = JSON.parse(l);
    expect(e.id).toBeGreaterThan(last);
    last = e.id;
    if (e.op === 'worker.create') created.add(e.worker_id);
    if (e.op === 'device.bind') binds.add(`${e.mac}->${e.worker_id}`);
  }
  // Every committed change is audited, acknowledged or not (a kill between them loses neither).
  for (const id of byId.keys()) expect(created.has(id) ? id : `no worker.create for ${id}`).toBe(id);
  for (const [w, mac] of bound) expect(binds.has(`${mac}->${w}`) ? 'ok' : `no device.bind for ${mac}->${w}`).toBe('ok');
  // Kills leave no temp file behind once the start has swept.
  expect(fs.readdirSync(path.join(cp.dir, 'state')).filter((f) => TEMP_FILE.test(f))).toEqual([]);
}
