import { FileLedgerRepository } from '../src/control-plane/repositories/ledger/file-ledger.repository';
import { ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { keySha256 } from '../src/control-plane/common/device-key';
import { loadConfig } from '../src/control-plane/config/app-config';
import { FileSystem } from '../src/shared/files/file-system';
import { emptyFingerprint, newDevice, newWorker } from '../src/control-plane/repositories/ledger/records';

/** Pin processes to CPUs when taskset exists and there are at least 2 (fair, less noisy A/B). */
const PIN = os.cpus().length >= 2 && fs.existsSync('/usr/bin/taskset');

export interface WrkResult {
  rps: number;
  requests: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
}

const ms = (v: string, unit: string) => Number(v) * (unit === 'us' ? 0.001 : unit === 's' ? 1000 : 1);

/** Runs wrk (1 thread) and parses its --latency report. */
export function wrk(url: string, seconds: number, connections: number, script?: string, env: Record<string, string> = {}, pinned = true): Promise<WrkResult> {
  const args = ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', ...(script ? ['-s', script] : []), url];
  // Load generator on CPU 0, servers on CPU 1 (see startProcess): both servers see the same machine.
  const [cmd, argv] = PIN && pinned ? ['taskset', ['-c', '0', 'wrk', ...args]] : ['wrk', args];
  return new Promise((resolve, reject) => {
    execFile(cmd, argv, { env: { ...process.env, ...env } }, (err, stdout) => {
      if (err) return reject(new Error(`wrk failed (apt-get install wrk): ${err.message}`));
      const num = (re: RegExp) => Number(re.exec(stdout)?.[1] ?? NaN);
      const lat = (pct: string) => {
        const m = new RegExp(`\\s${pct}%\\s+([\\d.]+)(us|ms|s)`).exec(stdout);
        return m ? ms(m[1], m[2]) : NaN;
      };
      const errs = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
      resolve({
        rps: num(/Requests\/sec:\s+([\d.]+)/),
        requests: num(/(\d+) requests in/),
        p50: lat('50'),
        p99: lat('99'),
        non2xx: num(/Non-2xx or 3xx responses: (\d+)/) || 0,
        errors: errs ? errs.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
      });
    });
  });
}

/** Runs a node script as the load generator (pinned like wrk) and resolves with its stdout. */
export function runClient(script: string, args: string[]): Promise<string> {
  const [cmd, argv] = PIN ? ['taskset', ['-c', '0', process.execPath, script, ...args]] : [process.execPath, [script, ...args]];
  return new Promise((resolve, reject) => {
    execFile(cmd, argv, { maxBuffer: 1 << 20 }, (err, stdout, stderr) => (err ? reject(new Error(`${script}: ${err.message} ${stderr}`)) : resolve(stdout)));
  });
}

/** How `npm run start:prod` starts the control plane. */
export interface ProdCommand {
  flags: string[];
  script: string;
  /** The environment it sets for the process (glibc's malloc settings). */
  env: Record<string, string>;
}

/** How `npm run start:prod` starts the control plane: its environment, node flags and script (kept in step). */
export function prodCommand(root: string): ProdCommand {
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  const m = /^exec (?:env ((?:[A-Z_]+=\S+ )+))?node (.+)$/.exec(pkg.scripts['start:prod']);
  if (!m) throw new Error(`start:prod is not "exec [env NAME=value ...] node ...": ${pkg.scripts['start:prod']}`);
  const env = Object.fromEntries((m[1] ?? '').split(' ').filter(Boolean).map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]));
  const words = m[2].split(/\s+/);
  // BENCH_NODE_FLAGS compares other V8 flags on the same bench (e.g. "--max-semi-space-size=64 --single-threaded-gc").
  const flags = process.env.BENCH_NODE_FLAGS !== undefined ? process.env.BENCH_NODE_FLAGS.split(/\s+/).filter(Boolean) : words.filter((w) => w.startsWith('--'));
  return { flags, script: path.join(root, words.find((w) => !w.startsWith('--'))!), env };
}

export const macOf = (i: number) =>
  ['02', '00', ...[(i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255, i & 255].map((b) => b.toString(16).padStart(2, '0'))].join(':');
export const workerOf = (i: number) => `seat-${String(i).padStart(5, '0')}`;

/** Writes a ledger of n pooled-then-bound devices and n workers through the real store code (optionally with device public keys). */
export async function seedLedger(dir: string, n: number, pubkeys?: string[]): Promise<void> {
  const store = new FileLedgerRepository(loadConfig({ IPXE_CP_STATE_DIR: path.join(dir, 'state') }), new FileSystem());
  await store.onModuleInit();
  const now = new Date().toISOString();
  await store.commit((tx) => {
    for (let i = 0; i < n; i++) {
      const id = workerOf(i);
      tx.workers.set(id, newWorker(id, { boot: { menu_default: 'exit', menu_timeout: 3000 }, created_at: now }));
      tx.devices.set(
        macOf(i),
        newDevice(macOf(i), {
          uuid: `4c4c4544-0000-1000-8000-${String(i).padStart(12, '0')}`,
          state: 'bound',
          bound_worker_id: id,
          source: 'ipxe',
          fingerprint: { ...emptyFingerprint(), manufacturer: 'ACME', product: 'Seat', serial: `SN${i}`, mem_total: 32768 },
          first_seen: now,
          last_seen: now,
          ...(pubkeys ? { pubkey: pubkeys[i], key_hash: keySha256(pubkeys[i]), key_claimed_at: now } : {}),
        }),
      );
    }
  });
  await store.onApplicationShutdown(); // checkpoint: the YAML files hold it all
}

export function tmp(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** A btrfs of `bytes` (a sparse image) loop-mounted at `<dir>/mnt` (root); returns the mount point. */
export function mountBtrfs(dir: string, bytes: number): string {
  const img = path.join(dir, 'btrfs.img');
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(mnt);
  const fd = fs.openSync(img, 'w');
  fs.ftruncateSync(fd, bytes);
  fs.closeSync(fd);
  execFileSync('mkfs.btrfs', ['-q', '-f', img]);
  execFileSync('mount', ['-o', 'loop', img, mnt]);
  return mnt;
}

export function get(url: string, opts: { method?: string; token?: string; body?: string } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const req = http.request(url, { method: opts.method ?? 'GET', headers }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** Starts a node script and resolves once `url` answers 200; returns the process and the time taken. */
export async function startProcess(
  script: string,
  env: Record<string, string>,
  url: string,
  /** Node flags, or how production starts it (its flags and environment: prodCommand). */
  node: string[] | ProdCommand = [],
  onStdoutLine?: (line: string) => void,
  cpu = 1,
): Promise<{ proc: ChildProcess; ms: number }> {
  const t0 = performance.now();
  const [nodeArgs, prodEnv] = Array.isArray(node) ? [node, {}] : [node.flags, node.env];
  const [cmd, argv] = PIN ? ['taskset', ['-c', String(cpu), process.execPath, ...nodeArgs, script]] : [process.execPath, [...nodeArgs, script]];
  const proc = spawn(cmd, argv, { env: { ...process.env, ...prodEnv, ...env }, stdio: ['ignore', onStdoutLine ? 'pipe' : 'ignore', 'inherit'] });
  if (onStdoutLine) {
    let rest = '';
    proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop()!;
      for (const l of lines) onStdoutLine(l);
    });
  }
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`${script} exited with ${proc.exitCode}`);
    try {
      if ((await get(url)).status === 200) return { proc, ms: performance.now() - t0 };
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Runs any program on the servers' CPU (pinned like startProcess). */
export function spawnPinned(cmd: string, args: string[]): ChildProcess {
  const [c, argv] = PIN ? ['taskset', ['-c', '1', cmd, ...args]] : [cmd, args];
  return spawn(c, argv, { stdio: ['ignore', 'ignore', 'inherit'] });
}

export function stop(proc: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (proc.exitCode !== null) return resolve();
    proc.once('exit', () => resolve());
    proc.kill('SIGTERM');
  });
}

export const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
