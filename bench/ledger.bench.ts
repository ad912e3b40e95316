/**
 * npm run bench:ledger — the cost of one mutation as the ledger grows.
 *
 * For 1,000, 10,000 and 50,000 bound devices (+ as many workers), a production control plane
 * (dist/src/control-plane/main.js, its own process) runs unbind + bind rounds over HTTP. Measured: bind p50/p99,
 * bytes the process dirtied on storage per bind (/proc/<pid>/io write_bytes, page-granular, the
 * checkpoints included), and the start-up time with that ledger. Baseline in the same run: the
 * same process with IPXE_CP_CHECKPOINT_MS=0, which rewrites both YAML files on every commit (the
 * cost of a mutation before the change log).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { get, macOf, seedLedger, startProcess, stop, tmp, workerOf } from './lib';

const MAIN = path.join(__dirname, '..', 'src', 'control-plane', 'main.js');
const TOKEN = 'bench-token';
const SIZES = [1_000, 10_000, 50_000];
const PORT = 4871;

interface Row {
  n: number;
  mode: string;
  rounds: number;
  p50: number;
  p99: number;
  bytesPerBind: number;
  /** dhcp-hosts.conf is one file by contract: each binding change rewrites it whole. */
  projectionBytes: number;
  startMs: number;
}

const writeBytes = (pid: number) => Number(/write_bytes: (\d+)/.exec(fs.readFileSync(`/proc/${pid}/io`, 'utf8'))![1]);
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

async function run(n: number, mode: 'change log' | 'rewrite per commit', rounds: number): Promise<Row> {
  const dir = tmp('kurrent-bench-ledger-');
  try {
    await seedLedger(dir, n);
    const url = `http://127.0.0.1:${PORT}`;
    const { proc, ms: startMs } = await startProcess(
      MAIN,
      {
        IPXE_CP_PORT: String(PORT),
        IPXE_CP_HOST: '127.0.0.1',
        IPXE_CP_TOKEN: TOKEN,
        IPXE_CP_STATE_DIR: path.join(dir, 'state'),
        IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
        IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
        IPXE_CP_LOG_LEVEL: 'warn',
        IPXE_CP_CHECKPOINT_MS: mode === 'change log' ? '1000' : '0',
      },
      `${url}/healthz`,
      ['--max-semi-space-size=64'],
    );
    try {
      const times: number[] = [];
      const b0 = writeBytes(proc.pid!);
      for (let r = 0; r < rounds; r++) {
        const mac = macOf(r % n);
        const u = await get(`${url}/devices/${mac}/bind`, { method: 'DELETE', token: TOKEN });
        if (u.status !== 200) throw new Error(`unbind failed: ${u.status} ${u.body}`);
        const t0 = performance.now();
        const b = await get(`${url}/devices/${mac}/bind?worker_id=${workerOf(r % n)}`, { method: 'POST', token: TOKEN });
        times.push(performance.now() - t0);
        if (b.status !== 200) throw new Error(`bind failed: ${b.status} ${b.body}`);
      }
      // Include the checkpoint that follows the last change (and the one at shutdown is not counted).
      await new Promise((r) => setTimeout(r, mode === 'change log' ? 1500 : 100));
      const bytes = writeBytes(proc.pid!) - b0;
      times.sort((a, b) => a - b);
      return {
        n,
        mode,
        rounds,
        p50: times[Math.floor(times.length / 2)],
        p99: times[Math.min(times.length - 1, Math.floor(times.length * 0.99))],
        // Each round is two mutations (unbind + bind): a bind's share is half.
        bytesPerBind: bytes / (rounds * 2),
        projectionBytes: fs.statSync(path.join(dir, 'dnsmasq', 'dhcp-hosts.conf')).size,
        startMs,
      };
    } finally {
      await stop(proc);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const rows: Row[] = [];
  for (const n of SIZES) {
    rows.push(await run(n, 'change log', 300));
    rows.push(await run(n, 'rewrite per commit', n >= 50_000 ? 60 : 150));
  }
  console.log('\n== One bind as the ledger grows (unbind + bind rounds over HTTP, one process) ==');
  console.log('devices  | mode               | rounds | bind p50 ms | bind p99 ms | bytes written per bind | of which ledger | start-up ms');
  for (const r of rows) {
    console.log(
      `${fmt(r.n).padStart(8)} | ${r.mode.padEnd(18)} | ${String(r.rounds).padStart(6)} | ${fmt(r.p50, 2).padStart(11)} | ${fmt(r.p99, 2).padStart(11)} | ${fmt(r.bytesPerBind).padStart(22)} | ${fmt(Math.max(0, r.bytesPerBind - r.projectionBytes)).padStart(15)} | ${fmt(r.startMs).padStart(11)}`,
    );
  }
  console.log('(bytes: pages the process dirtied, /proc/<pid>/io write_bytes; "of which ledger" subtracts one dhcp-hosts.conf rewrite per binding change)');
  const at = (n: number, mode: string) => rows.find((r) => r.n === n && r.mode === mode)!;
  const log1k = at(1_000, 'change log');
  const log50k = at(50_000, 'change log');
  console.log(
    `\nchange log: bind p50 at 50,000 / at 1,000 = ${fmt(log50k.p50 / log1k.p50, 2)} (target <= 2); p99 ratio ${fmt(log50k.p99 / log1k.p99, 2)}`,
  );
  for (const n of SIZES) {
    const a = at(n, 'change log');
    const b = at(n, 'rewrite per commit');
    console.log(`${fmt(n).padStart(6)} devices: baseline / change log = ${fmt(b.p50 / a.p50, 1)}x faster p50, ${fmt(b.bytesPerBind / a.bytesPerBind, 0)}x fewer bytes per bind`);
  }
  console.log(`start-up with 50,000 devices and 50,000 workers: ${fmt(log50k.startMs)} ms (process start to /healthz)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
