import fc from 'fast-check';
import { spawn } from 'node:child_process';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { freePort, startApp, tempDir, TestApp } from '../helpers/app';

/**
 * /boot-vars and /devices/report are answered in the HTTP server's request listener, before
 * Fastify (src/boot/fast-routes.ts, installRawBootPath). Every other e2e test talks through
 * Fastify's injection, which never passes there; this one sends the same requests both ways, over
 * a real socket and through injection, and requires the same status, headers and body.
 */
describe('the raw boot path answers exactly as the Fastify route does', () => {
  let t: TestApp;
  let port: number;
  /** URLs that went through Fastify (its onRequest hooks), over the socket or injected. */
  const viaFastify: string[] = [];

  beforeAll(async () => {
    t = await startApp(
      { IPXE_CP_TOKEN: 'sekret', IPXE_CP_AUTO_BOOT_TIMEOUT: '2' },
      {
        before: (app) =>
          app
            .getHttpAdapter()
            .getInstance()
            .addHook('onRequest', (req, _reply, done) => {
              viaFastify.push(req.url);
              done();
            }),
      },
    );
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:2d' });
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:2e' });
    await t.req('POST', '/workers', { worker_id: 'worker-01', mac: '00:0c:29:b9:8b:2d' });
    await t.req('POST', '/workers', { worker_id: 'w2', hostname: 'pc-2' });
    await t.req('PUT', '/workers/worker-01/default-os', { menu_default: 'exit' });
    if (!t.app.getHttpServer().listening) await t.app.listen(0, '127.0.0.1'); // the socket pass listens already
    port = (t.app.getHttpServer().address() as AddressInfo).port;
  });
  afterAll(() => t.close());

  function overSocket(method: string, path: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
    return new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method, path, agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      });
      req.on('error', reject);
      req.end();
    });
  }

  async function same(path: string, method = 'GET'): Promise<{ status: number; body: string }> {
    const raw = await overSocket(method, path);
    const inj = await t.app.getHttpAdapter().getInstance().inject({ method: method as 'GET', url: path });
    const pick = (h: Record<string, unknown>) => ({ 'content-type': h['content-type'], 'cache-control': h['cache-control'], 'content-length': String(h['content-length']) });
    // A challenge is fresh each time: its nonce and expiry are compared by form, not value.
    const fresh = (b: string) => b.replace(/\b[0-9a-f]{64}\b/g, '<nonce>').replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00/g, '<time>');
    expect({ path, status: raw.status, headers: pick(raw.headers), body: fresh(raw.body) }).toEqual({
      path,
      status: inj.statusCode,
      headers: pick(inj.headers),
      body: fresh(inj.body),
    });
    return { status: raw.status, body: raw.body };
  }

  it('the same answers for the documented cases (vars, json, pooled, unknown, bad input)', async () => {
    const cases = [
      '/boot-vars?mac=000c29b98b2d&hostname=worker-01',
      '/boot-vars?mac=00:0c:29:b9:8b:2d&hostname=worker-01&format=json',
      '/boot-vars?mac=00-0C-29-B9-8B-2E',
      '/boot-vars?mac=00:0c:29:b9:8b:77&format=json',
      '/boot-vars?hostname=pc-2',
      '/boot-vars?mac=&hostname=',
      '/boot-vars',
      '/boot-vars?',
      '/boot-vars?mac=zz',
      '/boot-vars?mac=00:0c:29:b9:8b:2d&mac=00:0c:29:b9:8b:2e',
      '/boot-vars?format=yaml',
      '/boot-vars?format=json&format=ipxe',
      '/boot-vars?mac=00%3A0c%3A29%3Ab9%3A8b%3A2d&hostname=worker%2D01',
      '/boot-vars?mac=00:0c:29:b9:8b:2d+&hostname=worker-01',
      '/devices/report?mac=00:0c:29:b9:8b:2d&manufacturer=ACME%20Inc&mem-total=0x8000',
      '/devices/report?mac=00:0c:29:b9:8b:2d&mem-total=lots',
      '/devices/report?mac=ff:ff:ff:ff:ff:ff',
      '/devices/report',
      '/devices/report?mac=02:00:00:00:10:01&serial=SN1',
      '/boot-menu?mac=000c29b98b2d&hostname=worker-01',
      '/boot-menu?mac=000c29b98b2d&format=json',
      '/boot-menu?mac=bad',
      '/devices/challenge?mac=000c29b98b2d',
      '/devices/challenge?mac=000c29b98b2d&format=json',
      '/devices/challenge?mac=bad',
      '/devices/challenge',
      '/devices/challenge?mac=000c29b98b2d&format=xml',
      // Not byte-for-byte ours: Fastify answers both ways.
      '/boot-vars/?mac=000c29b98b2d',
      '/Boot-vars?mac=000c29b98b2d',
      '/boot-vars;x?mac=000c29b98b2d',
      '/boot%2Dvars?mac=000c29b98b2d',
    ];
    for (const c of cases) await same(c);
    // Over the socket, the two routes never reached Fastify; everything else did.
    viaFastify.length = 0;
    await overSocket('GET', '/boot-vars?mac=000c29b98b2d&hostname=worker-01');
    await overSocket('GET', '/devices/report?mac=00:0c:29:b9:8b:2d');
    await overSocket('GET', '/boot-menu?mac=000c29b98b2d');
    await overSocket('GET', '/devices/challenge?mac=000c29b98b2d&format=json');
    await overSocket('GET', '/boot-vars/?mac=000c29b98b2d');
    await overSocket('HEAD', '/boot-vars?mac=000c29b98b2d');
    await overSocket('GET', '/healthz');
    expect(viaFastify).toEqual(['/boot-vars/?mac=000c29b98b2d', '/boot-vars?mac=000c29b98b2d', '/healthz']);
    // The documented answers really came back (not two identical errors).
    expect((await same('/boot-vars?mac=000c29b98b2d&hostname=worker-01')).body).toBe('#!ipxe\n# boot vars for worker-01\nset menu-default exit\nset menu-timeout 5000\n');
    expect((await same('/boot-vars?mac=zz')).status).toBe(400);
    expect((await same('/devices/report?mac=00:0c:29:b9:8b:2d')).status).toBe(200);
    // Other methods are Fastify's alone.
    for (const m of ['HEAD', 'POST', 'DELETE']) await same('/boot-vars?mac=000c29b98b2d', m);
    // A URL with `#` is Fastify's too (injection drops a fragment, a socket does not, so those
    // two cannot be compared here): the raw path must not answer it itself.
    const r = await overSocket('GET', '/boot-vars?mac=000c29b98b2d#frag');
    expect(r.body).toContain('invalid MAC address');
  });

  it('the same answers for generated query strings (repeated, encoded, hostile values)', async () => {
    const key = fc.constantFrom('mac', 'hostname', 'format', 'nonce', 'sig', 'uuid', 'manufacturer', 'mem-total', 'chip', 'pubkey', 'x');
    const value = fc.oneof(
      fc.constantFrom('00:0c:29:b9:8b:2d', '000c29b98b2e', 'worker-01', 'pc-2', 'json', 'ipxe', '', '0x10', '02:00:00:00:20:01'),
      fc.string({ maxLength: 40 }).map(encodeURIComponent),
      fc.string({ unit: 'binary', maxLength: 20 }).map(encodeURIComponent),
      fc.constantFrom('%', '%zz', '+', '%00', '%0a', '%E2%80%AE', 'a%26b%3Dc'),
    );
    const query = fc.array(fc.tuple(key, value), { maxLength: 6 }).map((kv) => kv.map(([k, v]) => `${k}=${v}`).join('&'));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('/boot-vars', '/boot-menu', '/devices/report', '/devices/challenge'), query, async (p, q) => {
        await same(`${p}?${q}`);
      }),
      { numRuns: 300 },
    );
  });
});

/**
 * The raw path is chosen by its own setting (IPXE_CP_RAW_BOOT_PATH), not by access logging: with
 * IPXE_CP_ACCESS_LOG=true it still answers the boot routes and writes their access-log lines itself
 * (checked on a production process's stdout); switched off, the boot routes go through Fastify.
 */
describe('the raw boot path and access logging', () => {
  const socketGet = (port: number, p: string) =>
    new Promise<number>((resolve, reject) => {
      http.get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      }).on('error', reject);
    });

  it.each([
    ['IPXE_CP_ACCESS_LOG=true: still the raw path', { IPXE_CP_ACCESS_LOG: 'true' }, false],
    ['IPXE_CP_RAW_BOOT_PATH=false: through Fastify', { IPXE_CP_RAW_BOOT_PATH: 'false' }, true],
  ])('%s', async (_name, env, throughFastify) => {
    const seen: string[] = [];
    const t = await startApp(env, { before: (app) => app.getHttpAdapter().getInstance().addHook('onRequest', (req, _r, done) => (seen.push(req.url.split('?')[0]), done())) });
    try {
      if (!t.app.getHttpServer().listening) await t.app.listen(0, '127.0.0.1');
      const port = (t.app.getHttpServer().address() as AddressInfo).port;
      for (const p of ['/boot-vars?mac=00:0c:29:b9:8b:2d', '/devices/report?mac=00:0c:29:b9:8b:2d', '/boot-menu', '/devices/challenge?mac=00:0c:29:b9:8b:2d']) expect(await socketGet(port, p)).toBeLessThan(500);
      expect(seen.filter((u) => u !== '/healthz').sort()).toEqual(throughFastify ? ['/boot-menu', '/boot-vars', '/devices/challenge', '/devices/report'] : []);
    } finally {
      await t.close();
    }
  });

  it('a production process with IPXE_CP_ACCESS_LOG=true logs each boot request from the raw path: route, status, no query', async () => {
    const dir = tempDir('kurrent-rawlog-');
    const port = await freePort();
    const proc = spawn(process.execPath, [path.join(__dirname, '../../dist/src/control-plane/main.js')], {
      cwd: dir,
      env: { PATH: process.env.PATH!, IPXE_CP_PORT: String(port), IPXE_CP_HOST: '127.0.0.1', IPXE_CP_ACCESS_LOG: 'true', IPXE_CP_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout!.on('data', (b) => (out += b));
    proc.stderr!.on('data', (b) => (out += b));
    try {
      const until = async (ok: () => boolean, what: string) => {
        for (const end = Date.now() + 30_000; !ok(); await new Promise((r) => setTimeout(r, 50))) if (Date.now() > end) throw new Error(`${what}; output:\n${out.slice(-2000)}`);
      };
      await until(() => out.includes(`http://localhost:${port}`) || out.includes(`127.0.0.1:${port}`), 'did not start');
      expect(await socketGet(port, '/boot-vars?mac=00:0c:29:b9:8b:2d&hostname=seat')).toBe(200);
      const line = () => out.split('\n').find((l) => l.includes('"route":"/boot-vars"'));
      await until(() => !!line(), 'no access-log line for /boot-vars');
      expect(JSON.parse(line()!)).toMatchObject({ context: 'http', method: 'GET', route: '/boot-vars', url: '/boot-vars', status: 200, client: '127.0.0.1', msg: 'request completed' });
      expect(line()).not.toContain('00:0c:29');
    } finally {
      proc.kill('SIGKILL');
    }
  }, 60_000);
});
