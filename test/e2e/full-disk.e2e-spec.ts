import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describeFiles, freePort, tempDir } from '../helpers/app';

/**
 * Full disks under a production process (dist/src/control-plane/main.js, files store): under its log file, and
 * under its state directory across a kill -9. Boots keep being answered from memory; a full disk
 * is a 507 for writes, never a dead process or a process that cannot start.
 */
const MAIN = path.join(__dirname, '../../dist/src/control-plane/main.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function fill(dir: string): string {
  const filler = path.join(dir, 'filler');
  const fd = fs.openSync(filler, 'w');
  for (const size of [65536, 4096, 1]) {
    try {
      for (;;) fs.writeSync(fd, Buffer.alloc(size, 1));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
    }
  }
  fs.closeSync(fd);
  return filler;
}

class Proc {
  child: ChildProcess | null = null;
  constructor(
    readonly port: number,
    readonly env: Record<string, string>,
    readonly out: number | 'ignore',
  ) {}
  async start(): Promise<void> {
    this.child = spawn(process.execPath, [MAIN], { env: { PATH: process.env.PATH ?? '', IPXE_CP_PORT: String(this.port), IPXE_CP_HOST: '127.0.0.1', ...this.env }, stdio: ['ignore', this.out, this.out] });
    for (const end = Date.now() + 30_000; ; await sleep(100)) {
      if (this.child.exitCode !== null || this.child.signalCode) throw new Error(`exited at start (${this.child.exitCode ?? this.child.signalCode})`);
      if ((await this.req('GET', '/healthz').catch(() => ({ status: 0 }))).status === 200) return;
      if (Date.now() > end) throw new Error('did not start');
    }
  }
  alive(): boolean {
    return !!this.child && this.child.exitCode === null && !this.child.signalCode;
  }
  async kill(): Promise<void> {
    const c = this.child;
    if (!c || !this.alive()) return;
    await new Promise<void>((r) => {
      c.once('exit', () => r());
      c.kill('SIGKILL');
    });
  }
  async req(method: string, url: string, body?: unknown): Promise<{ status: number; text: string }> {
    const r = await fetch(`http://127.0.0.1:${this.port}${url}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    return { status: r.status, text: await r.text() };
  }
}

describeFiles('full disks under a running control plane', () => {
  const mounts: string[] = [];
  let p: Proc | null = null;
  const tmpfs = (size: string) => {
    const mnt = tempDir('kurrent-full-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', mnt]);
    mounts.push(mnt);
    return mnt;
  };
  afterEach(async () => {
    await p?.kill();
    p = null;
    for (const m of mounts.splice(0)) execFileSync('umount', ['-l', m]);
  });

  it('a full disk under the log file: logging fails quietly, boots and writes go on, logging resumes when space is back', async () => {
    const logs = tmpfs('1m');
    const dir = tempDir('kurrent-full-log-');
    const logFile = path.join(logs, 'kurrent.log');
    const fd = fs.openSync(logFile, 'a');
    const env = { IPXE_CP_STATE_DIR: path.join(dir, 'state'), IPXE_CP_CONFIG_DIR: path.join(dir, 'config'), IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'), IPXE_CP_LOG_LEVEL: 'info', IPXE_CP_ACCESS_LOG: 'true' };
    p = new Proc(await freePort(), env, fd);
    await p.start();
    fs.closeSync(fd);
    expect((await p.req('POST', '/devices', { mac: '02:00:00:00:0f:01' })).status).toBe(201);
    expect((await p.req('POST', '/workers', { worker_id: 'lw1', mac: '02:00:00:00:0f:01' })).status).toBe(201);
    const filler = fill(logs);
    // Every request writes an access log line now, and every one fails.
    for (let i = 0; i < 200; i++) expect((await p.req('GET', '/boot-vars?mac=02:00:00:00:0f:01')).text).toContain('boot vars for lw1');
    expect((await p.req('POST', '/devices', { mac: '02:00:00:00:0f:02' })).status).toBe(201);
    expect(p.alive()).toBe(true);
    const failures = Number(/^kurrent_log_write_failures_total (\d+)$/m.exec((await p.req('GET', '/metrics')).text)![1]);
    expect(failures).toBeGreaterThan(0);
    // Space back: the next requests are logged again.
    const before = fs.statSync(logFile).size;
    fs.rmSync(filler);
    let grew = false;
    for (const end = Date.now() + 10_000; Date.now() < end && !grew; await sleep(100)) {
      await p.req('GET', '/healthz');
      grew = fs.statSync(logFile).size > before;
    }
    expect(grew).toBe(true);
    expect(p.alive()).toBe(true);
  });

  it('a state disk that filled up before a kill -9: the control plane starts, answers boots, refuses writes with 507, and recovers when space is back', async () => {
    const state = tmpfs('2m');
    const dir = tempDir('kurrent-full-state-');
    const env = { IPXE_CP_STATE_DIR: state, IPXE_CP_CONFIG_DIR: path.join(dir, 'config'), IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'), IPXE_CP_LOG_LEVEL: 'silent', IPXE_CP_CHECKPOINT_MS: '60000' };
    p = new Proc(await freePort(), env, 'ignore');
    await p.start();
    expect((await p.req('POST', '/devices', { mac: '02:00:00:00:0f:11' })).status).toBe(201);
    expect((await p.req('POST', '/workers', { worker_id: 'sw1', mac: '02:00:00:00:0f:11' })).status).toBe(201);
    const filler = fill(state);
    // The change log's last page may still have room: register until the disk says no.
    let n = 0x20;
    let full = 0;
    for (; n < 0xff && full !== 507; n++) full = (await p.req('POST', '/devices', { mac: `02:00:00:00:0f:${n.toString(16)}` })).status;
    expect(full).toBe(507);
    await p.kill();
    // The change log holds commits not yet checkpointed; the start-up checkpoint cannot be written.
    expect(fs.statSync(path.join(state, 'ledger.wal')).size).toBeGreaterThan(0);
    await p.start();
    expect((await p.req('GET', '/boot-vars?mac=02:00:00:00:0f:11')).text).toContain('boot vars for sw1');
    const refused = await p.req('POST', '/devices', { mac: '02:00:00:00:0f:12' });
    expect(refused.status).toBe(507);
    fs.rmSync(filler);
    let status = 0;
    for (const end = Date.now() + 15_000; Date.now() < end && status !== 201; await sleep(100)) status = (await p.req('POST', '/devices', { mac: '02:00:00:00:0f:12' })).status;
    expect(status).toBe(201);
    expect(JSON.parse((await p.req('GET', '/workers/sw1')).text)).toMatchObject({ worker_id: 'sw1', mac: '02:00:00:00:0f:11' });
  });
});
