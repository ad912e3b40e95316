/**
 * npm run bench:scale — every cost that grows with the fleet, at 1,000, 10,000 and 100,000 seats,
 * on the file store and on PostgreSQL, each figure also as a ratio to its 1,000 case.
 *
 * Per size and engine, a ledger of n bound devices, n workers and n NVMe credentials is built
 * through the real store code (PostgreSQL: the same ledger imported), then the control plane runs
 * as `npm run start:prod` starts it, its own process, and is measured: start-up (median of 5,
 * spawn to the first /healthz 200), RSS after start, bind p50/p99 (unbind + bind rounds), a
 * credential change p50/p99 (PUT /workers/{id}/credential, a rotation), GET /devices whole and
 * filtered, the boot storm (every seat /devices/report then /boot-vars, wrk; the seats/s and the
 * time the whole fleet takes at that rate), RSS after the storm (and the highest and median of
 * samples taken during it), and a fleet-wide credential push
 * (every worker's secret rotated through the API, 16 at a time: rotations/s, the whole fleet at
 * that rate, p50/p99). Separately, GET /operations
 * ?tail=100 and ?since=<middle> on an audit of 1,000,000 and 10,000,000 entries (median of 20).
 * Also a day of boot history (bootHistory): start-up before and after the first prune; and a
 * week of healthy boots (bootWeek): start-up and RSS with every timeline full, replayed from the
 * stored events (no snapshot), from the snapshot a clean stop leaves (a restart), and from the
 * snapshot the first prune leaves, after a kill -9 (a crash).
 * The history and week starts replay: the snapshot is removed before them.
 *
 * SCALE_SIZES, SCALE_ENGINES and SCALE_AUDIT narrow a run (e.g. SCALE_SIZES=1000,10000).
 * Goals (issue 27) are printed beside the figures they apply to.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig } from '../src/control-plane/config/app-config';
import { FileCredentialRepository } from '../src/control-plane/repositories/credentials/file-credential.repository';
import { readWorkersOnDisk } from '../src/control-plane/repositories/ledger/ledger-on-disk';
import { FileSystem } from '../src/shared/files/file-system';
import { generateDhchapKey } from '../src/shared/nvme-keys';
import { startPostgres, type PgCluster } from '../scripts/pg-cluster';
import { exportStore, importStore } from '../scripts/store';
import { fmt, get, macOf, prodCommand, seedLedger, startProcess, stop, tmp, workerOf, wrk } from './lib';

const list = (v: string | undefined, d: string) => (v ?? d).split(',').map((s) => s.trim()).filter(Boolean);
const SIZES = list(process.env.SCALE_SIZES, '1000,10000,100000').map(Number);
const ENGINES = list(process.env.SCALE_ENGINES, 'file,postgres') as ('file' | 'postgres')[];
const AUDIT = list(process.env.SCALE_AUDIT, '1000000,10000000').map(Number);
const PORT = 4991;
const TOKEN = 'bench-token';
const CONNECTIONS = 64;
const root = path.resolve(__dirname, '..', '..');
const prod = prodCommand(root);
const url = `http://127.0.0.1:${PORT}`;

type Row = Record<string, number>;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];
const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

/**
 * Samples a process's RSS every 200 ms until the returned function is called, which gives the
 * highest sample and the median. A single reading lands anywhere in V8's old-generation cycle
 * (±50 MB at 100,000 seats); the highest of a storm's samples is its top, what a machine must
 * be sized for, and the median compares two builds with far less noise.
 */
function sampleRss(pid: number): () => { peak: number; median: number } {
  const xs: number[] = [];
  const timer = setInterval(() => xs.push(rssMb(pid)), 200);
  return () => {
    clearInterval(timer);
    xs.push(rssMb(pid));
    return { peak: Math.max(...xs), median: median(xs) };
  };
}

function envFor(dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    IPXE_CP_PORT: String(PORT),
    IPXE_CP_HOST: '127.0.0.1',
    IPXE_CP_TOKEN: TOKEN,
    IPXE_CP_STATE_DIR: path.join(dir, 'state'),
    IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
    IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
    IPXE_CP_LOG_LEVEL: 'warn',
    IPXE_CP_RECONCILE_SECONDS: '0',
    IPXE_CP_AGENT_WATCH_MS: '0',
    IPXE_CP_POOL_LIMIT: '1000000',
    ...extra,
  };
}

/** n devices bound to n workers, and a live NVMe credential for each worker, through the real store code. */
async function seed(dir: string, n: number): Promise<void> {
  await seedLedger(dir, n);
  const state = path.join(dir, 'state');
  const config = loadConfig({ IPXE_CP_STATE_DIR: state, IPXE_CP_CHECKPOINT_MS: '0' });
  const workers = readWorkersOnDisk(state, new FileSystem());
  const creds = new FileCredentialRepository(config, new FileSystem());
  creds.onModuleInit();
  const now = new Date().toISOString();
  await creds.change((d) => {
    const all: typeof d.credentials = {};
    for (let i = 0; i < n; i++) {
      const id = workerOf(i);
      all[id] = {
        worker_id: id,
        hostnqn: `${config.hostNqnBase}:host.${id}`,
        dhchap_key: generateDhchapKey(),
        issued_at: now,
        revoked: false,
        revoked_at: null,
        agents: {},
        worker_incarnation: workers.get(id)?.incarnation ?? null,
      };
    }
    d.credentials = all;
  });
  await creds.onApplicationShutdown();
}

async function timed(fn: () => Promise<{ status: number; body: string }>, want: number): Promise<number> {
  const t0 = performance.now();
  const r = await fn();
  const ms = performance.now() - t0;
  if (r.status !== want) throw new Error(`expected ${want}, got ${r.status}: ${r.body.slice(0, 300)}`);
  return ms;
}

async function measureFleet(engine: 'file' | 'postgres', n: number, pg: PgCluster | null): Promise<Row> {
  const dir = tmp('kurrent-bench-scale-');
  try {
    const t0 = performance.now();
    await seed(dir, n);
    let env = envFor(dir);
    if (engine === 'postgres') {
      const db = pg!.createDb(`scale_${n}`);
      const pgDir = tmp('kurrent-bench-scale-pg-');
      const pgEnv = envFor(pgDir, { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: db });
      await importStore(pgEnv, await exportStore(env));
      fs.rmSync(dir, { recursive: true, force: true });
      env = pgEnv;
    }
    console.log(`  ${engine} ${fmt(n)}: ledger, workers and credentials built in ${fmt((performance.now() - t0) / 1000, 1)} s`);
    const row: Row = {};
    const starts: number[] = [];
    for (let i = 0; i < 5; i++) {
      const p = await startProcess(prod.script, env, `${url}/healthz`, prod);
      starts.push(p.ms);
      if (i < 4) await stop(p.proc);
      else {
        row.startMs = median(starts);
        row.rssStartMb = rssMb(p.proc.pid!);
        try {
          Object.assign(row, await measureRunning(n, p.proc.pid!));
        } finally {
          await stop(p.proc);
        }
      }
    }
    Object.assign(row, await bootHistory(engine, n, env));
    if (engine === 'postgres') Object.assign(row, await twoControlPlanes(n, env));
    Object.assign(row, await bootWeek(engine, n, env));
    return row;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs SQL on a database through psql (stops at the first error); its output, trimmed. */
const psqlOn = (db: string, sql: string) => execFileSync('psql', ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', db, '-c', sql], { encoding: 'utf8' }).trim();
/** SQL for macOf(s): a seat number `s` spelled as the bench's MAC. */
const MAC_OF_SEAT_SQL = `'02:00:' || ${[24, 16, 8, 0].map((shift) => `lpad(to_hex((s >> ${shift}) & 255), 2, '0')`).join(" || ':' || ")}`;

/**
 * A day of boot history: 1% of the fleet failing a boot every minute for 24 hours (a room whose
 * disks are gone), stored before the storm's events as the control plane stores them (files:
 * boot-events.jsonl lines; PostgreSQL: boot_events rows, the storm's re-inserted after them).
 * Start-up and RSS with it; then the control plane's first prune (IPXE_CP_BOOT_EVENT_PRUNE_SECONDS=5
 * here, 300 s in production) keeps what the boot timelines hold, and start-up and RSS again.
 */
async function bootHistory(engine: 'file' | 'postgres', n: number, env: Record<string, string>): Promise<Row> {
  const seats = Math.max(1, n / 100);
  const historyEvents = seats * 24 * 60 * 2;
  let count: () => number;
  if (engine === 'file') {
    const file = path.join(env.IPXE_CP_STATE_DIR, 'boot-events.jsonl');
    const after = fs.existsSync(file) ? fs.readFileSync(file) : Buffer.alloc(0);
    const first = after.length ? (JSON.parse(after.subarray(0, after.indexOf(10)).toString()) as { at: number }).at : Date.now();
    const fd = fs.openSync(file, 'w');
    let lines: string[] = [];
    for (let m = 24 * 60; m > 0; m--) {
      for (let i = 0; i < seats; i++) {
        const at = first - m * 60_000 + i;
        lines.push(JSON.stringify({ at, mac: macOf(i), stage: 'report', node: 'bench', worker: workerOf(i) }) + '\n');
        lines.push(JSON.stringify({ at: at + 1, mac: macOf(i), stage: 'vars', node: 'bench', worker: workerOf(i), detail: { answer: 'reboot', reason: 'no disk' } }) + '\n');
      }
      if (lines.length > 10_000) fs.writeSync(fd, lines.join('')), (lines = []);
    }
    fs.writeSync(fd, lines.join(''));
    fs.writeSync(fd, after);
    fs.closeSync(fd);
    count = () => {
      const b = fs.readFileSync(file);
      let k = 0;
      for (let i = b.indexOf(10); i !== -1; i = b.indexOf(10, i + 1)) k++;
      return k;
    };
  } else {
    const psql = (sql: string) => psqlOn(env.IPXE_CP_DATABASE_URL, sql);
    psql(`BEGIN;
      CREATE TEMP TABLE storm AS SELECT * FROM boot_events;
      DELETE FROM boot_events;
      INSERT INTO boot_events (at, mac, stage, node, worker, detail)
        SELECT to_timestamp((first - m * 60000 + s + k) / 1000.0), ${MAC_OF_SEAT_SQL},
               CASE k WHEN 0 THEN 'report' ELSE 'vars' END, 'bench', 'seat-' || lpad(s::text, 5, '0'), CASE k WHEN 1 THEN '{"answer":"reboot","reason":"no disk"}'::jsonb END
        FROM (SELECT coalesce(extract(epoch FROM min(at)) * 1000, extract(epoch FROM now()) * 1000)::bigint AS first FROM storm) f,
             generate_series(1440, 1, -1) m, generate_series(0, ${seats - 1}) s, generate_series(0, 1) k
        ORDER BY m DESC, s, k;
      INSERT INTO boot_events (at, mac, stage, node, worker, detail) SELECT at, mac, stage, node, worker, detail FROM storm ORDER BY id;
      COMMIT;
      ANALYZE boot_events;`);
    count = () => Number(psql('SELECT count(*) FROM boot_events'));
  }
  const total = count();
  const row: Row = { historyEvents: total / 1000 };
  dropSnapshot(env);
  const p = await startProcess(prod.script, { ...env, IPXE_CP_BOOT_EVENT_PRUNE_SECONDS: '5' }, `${url}/healthz`, prod);
  try {
    row.historyStartMs = p.ms;
    row.historyRssMb = rssMb(p.proc.pid!);
    // The storm's events are minutes old: the prune keeps them all (its margin), and most of the day goes.
    const deadline = Date.now() + 180_000;
    while (count() > total - historyEvents * 0.9) {
      if (Date.now() > deadline) throw new Error('boot history: the first prune did not drop the day within 180 s');
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    await stop(p.proc);
  }
  row.prunedEvents = count() / 1000;
  dropSnapshot(env);
  const q = await startProcess(prod.script, env, `${url}/healthz`, prod);
  row.prunedStartMs = q.ms;
  row.prunedRssMb = rssMb(q.proc.pid!);
  await stop(q.proc);
  return row;
}

/**
 * A week of healthy boots: every seat booted 10 times, 12 hours apart (report, vars answered with
 * its disk, the disk login), the most the boot timelines keep (10 a device) and what the prune
 * keeps too: the boot history a running fleet restarts with. Replaces the store's boot events.
 */
async function bootWeek(engine: 'file' | 'postgres', n: number, env: Record<string, string>): Promise<Row> {
  const boots = 10;
  const end = Date.now() - 600_000;
  const disk = (w: string) => `nqn.2026-07.com.controller:disk.${w}.win11`;
  const initiator = (i: number) => `nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0000-1000-8000-${String(i).padStart(12, '0')}`;
  if (engine === 'file') {
    const fd = fs.openSync(path.join(env.IPXE_CP_STATE_DIR, 'boot-events.jsonl'), 'w');
    let lines: string[] = [];
    for (let k = boots - 1; k >= 0; k--) {
      for (let i = 0; i < n; i++) {
        const at = end - k * 12 * 3600_000 + i;
        const [mac, worker] = [macOf(i), workerOf(i)];
        lines.push(JSON.stringify({ at, mac, stage: 'report', node: 'bench', worker }) + '\n');
        lines.push(JSON.stringify({ at: at + 40, mac, stage: 'vars', node: 'bench', worker, detail: { answer: 'disk', disk: disk(worker), transport: 'nvme-tcp', agent: 'agent-1' } }) + '\n');
        lines.push(JSON.stringify({ at: at + 9000, mac, stage: 'disk', node: 'bench', worker, detail: { target: disk(worker), agent: 'agent-1', initiator: initiator(i) } }) + '\n');
        if (lines.length > 30_000) fs.writeSync(fd, lines.join('')), (lines = []);
      }
    }
    fs.writeSync(fd, lines.join(''));
    fs.closeSync(fd);
  } else {
    const w = `'seat-' || lpad(s::text, 5, '0')`;
    const target = `'nqn.2026-07.com.controller:disk.' || ${w} || '.win11'`;
    psqlOn(env.IPXE_CP_DATABASE_URL, `BEGIN;
      DELETE FROM boot_events;
      INSERT INTO boot_events (at, mac, stage, node, worker, detail)
        SELECT to_timestamp((${end} - k * ${12 * 3600_000} + s + CASE st WHEN 0 THEN 0 WHEN 1 THEN 40 ELSE 9000 END) / 1000.0),
               ${MAC_OF_SEAT_SQL},
               (ARRAY['report', 'vars', 'disk'])[st + 1], 'bench', ${w},
               CASE st WHEN 1 THEN jsonb_build_object('answer', 'disk', 'disk', ${target}, 'transport', 'nvme-tcp', 'agent', 'agent-1')
                       WHEN 2 THEN jsonb_build_object('target', ${target}, 'agent', 'agent-1', 'initiator', 'nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0000-1000-8000-' || lpad(s::text, 12, '0')) END
        FROM generate_series(${boots - 1}, 0, -1) k, generate_series(0, ${n - 1}) s, generate_series(0, 2) st
        ORDER BY k DESC, s, st;
      COMMIT;
      ANALYZE boot_events;`);
  }
  // The week is what the control plane holds: the last seat's 10 boots, each booted.
  const check = async () => {
    const r = await get(`${url}/boots?mac=${macOf(n - 1)}&limit=20`, { token: TOKEN });
    const outcomes = (JSON.parse(r.body) as { items: { outcome: string }[] }).items.map((x) => x.outcome);
    if (outcomes.length !== boots || outcomes.some((o) => o !== 'booted')) throw new Error(`a week of boots: the last seat shows ${JSON.stringify(outcomes)}`);
  };
  const row: Row = { weekEvents: (n * boots * 3) / 1000 };
  dropSnapshot(env);
  const p = await startProcess(prod.script, env, `${url}/healthz`, prod);
  try {
    [row.weekStartMs, row.weekRssMb] = [p.ms, rssMb(p.proc.pid!)];
    await check();
  } finally {
    await stop(p.proc);
  }
  // Stopped cleanly, it left the timelines: a restart reads those instead of the week's events.
  if (!fs.existsSync(snapshotOf(env))) throw new Error('a week of boots: the clean stop left no snapshot of the boot timelines');
  // Its first prune comes 5 s after start here (5 minutes by default) and leaves a snapshot too.
  const q = await startProcess(prod.script, { ...env, IPXE_CP_BOOT_EVENT_PRUNE_SECONDS: '5' }, `${url}/healthz`, prod);
  try {
    [row.weekRestartMs, row.weekRestartRssMb] = [q.ms, rssMb(q.proc.pid!)];
    if (fs.existsSync(snapshotOf(env))) throw new Error('a week of boots: the restart did not take the snapshot');
    await check();
    // Then a crash (kill -9) once that snapshot is in place.
    const t0 = performance.now();
    const end = Date.now() + 120_000;
    while (!fs.existsSync(snapshotOf(env))) {
      if (Date.now() > end) throw new Error('a week of boots: no snapshot after the first prune');
      await new Promise((r) => setTimeout(r, 50));
    }
    row.weekSnapshotMs = performance.now() - t0;
    await new Promise<void>((resolve) => {
      q.proc.once('exit', () => resolve());
      q.proc.kill('SIGKILL');
    });
  } finally {
    // stop() waits for an exit: a killed process has had its own.
    if (q.proc.exitCode === null && q.proc.signalCode === null) await stop(q.proc);
  }
  const c = await startProcess(prod.script, env, `${url}/healthz`, prod);
  try {
    [row.weekCrashMs, row.weekCrashRssMb] = [c.ms, rssMb(c.proc.pid!)];
    if (fs.existsSync(snapshotOf(env))) throw new Error('a week of boots: the start after the crash did not take the snapshot of the prune');
    await check();
  } finally {
    await stop(c.proc);
  }
  return row;
}

/** The boot timelines a clean stop leaves in the state directory (either engine). */
const snapshotOf = (env: Record<string, string>) => path.join(env.IPXE_CP_STATE_DIR, 'boot-timelines.snapshot');
/** Starts the next control plane without it: a replay of every stored event (a crash before a first prune, or a first start on an old store). */
const dropSnapshot = (env: Record<string, string>) => fs.rmSync(snapshotOf(env), { force: true });

/**
 * The storm through two control planes on the one PostgreSQL database, one CPU each (this machine
 * has two, so the two wrk processes, each driving half the seats at one control plane, share
 * them: a lower bound). Seats/s of both together, and the fleet's time at that rate.
 */
async function twoControlPlanes(n: number, env: Record<string, string>): Promise<Row> {
  const procs: Awaited<ReturnType<typeof startProcess>>[] = [];
  const dirs: string[] = [];
  try {
    for (const i of [0, 1]) {
      const dir = tmp('kurrent-bench-scale-cp-');
      dirs.push(dir);
      const e = { ...env, IPXE_CP_PORT: String(PORT + 1 + i), IPXE_CP_NODE_ID: `scale-${i}`, IPXE_CP_STATE_DIR: path.join(dir, 'state'), IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq') };
      procs.push(await startProcess(prod.script, e, `http://127.0.0.1:${PORT + 1 + i}/healthz`, prod, undefined, i));
    }
    const seconds = Math.min(20, Math.max(4, Math.ceil(n / 5000)));
    const script = path.join(root, 'bench/wrk/storm.lua');
    const runs = await Promise.all(
      [0, 1].map((i) => wrk(`http://127.0.0.1:${PORT + 1 + i}`, seconds, CONNECTIONS / 2, script, { BENCH_DEVICES: String(n), BENCH_STRIDE: '2', BENCH_OFFSET: String(i) }, false)),
    );
    for (const r of runs) if (r.non2xx || r.errors) throw new Error(`two-control-plane storm: ${r.non2xx} non-2xx, ${r.errors} socket errors`);
    const seats = runs.reduce((a, r) => a + r.rps, 0) / 2;
    return { storm2SeatsPerS: seats, storm2FleetS: n / seats };
  } finally {
    for (const p of procs) await stop(p.proc);
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  }
}

async function measureRunning(n: number, pid: number): Promise<Row> {
  const row: Row = {};
  const auth = { token: TOKEN };
  // Bind: unbind + bind rounds over seats spread across the fleet.
  const binds: number[] = [];
  for (let r = 0; r < 100; r++) {
    const i = (r * 7919) % n;
    await timed(() => get(`${url}/devices/${macOf(i)}/bind`, { method: 'DELETE', ...auth }), 200);
    binds.push(await timed(() => get(`${url}/devices/${macOf(i)}/bind?worker_id=${workerOf(i)}`, { method: 'POST', ...auth }), 200));
  }
  row.bindP50 = pct(binds.slice(10), 50);
  row.bindP99 = pct(binds.slice(10), 99);
  // A credential change: a rotation of one worker's secret.
  const rotations: number[] = [];
  for (let r = 0; r < 60; r++) {
    const id = workerOf((r * 104_729) % n);
    rotations.push(await timed(() => get(`${url}/workers/${id}/credential`, { method: 'PUT', body: JSON.stringify({ generate: true }), ...auth }), 200));
  }
  row.credP50 = pct(rotations.slice(10), 50);
  row.credP99 = pct(rotations.slice(10), 99);
  // GET /devices, whole and filtered.
  const whole: number[] = [];
  const filtered: number[] = [];
  let bytes = 0;
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    const res = await get(`${url}/devices`, auth);
    whole.push(performance.now() - t0);
    bytes = Buffer.byteLength(res.body);
    filtered.push(await timed(() => get(`${url}/devices?state=pooled`, auth), 200));
  }
  row.devicesMs = median(whole);
  row.devicesMb = bytes / 1024 / 1024;
  row.devicesFilteredMs = median(filtered);
  // The storm: report + boot-vars per seat; a storm replays the fleet, so loops are only marked.
  await timed(() => get(`${url}/settings/boot-policy`, { method: 'PUT', body: JSON.stringify({ loop_action: 'keep-looping' }), ...auth }), 200);
  const seconds = Math.min(20, Math.max(4, Math.ceil(n / 5000)));
  const sampled = sampleRss(pid);
  const storm = await wrk(url, seconds, CONNECTIONS, path.join(root, 'bench/wrk/storm.lua'), { BENCH_DEVICES: String(n) }).finally(() => {
    const rss = sampled();
    row.rssStormPeakMb = rss.peak;
    row.rssStormMedianMb = rss.median;
  });
  if (storm.non2xx || storm.errors) throw new Error(`storm: ${storm.non2xx} non-2xx, ${storm.errors} socket errors`);
  row.stormSeatsPerS = storm.rps / 2;
  row.stormFleetS = n / row.stormSeatsPerS;
  row.stormP99 = storm.p99;
  row.rssStormMb = rssMb(pid);
  // A fleet-wide credential push: every worker's secret rotated through the API, 16 at a time, as
  // an operator's script would after a suspected leak. Bounded in time; the whole fleet's time is
  // its rate's. Last, so the credential fold it leaves behind does not land in another figure.
  const push = await wrk(url, Math.min(10, Math.max(4, Math.ceil(n / 10_000))), 16, path.join(root, 'bench/wrk/rotate.lua'), {
    BENCH_DEVICES: String(n),
    BENCH_TOKEN: TOKEN,
  });
  if (push.non2xx || push.errors) throw new Error(`credential push: ${push.non2xx} non-2xx, ${push.errors} socket errors`);
  row.pushPerS = push.rps;
  row.pushFleetS = n / push.rps;
  row.pushP50 = push.p50;
  row.pushP99 = push.p99;
  return row;
}

/** An audit of `entries` entries as the control plane writes them (ids 1..entries). */
function auditLine(id: number): string {
  const i = id % 100_000;
  return JSON.stringify({ id, ts: '2026-12-01T00:00:00+00:00', op: id % 3 ? 'device.report' : 'device.bind', status: 'ok', mac: macOf(i), worker_id: workerOf(i), client: '10.0.0.1' }) + '\n';
}

async function measureAudit(engine: 'file' | 'postgres', entries: number, pg: PgCluster | null): Promise<Row> {
  const dir = tmp('kurrent-bench-scale-audit-');
  try {
    await seedLedger(dir, 1000);
    let env = envFor(dir);
    if (engine === 'postgres') {
      const db = pg!.createDb(`audit_${entries}`);
      env = envFor(tmp('kurrent-bench-scale-pg-'), { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: db });
      await importStore(env, await exportStore(envFor(dir)));
      const psql = (sql: string) => execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', db, '-c', sql]);
      psql('TRUNCATE audit');
      psql(
        `INSERT INTO audit (id, entry) SELECT g, jsonb_build_object('id', g, 'ts', '2026-12-01T00:00:00+00:00', 'op', CASE WHEN g % 3 = 0 THEN 'device.bind' ELSE 'device.report' END, 'status', 'ok', 'mac', '02:00:00:00:' || lpad(to_hex((g % 100000) / 256 % 256), 2, '0') || ':' || lpad(to_hex(g % 100000 % 256), 2, '0'), 'client', '10.0.0.1') FROM generate_series(1, ${entries}) g`,
      );
      psql(`SELECT setval('audit_ids', ${entries})`);
      psql('VACUUM ANALYZE audit');
    } else {
      const file = path.join(dir, 'state', 'operations.jsonl');
      fs.rmSync(file, { force: true });
      const fd = fs.openSync(file, 'w');
      for (let id = 1; id <= entries; ) {
        let chunk = '';
        for (let k = 0; k < 10_000 && id <= entries; k++) chunk += auditLine(id++);
        fs.writeSync(fd, chunk);
      }
      fs.closeSync(fd);
    }
    const p = await startProcess(prod.script, env, `${url}/healthz`, prod);
    try {
      const tail: number[] = [];
      const since: number[] = [];
      for (let r = 0; r < 20; r++) {
        tail.push(await timed(() => get(`${url}/operations?tail=100`, { token: TOKEN }), 200));
        since.push(await timed(() => get(`${url}/operations?since=${Math.floor(entries / 2) + r}&limit=100`, { token: TOKEN }), 200));
      }
      const check = JSON.parse((await get(`${url}/operations?since=${Math.floor(entries / 2)}&limit=1`, { token: TOKEN })).body) as { entries: { id: number }[] };
      if (check.entries[0]?.id !== Math.floor(entries / 2) + 1) throw new Error(`since=middle answered ${JSON.stringify(check).slice(0, 200)}`);
      return { tailMs: median(tail.slice(5)), sinceMs: median(since.slice(5)) };
    } finally {
      await stop(p.proc);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const METRICS: [key: string, label: string, digits: number, goal?: string][] = [
  ['startMs', 'start-up, median of 5 (ms)', 0, '< 2,000 files / < 3,000 PostgreSQL at 100,000'],
  ['rssStartMb', 'RSS after start (MB)', 0, '< 500'],
  ['bindP50', 'bind p50 (ms)', 1, 'within 2x of 1,000'],
  ['bindP99', 'bind p99 (ms)', 1],
  ['credP50', 'credential change p50 (ms)', 1, 'within 2x of 1,000'],
  ['credP99', 'credential change p99 (ms)', 1],
  ['devicesMs', 'GET /devices, whole list (ms)', 0],
  ['devicesMb', 'GET /devices, whole list (MB)', 1],
  ['devicesFilteredMs', 'GET /devices?state=pooled (ms)', 1],
  ['stormSeatsPerS', 'storm: seats/s (report + boot-vars)', 0],
  ['stormFleetS', 'storm: the whole fleet at that rate (s)', 2],
  ['stormP99', 'storm: p99 (ms)', 1],
  ['storm2SeatsPerS', 'storm through two PostgreSQL control planes: seats/s', 0],
  ['storm2FleetS', 'storm through two PostgreSQL control planes: the whole fleet (s)', 2, '< 8'],
  ['rssStormMb', 'RSS after the storm (MB)', 0, '< 500'],
  ['rssStormPeakMb', 'RSS during the storm: highest of samples every 200 ms (MB)', 0],
  ['rssStormMedianMb', 'RSS during the storm: median of those samples (MB)', 0],
  ['pushPerS', 'fleet-wide credential push: rotations/s, 16 at a time', 0, 'at least 0.5x of 1,000: O(changed rows)'],
  ['pushFleetS', 'fleet-wide credential push: the whole fleet at that rate (s)', 0],
  ['pushP50', 'fleet-wide credential push: p50 (ms)', 1],
  ['pushP99', 'fleet-wide credential push: p99 (ms)', 1],
  ['historyEvents', 'boot events stored with a day of 1% of the fleet looping (thousands)', 0],
  ['historyStartMs', 'start-up with that history (ms)', 0],
  ['historyRssMb', 'RSS after start with that history (MB)', 0],
  ['prunedEvents', 'boot events after the first prune (thousands)', 0],
  ['prunedStartMs', 'start-up after the first prune (ms)', 0],
  ['prunedRssMb', 'RSS after start after the first prune (MB)', 0],
  ['weekEvents', 'boot events of a week of boots, 10 a seat, each to its disk (thousands)', 0],
  ['weekStartMs', 'start-up with that week and no snapshot: every event replayed (ms)', 0],
  ['weekRssMb', 'RSS after start with that week (MB)', 0],
  ['weekRestartMs', 'start-up with that week after a clean stop: the snapshot (ms)', 0],
  ['weekRestartRssMb', 'RSS after that restart (MB)', 0],
  ['weekSnapshotMs', 'from that start-up until the first prune\'s snapshot is in place, the prune 5 s after start (ms)', 0],
  ['weekCrashMs', 'start-up after a crash (kill -9) once that snapshot is in place (ms)', 0],
  ['weekCrashRssMb', 'RSS after that start (MB)', 0],
];

function printTable(title: string, sizes: number[], rows: Row[], metrics: typeof METRICS): void {
  console.log(`\n== ${title} ==`);
  const head = ['', ...sizes.map((n) => fmt(n)), ...sizes.slice(1).map((n) => `${fmt(n)} / ${fmt(sizes[0])}`), 'goal'];
  const lines = metrics.map(([k, label, d, goal]) => [
    label,
    ...rows.map((r) => (r[k] === undefined ? '-' : fmt(r[k], d))),
    ...rows.slice(1).map((r) => (r[k] === undefined || !rows[0][k] ? '-' : `${fmt(r[k] / rows[0][k], 2)}x`)),
    goal ?? '',
  ]);
  console.log(`| ${head.join(' | ')} |`);
  console.log(`| ${head.map(() => '---').join(' | ')} |`);
  for (const l of lines) console.log(`| ${l.join(' | ')} |`);
}

async function main(): Promise<void> {
  console.log(`bench:scale: sizes ${SIZES.map((n) => fmt(n)).join(', ')}; engines ${ENGINES.join(', ')}; audits ${AUDIT.map((n) => fmt(n)).join(', ')}; ${Object.entries(prod.env).map(([k, v]) => `${k}=${v} `).join('')}node ${prod.flags.join(' ')}`);
  const pg = ENGINES.includes('postgres') ? await startPostgres() : null;
  try {
    for (const engine of ENGINES) {
      console.log(`\n-- ${engine}: fleets`);
      const rows: Row[] = [];
      for (const n of SIZES) rows.push(await measureFleet(engine, n, pg));
      printTable(`${engine === 'file' ? 'File store' : 'PostgreSQL'}: fleet sizes`, SIZES, rows, METRICS);
      console.log(`\n-- ${engine}: audits`);
      const audits: Row[] = [];
      for (const a of AUDIT) {
        const t0 = performance.now();
        audits.push(await measureAudit(engine, a, pg));
        console.log(`  ${fmt(a)} entries: built and measured in ${fmt((performance.now() - t0) / 1000, 1)} s`);
      }
      printTable(`${engine === 'file' ? 'File store' : 'PostgreSQL'}: GET /operations on an audit of`, AUDIT, audits, [
        ['tailMs', 'GET /operations?tail=100 (ms, median of 15)', 1, 'independent of the audit length'],
        ['sinceMs', 'GET /operations?since=<middle>&limit=100 (ms, median of 15)', 1, 'independent of the audit length'],
      ]);
    }
  } finally {
    pg?.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
