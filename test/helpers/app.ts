import { NestFastifyApplication } from '@nestjs/platform-fastify';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createApp } from '../../src/control-plane/app.factory';
import { loadConfig } from '../../src/control-plane/config/app-config';
import { checkResponse } from './spec-check';
import { createKurrentClient } from '../../src/client';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { readCredentialsOnDisk } from '../../src/control-plane/repositories/credentials/file-credential.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { readDevicesOnDisk, readWorkersOnDisk } from '../../src/control-plane/repositories/ledger/ledger-on-disk';

export interface TestApp {
  app: NestFastifyApplication;
  dir: string;
  env: Record<string, string>;
  req: (method: string, url: string, body?: unknown, headers?: Record<string, string>) => Promise<Res>;
  close: () => Promise<void>;
  read: (rel: string) => string;
  snapshot: () => Record<string, string>;
}

export interface Res {
  status: number;
  body: any;
  text: string;
  headers: Record<string, unknown>;
}

/** HTTP over Fastify's injection (full routing, hooks, guards, pipes, filters), JSON parsed. */
export function injector(app: NestFastifyApplication, token?: string, spec = 'control-plane.openapi.json') {
  const fastify = app.getHttpAdapter().getInstance();
  return async (method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<Res> => {
    const r = await fastify.inject({
      method: method as 'GET',
      url,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined && typeof body !== 'string' ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      payload: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    let parsed: unknown = undefined;
    try {
      parsed = r.body ? JSON.parse(r.body) : undefined;
    } catch {
      parsed = undefined;
    }
    checkResponse(spec, method, url, r.statusCode, r.headers['content-type'] as string | undefined, r.body);
    return { status: r.statusCode, body: parsed, text: r.body, headers: r.headers as Record<string, unknown> };
  };
}

/**
 * KURRENT_TEST_STORE=postgres runs the suites on the PostgreSQL store: the cluster is started by
 * test/global-setup.js (KURRENT_TEST_PG_URL), each state directory gets its own database (a
 * restart on the same directory gets the same one), and `read('state/...')` shows the tables in
 * the files' formats, so assertions about what reached the store hold for both.
 */
const databases = new Map<string, string>();
export const onPostgres = () => process.env.KURRENT_TEST_STORE === 'postgres';
/**
 * KURRENT_TEST_TRANSPORT=socket (`npm run test:e2e:sockets`, part of `npm test`): every request
 * goes over a real socket to the listening app, which runs with the production defaults of the
 * store (deferred checkpoints, 500 ms telemetry flush) instead of the tests' write-every-commit
 * mode; `read('state/devices.yml' | 'state/workers.yml')` shows what a restart would see (the
 * YAML files with the change log replayed), rendered as the files are.
 */
export const onSockets = () => process.env.KURRENT_TEST_TRANSPORT === 'socket';

/** The same requests as injector, over a real socket to the app (listening on a free loopback port on first use). */
export function socketRequester(app: NestFastifyApplication, token?: string, spec = 'control-plane.openapi.json') {
  let listening: Promise<unknown> | null = null;
  return async (method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<Res> => {
    const server = app.getHttpServer() as http.Server;
    if (!server.listening) await (listening ??= app.listen(0, '127.0.0.1'));
    const port = (server.address() as AddressInfo).port;
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const r = await new Promise<{ status: number; text: string; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          method,
          path: url,
          agent: false,
          headers: {
            ...(token ? { authorization: `Bearer ${token}` } : {}),
            ...(body !== undefined && typeof body !== 'string' ? { 'content-type': 'application/json' } : {}),
            ...(payload !== undefined ? { 'content-length': Buffer.byteLength(payload) } : {}),
            ...headers,
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text, headers: res.headers }));
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
    let parsed: unknown = undefined;
    try {
      parsed = r.text ? JSON.parse(r.text) : undefined;
    } catch {
      parsed = undefined;
    }
    checkResponse(spec, method, url, r.status, r.headers['content-type'], r.text);
    return { status: r.status, body: parsed, text: r.text, headers: r.headers as Record<string, unknown> };
  };
}

/** devices.yml / workers.yml (one compact entry a line) and nvme-credentials.json as a restart would read them (the file plus its log). */
function readOnDisk(dir: string, rel: string): string | null {
  const stateDir = path.join(dir, 'state');
  const render = (root: string, m: Map<string, unknown>) =>
    m.size ? `${root}:\n${[...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`).join('\n')}\n` : `${root}: {}\n`;
  if (rel === 'state/devices.yml') return render('devices', readDevicesOnDisk(stateDir, new FileSystem()));
  if (rel === 'state/workers.yml') return render('workers', readWorkersOnDisk(stateDir, new FileSystem()));
  if (rel === 'state/ledger.wal') return '';
  if (rel === 'state/nvme-credentials.json') return JSON.stringify(readCredentialsOnDisk(stateDir, new FileSystem()), null, 2);
  return null;
}
function storeEnv(dir: string): Record<string, string> {
  if (!onPostgres()) return {};
  const admin = process.env.KURRENT_TEST_PG_URL;
  if (!admin) throw new Error('KURRENT_TEST_STORE=postgres needs the cluster of test/global-setup.js');
  let url = databases.get(dir);
  if (!url) {
    const name = `t_${randomBytes(6).toString("hex")}`;
    psql(admin, `CREATE DATABASE "${name}"`);
    databases.set(dir, (url = admin.replace(/\/[^/]*$/, `/${name}`)));
  }
  return { IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url };
}

function psql(url: string, sql: string): string {
  const r = spawnSync('psql', ['-X', '-At', '-v', 'ON_ERROR_STOP=1', url, '-c', sql], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql: ${r.stderr}`);
  return r.stdout;
}

/** The tables behind each state file, rendered as the file store writes that file. */
function readFromDb(url: string, rel: string): string | null {
  const rows = (sql: string) => psql(url, sql).split('\n').filter((l) => l !== '');
  // jsonb prints `"a": 1`; the files hold compact JSON, which is what assertions look for.
  const compact = (json: string) => JSON.stringify(JSON.parse(json));
  const ledger = (root: string, sql: string) => {
    const lines = rows(sql).map((l) => {
      const [k, v] = JSON.parse(l) as [string, unknown];
      return `${JSON.stringify(k)}: ${JSON.stringify(v)}`;
    });
    return lines.length ? `${root}:\n${lines.map((l) => `  ${l}`).join('\n')}\n` : `${root}: {}\n`;
  };
  // No catch: a query that fails must fail the test, not read as "<missing>" (a "nothing
  // changed" assertion would then pass vacuously).
  {
    switch (rel) {
      case 'state/devices.yml':
        return ledger('devices', "SELECT json_build_array(mac, data)::text FROM devices ORDER BY mac");
      case 'state/workers.yml':
        return ledger('workers', "SELECT json_build_array(worker_id, data)::text FROM workers ORDER BY worker_id");
      case 'state/settings.json':
        return rows("SELECT body::text FROM documents WHERE name = 'settings'").map(compact)[0] ?? '<missing>';
      case 'state/operations.jsonl':
        return rows('SELECT entry::text FROM audit ORDER BY id').map((l) => `${compact(l)}\n`).join('');
      case 'state/nvme-credentials.json':
        return JSON.stringify({
          version: 1,
          credentials: Object.fromEntries(rows('SELECT worker_id, body::text FROM credentials ORDER BY worker_id').map((l) => { const i = l.indexOf('|'); return [l.slice(0, i), JSON.parse(l.slice(i + 1))]; })),
          removals: rows('SELECT body::text FROM credential_removals ORDER BY hostnqn, agent').map((l) => JSON.parse(l)),
        }, null, 2);
      case 'state/ledger.wal':
        return '';
      default:
        return null;
    }
  }
}

/**
 * Behaviour of the file store itself (YAML hand edits, the files and the change log on disk, a
 * full or read-only state directory): registered in the file-store pass only. The PostgreSQL pass
 * (`npm run test:e2e:pg`, part of `npm test`) runs every other e2e test on the database.
 */
export function describeFiles(name: string, fn: () => void): void {
  if (!onPostgres() && !onSockets()) describe(name, fn);
  else notRunHere(name);
}
export function itFiles(name: string, fn: () => Promise<unknown>, timeout?: number): void {
  if (!onPostgres() && !onSockets()) it(name, fn, timeout);
  else notRunHere(name);
}

/** The PostgreSQL and socket passes list what they leave to the file pass (test/global-teardown.js prints it). */
export const FILE_ONLY_LIST = path.join(os.tmpdir(), `kurrent-file-only-${process.env.KURRENT_TEST_RUN ?? 'run'}.txt`);
function notRunHere(name: string): void {
  const file = path.basename(expect.getState().testPath ?? '');
  fs.appendFileSync(FILE_ONLY_LIST, `${file}: ${name}\n`);
}

export function tempDir(prefix = 'kurrent-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/**
 * Boots the whole control plane on a temp config/state/dnsmasq tree and talks to it through
 * Fastify's HTTP injection (full routing, hooks, guards, pipes, filters and serialisation).
 */
export async function startApp(
  env: Record<string, string> = {},
  opts: { dir?: string; before?: (app: NestFastifyApplication) => void } = {},
): Promise<TestApp> {
  const dir = opts.dir ?? tempDir();
  const fullEnv: Record<string, string> = {
    ...storeEnv(dir),
    IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
    IPXE_CP_STATE_DIR: path.join(dir, 'state'),
    IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
    IPXE_CP_LOG_LEVEL: 'silent',
    // The YAML files are rewritten on every commit, so tests can read them right after a request;
    // the deferred checkpoint (the production default) has its own tests (ledger-durability) and
    // the socket pass runs every test with it.
    ...(onSockets() ? {} : { IPXE_CP_REPORT_FLUSH_MS: '50', IPXE_CP_CHECKPOINT_MS: '0' }),
    ...env,
  };
  const app = await createApp(loadConfig(fullEnv), { quiet: true });
  opts.before?.(app);
  await app.init();
  await app.getHttpAdapter().getInstance().ready();
  const req = onSockets() ? socketRequester(app, fullEnv.IPXE_CP_TOKEN) : injector(app, fullEnv.IPXE_CP_TOKEN);
  const read = (rel: string) => {
    const fromDb = fullEnv.IPXE_CP_STORE === 'postgres' ? readFromDb(fullEnv.IPXE_CP_DATABASE_URL, rel) : null;
    if (fromDb !== null) return fromDb;
    const onDisk = onSockets() && fullEnv.IPXE_CP_CHECKPOINT_MS !== '0' ? readOnDisk(dir, rel) : null;
    if (onDisk !== null) return onDisk;
    try {
      return fs.readFileSync(path.join(dir, rel), 'utf8');
    } catch {
      return '<missing>';
    }
  };
  const snapshot = () => {
    const out: Record<string, string> = {};
    for (const f of ['state/devices.yml', 'state/workers.yml', 'state/ledger.wal', 'state/settings.json', 'state/operations.jsonl', 'dnsmasq/dhcp-hosts.conf']) {
      out[f] = read(f);
    }
    return out;
  };
  return { app, dir, env: fullEnv, req, close: () => app.close(), read, snapshot };
}

export const macOf = (i: number) =>
  ['02', '00', ...[(i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255, i & 255].map((b) => b.toString(16).padStart(2, '0'))].join(':');

export function dhcpLines(text: string): string[] {
  return text.split('\n').filter((l) => l.trim() && !l.startsWith('#'));
}

/** A loopback TCP port the kernel just handed out (so parallel or earlier tests never collide). */
export { freePort } from '../../scripts/free-port';

/**
 * The typed client (src/client, generated from the spec) over Fastify injection: what a third
 * party's generated code would send and receive, checked by the compiler against the spec.
 */
export function typedClient(t: TestApp, token = t.env.IPXE_CP_TOKEN) {
  const fastify = t.app.getHttpAdapter().getInstance();
  return createKurrentClient({
    baseUrl: 'http://kurrent.test',
    token,
    fetch: async (req: Request) => {
      const u = new URL(req.url);
      const body = req.body ? await req.text() : undefined;
      const r = await fastify.inject({ method: req.method as 'GET', url: u.pathname + u.search, headers: Object.fromEntries(req.headers), payload: body });
      checkResponse('control-plane.openapi.json', req.method, u.pathname + u.search, r.statusCode, r.headers['content-type'] as string | undefined, r.body);
      return new Response(r.statusCode === 204 || r.body === '' ? null : r.body, { status: r.statusCode, headers: r.headers as Record<string, string> });
    },
  });
}

/** As an operator would: wait until the control plane lists a master (up to 30 s on a busy machine). */
export async function waitForMaster(t: TestApp, name: string): Promise<void> {
  for (let i = 0; i < 60; i++) {
    const m = await t.req('GET', '/masters');
    if (m.body?.agents?.[0]?.masters?.some((x: { name: string }) => x.name === name)) return;
    await new Promise((r) => setTimeout(r, 500));
  }
}
