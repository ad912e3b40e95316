import { NestFastifyApplication } from '@nestjs/platform-fastify';
import { ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAgentConfig } from '../../src/storage-agent/agent-config';
import { createAgentApp } from '../../src/storage-agent/agent.factory';
import { injector, Res, tempDir } from './app';

export interface TestAgent {
  app: NestFastifyApplication;
  dir: string;
  diskDir: string;
  env: Record<string, string>;
  req: (method: string, url: string, body?: unknown, headers?: Record<string, string>) => Promise<Res>;
  close: () => Promise<void>;
}

/** The storage agent on a temp DISK_DIR/state dir, spoken to through HTTP injection. */
export async function startAgent(env: Record<string, string>, dir = tempDir('kurrent-agent-')): Promise<TestAgent> {
  const fullEnv: Record<string, string> = {
    DISK_DIR: path.join(dir, 'images'),
    IPXE_AGENT_STATE_DIR: path.join(dir, 'state'),
    IPXE_AGENT_LOG_LEVEL: 'silent',
    ...env,
  };
  const app = await createAgentApp(loadAgentConfig(fullEnv), { quiet: true });
  await app.init();
  await app.getHttpAdapter().getInstance().ready();
  const req = injector(app, fullEnv.IPXE_AGENT_TOKEN, 'agent.openapi.json');
  return { app, dir, diskDir: fullEnv.DISK_DIR, env: fullEnv, req, close: () => app.close() };
}

/** A real tgtd (Debian `tgt`, userspace) on its own management port and loopback portal. */
export class Tgtd {
  proc: ChildProcess | null = null;
  constructor(
    readonly controlPort: number,
    readonly portalPort: number,
  ) {}

  async start(): Promise<void> {
    this.proc = spawn('tgtd', ['-f', '-C', String(this.controlPort), '--iscsi', `portal=127.0.0.1:${this.portalPort}`], { stdio: 'ignore' });
    for (let i = 0; i < 100; i++) {
      try {
        this.show();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    throw new Error('tgtd did not start');
  }

  show(): string {
    return execFileSync('tgtadm', ['-C', String(this.controlPort), '--lld', 'iscsi', '--mode', 'target', '--op', 'show'], { encoding: 'utf8', stdio: 'pipe' });
  }

  /** tgtd's CHAP accounts (names only: tgtd never shows a secret). */
  accounts(): string[] {
    const out = execFileSync('tgtadm', ['-C', String(this.controlPort), '--lld', 'iscsi', '--mode', 'account', '--op', 'show'], { encoding: 'utf8', stdio: 'pipe' });
    return out.split('\n').slice(1).map((l) => l.trim()).filter(Boolean);
  }

  /**
   * A real iSCSI login (libiscsi's iscsi-inq) to LUN 1 of a target as `initiator`, with CHAP when
   * given: whether the target let it in and read the disk's INQUIRY data.
   */
  login(target: string, initiator: string, chap?: { userid: string; secret: string }): Promise<{ ok: boolean; out: string }> {
    const auth = chap ? `${chap.userid}%${chap.secret}@` : '';
    return new Promise((resolve) => {
      execFile('iscsi-inq', ['-i', initiator, `iscsi://${auth}127.0.0.1:${this.portalPort}/${target}/1`], { timeout: 20_000, encoding: 'utf8' }, (err, stdout, stderr) =>
        resolve({ ok: !err && /Peripheral Device Type:DIRECT_ACCESS/.test(stdout), out: `${stdout}${stderr}` }),
      );
    });
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null) return;
    // tgtd refuses a plain stop while targets exist; the agent must cope with a lost tgtd.
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGKILL');
    });
  }
}

export function makeFile(file: string, size: number, data?: { offset: number; bytes: Buffer }[]): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const fd = fs.openSync(file, 'w');
  fs.ftruncateSync(fd, size);
  for (const d of data ?? []) fs.writeSync(fd, d.bytes, 0, d.bytes.length, d.offset);
  fs.closeSync(fd);
}

export function listTree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      out.push(path.relative(dir, p) + (e.isSymbolicLink() ? ` -> ${fs.readlinkSync(p)}` : e.isDirectory() ? '/' : `=${fs.readFileSync(p, 'utf8').trim()}`));
      if (e.isDirectory()) walk(p);
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return out.sort();
}

/**
 * A storage agent as a real process (node dist/src/storage-agent/main.js) on a loopback port. Its output
 * is kept, and a start that fails says why: exit code, the last lines the agent printed, and what
 * the last probe of /healthz got.
 */
export interface SpawnedAgent {
  proc: ChildProcess;
  url: string;
  /** Everything the agent printed so far (its logs). */
  output: () => string;
  stop: () => Promise<void>;
}

export async function spawnAgent(env: Record<string, string>): Promise<SpawnedAgent> {
  const port = env.IPXE_AGENT_PORT;
  const started = Date.now();
  const proc = spawn(process.execPath, [path.join(__dirname, '../../dist/src/storage-agent/main.js')], {
    env: { ...process.env, IPXE_AGENT_HOST: '127.0.0.1', IPXE_AGENT_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let all = '';
  const keep = (b: Buffer) => {
    all += b.toString('utf8');
    output = all.slice(-8000);
  };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  const why = (what: string, probe: string) =>
    new Error(`${what} (after ${Date.now() - started} ms; last /healthz probe: ${probe}); agent output:\n${output.split('\n').slice(-30).join('\n')}`);
  const url = `http://127.0.0.1:${port}`;
  let probe = 'none';
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw why(`agent on ${url} exited (${proc.exitCode ?? proc.signalCode})`, probe);
    try {
      const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
      if (r.ok) break;
      probe = `HTTP ${r.status}`;
    } catch (e) {
      probe = String((e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message);
    }
    if (Date.now() - started > 60_000) {
      proc.kill('SIGKILL');
      throw why(`agent on ${url} not healthy`, probe);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  // Keep draining the pipes so a chatty agent never blocks on a full pipe.
  return {
    proc,
    url,
    output: () => all,
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}

/**
 * A filesystem made by `mkfs` on a sparse image of `bytes`, loop-mounted for the enclosing describe
 * block (root): beforeAll mounts, afterAll unmounts and removes it. Returns the mount point.
 */
export function useLoopMount(prefix: string, bytes: number, mkfs: string[]): string {
  const dir = tempDir(prefix);
  const img = path.join(dir, 'fs.img');
  const mnt = path.join(dir, 'mnt');
  beforeAll(() => {
    makeFile(img, bytes);
    execFileSync(mkfs[0], [...mkfs.slice(1), img]);
    fs.mkdirSync(mnt);
    execFileSync('mount', ['-o', 'loop', img, mnt]);
  });
  afterAll(() => {
    execFileSync('umount', [mnt]);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return mnt;
}
