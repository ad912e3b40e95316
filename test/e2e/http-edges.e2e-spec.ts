import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { freePort, startApp, tempDir, TestApp } from '../helpers/app';

/** What a client sees at the edges of HTTP, over real sockets: refused bodies, how the process starts. */
describe('HTTP edges over real sockets', () => {
  let t: TestApp;
  afterEach(() => t?.close());

  /** POSTs `size` bytes in 64 KiB writes on a connection of its own: the status, or the socket error. */
  const post = (port: number, size: number, chunked: boolean) =>
    new Promise<string>((resolve) => {
      const body = Buffer.alloc(size, 'a');
      const req = http.request(
        { host: '127.0.0.1', port, method: 'POST', path: '/devices', agent: false, headers: { 'content-type': 'application/json', ...(chunked ? {} : { 'content-length': size }) } },
        (res) => {
          res.resume();
          res.on('end', () => resolve(String(res.statusCode)));
        },
      );
      req.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
      let off = 0;
      const write = () => {
        while (off < size) {
          const more = req.write(body.subarray(off, off + 65536));
          off += 65536;
          if (!more) return void req.once('drain', write);
        }
        req.end();
      };
      write();
    });

  it('a body over 1 MiB is answered 413 under load, never with a reset (the rest is drained, bounded)', async () => {
    t = await startApp();
    await t.app.listen(0, '127.0.0.1');
    const port = (t.app.getHttpServer().address() as AddressInfo).port;
    const seen: Record<string, number> = {};
    for (const chunked of [false, true]) {
      const all = await Promise.all(Array.from({ length: 40 }, () => post(port, 4 << 20, chunked)));
      for (const s of all) seen[s] = (seen[s] ?? 0) + 1;
    }
    expect(seen).toEqual({ '413': 80 });
    // Nothing was registered.
    expect((await t.req('GET', '/devices')).body).toEqual([]);
  });

  it('npm run start:prod after a later nest build (the bundle missing, or older than dist/src) starts the unbundled code and says so', async () => {
    const dist = path.join(__dirname, '../../dist');
    // A copy of dist's layout: start.js beside a server.js that is the real one, and a bundle
    // that must not run (stale: older than server.js), then none at all (emptied by nest build).
    const root = tempDir('kurrent-startprod-');
    fs.mkdirSync(path.join(root, 'src/control-plane'), { recursive: true });
    fs.mkdirSync(path.join(root, 'bundle'));
    fs.copyFileSync(path.join(dist, 'src/control-plane/start.js'), path.join(root, 'src/control-plane/start.js'));
    const stale = path.join(root, 'bundle/kurrent.js');
    fs.writeFileSync(stale, "process.stderr.write('STALE BUNDLE RAN\\n'); process.exit(9);\n");
    fs.utimesSync(stale, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    fs.writeFileSync(path.join(root, 'src/control-plane/server.js'), `module.exports = require(${JSON.stringify(path.join(dist, 'src/control-plane/server.js'))});\n`);
    for (const drop of [false, true]) {
      if (drop) fs.rmSync(stale);
      const dir = tempDir('kurrent-startprod-state-');
      const port = await freePort();
      const proc = spawn(process.execPath, [path.join(root, 'src/control-plane/start.js')], {
        env: { PATH: process.env.PATH, IPXE_CP_PORT: String(port), IPXE_CP_HOST: '127.0.0.1', IPXE_CP_STATE_DIR: path.join(dir, 'state'), IPXE_CP_CONFIG_DIR: path.join(dir, 'config'), IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'), IPXE_CP_LOG_LEVEL: 'silent' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let err = '';
      proc.stderr!.on('data', (b) => (err += b));
      try {
        let status = 0;
        for (const end = Date.now() + 30_000; Date.now() < end && status !== 200 && proc.exitCode === null; ) {
          status = await fetch(`http://127.0.0.1:${port}/healthz`).then(
            (r) => r.status,
            () => 0,
          );
          if (status !== 200) await new Promise((r) => setTimeout(r, 100));
        }
        expect([drop, status, proc.exitCode, err.includes('STALE')]).toEqual([drop, 200, null, false]);
        expect(err).toMatch(/bundle\/kurrent\.js is missing or older than dist\/src \(a nest build ran after npm run build\): starting unbundled/);
      } finally {
        proc.kill('SIGKILL');
      }
    }
  });
});
