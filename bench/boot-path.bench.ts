/**
 * `npm run bench:boot-path`: the boot path's cache-hit answers without GC luck (issue 27).
 * The control plane runs as `npm run start:prod` starts it, on CPU 1; wrk (1 thread, 64
 * connections, bench/wrk/boot-vars.lua: a different seeded seat on every request) on CPU 0.
 *  1. Bytes allocated per request on the hit path: the process runs with --trace-gc-nvp, whose
 *     every GC line says how much was allocated since the one before; the GCs that happened well
 *     inside a wrk run, over the requests served between the first and the last of them (wrk's
 *     steady rate). Beside it the same figure for node:http alone answering pre-built bytes
 *     (bench/bare-http.ts): what Node's HTTP server allocates by itself. Goal: Kurrent <= 1 KB.
 *  2. /boot-vars req/s with V8's default flags beside start:prod's tuned flags, alternating
 *     rounds, median ratio. Goal: default >= 0.9x tuned.
 *  3. nginx (worker_processes 1, on the same CPU) serving the same answer as a static file,
 *     alternating with Kurrent. Goal: Kurrent >= 0.8x nginx. nginx comes from PATH, else from the
 *     Debian package (`apt-get download nginx`, unpacked under build/bench-tools; never installed).
 */
import { execFileSync, ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fmt, get, prodCommand, seedLedger, spawnPinned, startProcess, stop, tmp, wrk } from './lib';

const N = Number(process.env.BENCH_DEVICES ?? 10_000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONNECTIONS = 64;
const CP_PORT = 4991;
const ALT_PORT = 4992;
const BARE_PORT = 4993;
const NGINX_PORT = 4994;
const dist = path.resolve(__dirname, '..');
const root = path.resolve(dist, '..');
const GOAL = { bytes: 1024, defaultVsTuned: 0.9, vsNginx: 0.8 };

type Gc = { t: number; allocated: number; arrived: number };

/** Collects --trace-gc-nvp lines: the isolate's ms, bytes allocated since the previous GC, when the line arrived here. */
function gcTrace(): { gcs: Gc[]; onLine: (l: string) => void } {
  const gcs: Gc[] = [];
  const re = /\s([\d.]+) ms: pause=.*\sallocated=(\d+)/;
  return {
    gcs,
    onLine: (l) => {
      const m = re.exec(l);
      if (m) gcs.push({ t: Number(m[1]), allocated: Number(m[2]), arrived: performance.now() });
    },
  };
}

/** Bytes allocated per request during one wrk run against a traced process. */
async function bytesPerRequest(port: number, trace: { gcs: Gc[] }, script: string, env: Record<string, string>): Promise<{ bytes: number; rps: number; gcs: number }> {
  const from = performance.now();
  const r = await wrk(`http://127.0.0.1:${port}`, SECONDS, CONNECTIONS, script, env);
  const to = performance.now();
  // Well inside the run (the rate is steady there); a GC line arrives within a millisecond or so.
  const inside = trace.gcs.filter((g) => g.arrived > from + 500 && g.arrived < to - 200);
  if (inside.length < 3) return { bytes: NaN, rps: r.rps, gcs: inside.length };
  let bytes = 0;
  for (let i = 1; i < inside.length; i++) bytes += inside[i].allocated;
  const ms = inside[inside.length - 1].t - inside[0].t;
  return { bytes: bytes / ((r.rps * ms) / 1000), rps: r.rps, gcs: inside.length };
}

function nginxBinary(): string {
  for (const p of ['/usr/sbin/nginx', '/usr/local/sbin/nginx']) if (fs.existsSync(p)) return p;
  const dir = path.join(root, 'build/bench-tools');
  const bin = path.join(dir, 'usr/sbin/nginx');
  if (fs.existsSync(bin)) return bin;
  fs.mkdirSync(dir, { recursive: true });
  const dl = tmp('kurrent-nginx-deb-');
  fs.chmodSync(dl, 0o755); // apt's download user must be able to write there
  execFileSync('apt-get', ['download', 'nginx'], { cwd: dl, stdio: 'ignore' });
  const deb = fs.readdirSync(dl).find((f) => f.endsWith('.deb'))!;
  execFileSync('dpkg-deb', ['-x', path.join(dl, deb), dir]);
  fs.rmSync(dl, { recursive: true, force: true });
  return bin;
}

async function startNginx(dir: string, body: string): Promise<ChildProcess> {
  const www = path.join(dir, 'www');
  fs.mkdirSync(www, { recursive: true });
  fs.writeFileSync(path.join(www, 'boot-vars'), body);
  fs.writeFileSync(path.join(www, 'healthz'), 'ok');
  const conf = path.join(dir, 'nginx.conf');
  // One worker (one core, like the control plane), no access log, keep-alive as long as wrk runs.
  fs.writeFileSync(
    conf,
    `daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log ${dir}/error.log warn;\npid ${dir}/nginx.pid;\nevents { worker_connections 1024; }\n` +
      `http {\n  access_log off;\n  keepalive_requests 10000000;\n  client_body_temp_path ${dir}/tmp;\n  proxy_temp_path ${dir}/tmp;\n  fastcgi_temp_path ${dir}/tmp;\n  uwsgi_temp_path ${dir}/tmp;\n  scgi_temp_path ${dir}/tmp;\n` +
      `  server {\n    listen 127.0.0.1:${NGINX_PORT};\n    root ${www};\n    location / { default_type 'text/plain; charset=utf-8'; add_header Cache-Control no-store; try_files $uri =404; }\n  }\n}\n`,
  );
  const proc = spawnPinned(nginxBinary(), ['-p', dir, '-c', conf, '-e', path.join(dir, 'error.log')]);
  for (const end = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 50))) {
    if (proc.exitCode !== null) throw new Error(`nginx exited with ${proc.exitCode}: ${fs.readFileSync(path.join(dir, 'error.log'), 'utf8')}`);
    if ((await get(`http://127.0.0.1:${NGINX_PORT}/healthz`).catch(() => ({ status: 0 }))).status === 200) return proc;
    if (Date.now() > end) throw new Error('nginx did not answer');
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const dir = tmp('kurrent-bench-boot-path-');
  await seedLedger(dir, N);
  const env = (port: number) => ({
    IPXE_CP_PORT: String(port),
    IPXE_CP_HOST: '127.0.0.1',
    IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
    IPXE_CP_STATE_DIR: path.join(dir, 'state'),
    IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
    IPXE_CP_LOG_LEVEL: 'warn',
  });
  const prod = prodCommand(root);
  const script = path.join(root, 'bench/wrk/boot-vars.lua');
  const wrkEnv = { BENCH_DEVICES: String(N) };
  console.log(`ledger: ${fmt(N)} bound seats; wrk ${SECONDS} s x 64 connections, a different seat per request; start:prod flags: ${prod.flags.join(' ') || '(none)'}`);

  // 1. Allocation per request (default flags: what a plain `node` would do).
  const trace = gcTrace();
  let cp = await startProcess(prod.script, env(CP_PORT), `http://127.0.0.1:${CP_PORT}/healthz`, ['--trace-gc-nvp'], trace.onLine);
  let body: string;
  let kurrentBytes: number;
  try {
    body = (await get(`http://127.0.0.1:${CP_PORT}/boot-vars?mac=02:00:00:00:00:07&hostname=seat-00007`)).body;
    await wrk(`http://127.0.0.1:${CP_PORT}`, 2, CONNECTIONS, script, wrkEnv); // fills the answer cache
    const runs = [];
    for (let i = 0; i < ROUNDS; i++) runs.push(await bytesPerRequest(CP_PORT, trace, script, wrkEnv));
    console.log(`Kurrent /boot-vars hit path: ${runs.map((r) => `${fmt(r.bytes)} B/request (${r.gcs} GCs, ${fmt(r.rps)} req/s)`).join('; ')}`);
    kurrentBytes = median(runs.map((r) => r.bytes));
  } finally {
    await stop(cp.proc);
  }
  const bareTrace = gcTrace();
  const bare = await startProcess(path.join(dist, 'bench/bare-http.js'), { BARE_PORT: String(BARE_PORT), BARE_BODY: body }, `http://127.0.0.1:${BARE_PORT}/healthz`, ['--trace-gc-nvp'], bareTrace.onLine);
  try {
    const runs = [];
    for (let i = 0; i < ROUNDS; i++) runs.push(await bytesPerRequest(BARE_PORT, bareTrace, script, wrkEnv));
    const bareBytes = median(runs.map((r) => r.bytes));
    console.log(`node:http alone, pre-built bytes: ${runs.map((r) => `${fmt(r.bytes)} B/request (${fmt(r.rps)} req/s)`).join('; ')}`);
    console.log(`bytes allocated per request, median: Kurrent ${fmt(kurrentBytes)} B (goal <= ${fmt(GOAL.bytes)} B), node:http alone answering pre-built bytes ${fmt(bareBytes)} B; Kurrent / node:http alone ${fmt(kurrentBytes / bareBytes, 2)}`);
  } finally {
    await stop(bare.proc);
  }

  // 2. Default V8 flags beside the tuned ones, and 3. nginx, alternating on the same CPU.
  fs.cpSync(path.join(dir, 'state'), path.join(dir, 'state-alt'), { recursive: true });
  cp = await startProcess(prod.script, env(CP_PORT), `http://127.0.0.1:${CP_PORT}/healthz`, prod);
  const plain = await startProcess(prod.script, { ...env(ALT_PORT), IPXE_CP_STATE_DIR: path.join(dir, 'state-alt'), IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq-alt') }, `http://127.0.0.1:${ALT_PORT}/healthz`, { ...prod, flags: [] });
  const ngx = await startNginx(path.join(dir, 'nginx'), body);
  const ceiling = await startProcess(path.join(dist, 'bench/bare-http.js'), { BARE_PORT: String(BARE_PORT), BARE_BODY: body }, `http://127.0.0.1:${BARE_PORT}/healthz`, prod);
  try {
    const ngxBody = (await get(`http://127.0.0.1:${NGINX_PORT}/boot-vars`)).body;
    if (ngxBody !== body) throw new Error('nginx does not serve the same bytes');
    for (const p of [CP_PORT, ALT_PORT, NGINX_PORT, BARE_PORT]) await wrk(`http://127.0.0.1:${p}`, 2, CONNECTIONS, script, wrkEnv); // warm-up
    const dvt: number[] = [];
    const vsN: number[] = [];
    const bareVsN: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const tuned = await wrk(`http://127.0.0.1:${CP_PORT}`, SECONDS, CONNECTIONS, script, wrkEnv);
      const dflt = await wrk(`http://127.0.0.1:${ALT_PORT}`, SECONDS, CONNECTIONS, script, wrkEnv);
      const nginx = await wrk(`http://127.0.0.1:${NGINX_PORT}`, SECONDS, CONNECTIONS, script, wrkEnv);
      const bareHttp = await wrk(`http://127.0.0.1:${BARE_PORT}`, SECONDS, CONNECTIONS, script, wrkEnv);
      dvt.push(dflt.rps / tuned.rps);
      vsN.push(tuned.rps / nginx.rps);
      bareVsN.push(bareHttp.rps / nginx.rps);
      console.log(
        `round ${i + 1}: Kurrent tuned ${fmt(tuned.rps)} req/s (p99 ${fmt(tuned.p99, 1)} ms) | default flags ${fmt(dflt.rps)} req/s (p99 ${fmt(dflt.p99, 1)} ms) | nginx ${fmt(nginx.rps)} req/s (p99 ${fmt(nginx.p99, 1)} ms) | node:http alone ${fmt(bareHttp.rps)} req/s | non-2xx ${tuned.non2xx + dflt.non2xx + nginx.non2xx + bareHttp.non2xx}`,
      );
    }
    console.log(`median: default flags / tuned ${fmt(median(dvt), 2)} (goal >= ${GOAL.defaultVsTuned}); Kurrent (tuned) / nginx ${fmt(median(vsN), 2)} (goal >= ${GOAL.vsNginx}); node:http alone / nginx ${fmt(median(bareVsN), 2)} (what any handler on node:http can reach)`);
  } finally {
    ngx.kill('SIGTERM');
    await stop(ceiling.proc);
    await stop(cp.proc);
    await stop(plain.proc);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
