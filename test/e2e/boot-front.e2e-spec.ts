import * as net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { parseHead, sharedReadsAvailable } from '../../src/control-plane/boot/boot-front';
import { startApp, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

/**
 * The boot front (src/control-plane/boot/boot-front.ts) over real sockets: what it answers is
 * byte for byte what node:http answers, and every request it does not take reaches node:http
 * with its bytes intact, in order, on the same connection.
 */
describe('the boot front: boot routes answered off the socket, everything else handed to node:http', () => {
  let t: TestApp;
  let port: number;
  /** Requests node:http parsed (the front's never reach it). */
  const viaNodeHttp: string[] = [];
  const BOOTVARS = '/boot-vars?mac=00:0c:29:b9:8b:2d&hostname=worker-01';

  beforeAll(async () => {
    t = await startApp({ IPXE_CP_TOKEN: 'sekret' });
    await t.req('POST', '/devices', { mac: '00:0c:29:b9:8b:2d' });
    await t.req('POST', '/workers', { worker_id: 'worker-01', mac: '00:0c:29:b9:8b:2d' });
    await t.req('PUT', '/workers/worker-01/default-os', { menu_default: 'exit' });
    const server = t.app.getHttpServer() as Server;
    if (!server.listening) await t.app.listen(0, '127.0.0.1');
    server.prependListener('request', (req) => viaNodeHttp.push(req.url ?? ''));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => t.close());

  /** Writes the chunks (one write each, a pause between) and reads until the server closes or `until` matches. */
  function exchange(chunks: (string | Buffer)[], done: (got: string) => boolean): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1');
      let got = '';
      const finish = () => {
        s.destroy();
        resolve(got);
      };
      s.on('data', (d) => {
        got += d.toString('latin1');
        if (done(got)) finish();
      });
      s.on('end', finish);
      s.on('error', reject);
      s.setTimeout(10_000, () => reject(new Error(`timed out; got ${JSON.stringify(got)}`)));
      void (async () => {
        for (const c of chunks) {
          s.write(c);
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
    });
  }
  const responses = (got: string) => got.split(/(?=HTTP\/1\.1 \d{3} )/).filter(Boolean);
  const withoutDate = (r: string) => r.replace(/\r\nDate: [^\r]*/, '');
  const get = (path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: cp\r\n${extra}\r\n`;

  it('answers exactly what node:http answers (status line, headers, body), without node:http', async () => {
    const before = viaNodeHttp.length;
    const front = await exchange([get(BOOTVARS)], (g) => g.endsWith('set menu-timeout 5000\n'));
    expect(viaNodeHttp.length).toBe(before);
    // A header value with a byte outside visible ASCII: the front leaves the request to node:http.
    const node = await exchange([Buffer.from(get(BOOTVARS, 'X-Seat: caf\xe9\r\n'), 'latin1')], (g) => g.endsWith('set menu-timeout 5000\n'));
    expect(viaNodeHttp.slice(before)).toEqual([BOOTVARS]);
    expect(withoutDate(front)).toBe(withoutDate(node));
    expect(front).toMatch(/^HTTP\/1\.1 200 OK\r\ncache-control: no-store\r\ncontent-type: text\/plain; charset=utf-8\r\ncontent-length: \d+\r\nDate: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=\d+\r\n\r\n#!ipxe\n# boot vars for worker-01\n/);
    // Errors keep the filter's JSON shape and status.
    const bad = await exchange([get('/boot-vars?mac=nonsense')], (g) => g.includes('}'));
    expect(bad).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(JSON.parse(bad.slice(bad.indexOf('\r\n\r\n') + 4))).toMatchObject({ statusCode: 400, message: expect.stringContaining('mac') });
  });

  it('keep-alive and pipelining: answers in order; at the first other request the connection goes to node:http with its bytes intact', async () => {
    const before = viaNodeHttp.length;
    const got = await exchange([get(BOOTVARS) + get('/boot-menu?mac=00:0c:29:b9:8b:2d') + get('/healthz') + get(BOOTVARS, 'Connection: close\r\n')], () => false);
    const rs = responses(got);
    expect(rs).toHaveLength(4);
    expect(rs[0]).toContain('# boot vars for worker-01');
    expect(rs[1]).toContain('# boot menu for worker-01');
    expect(rs[2]).toContain('"status":"ok"');
    expect(rs[3]).toContain('Connection: close');
    // /healthz and everything after it on that connection went through node:http.
    expect(viaNodeHttp.slice(before)).toEqual(['/healthz', BOOTVARS]);
  });

  it("a whole boot's connection stays off node:http: the iPXE scripts are answered too, as Fastify answers them, counted under their route", async () => {
    const before = viaNodeHttp.length;
    const got = await exchange([get('/ipxe/boot.ipxe.cfg') + get(BOOTVARS) + get('/boot-menu?mac=00:0c:29:b9:8b:2d') + get('/ipxe/menu.ipxe', 'Connection: close\r\n')], () => false);
    const rs = responses(got);
    expect(rs).toHaveLength(4);
    expect(viaNodeHttp.length).toBe(before);
    for (const [i, name] of [[0, 'boot.ipxe.cfg'], [3, 'menu.ipxe']] as const) {
      const inj = await t.app.getHttpAdapter().getInstance().inject({ method: 'GET', url: `/ipxe/${name}` });
      expect(inj.statusCode).toBe(200);
      expect(rs[i].slice(rs[i].indexOf('\r\n\r\n') + 4)).toBe(inj.body);
      expect(rs[i]).toContain('\r\ncache-control: no-store\r\ncontent-type: text/plain; charset=utf-8\r\n');
    }
    const metrics = (await t.req('GET', '/metrics')).text;
    expect(metrics).toMatch(/kurrent_http_requests_total\{method="GET",route="\/ipxe\/:name",status="200"\} [1-9]/);
    expect(metrics).toMatch(/kurrent_boot_front_total\{result="answered"\} [1-9]/);
    expect(metrics).toMatch(/kurrent_boot_front_total\{result="handed_over"\} [1-9]/);
  });

  it('a head split into many chunks is answered once complete; Connection: close ends the connection', async () => {
    const before = viaNodeHttp.length;
    const req = get(BOOTVARS, 'Connection: close\r\n');
    const got = await exchange(req.split(''), () => false);
    expect(responses(got)).toHaveLength(1);
    expect(got).toContain('\r\nConnection: close\r\n\r\n#!ipxe\n');
    expect(viaNodeHttp.length).toBe(before);
  });

  it('connections share one read buffer: heads split and interleaved over two connections each get their own answer', async () => {
    expect(sharedReadsAvailable()).toBe(true);
    const before = viaNodeHttp.length;
    const open = () => {
      const s = net.connect(port, '127.0.0.1');
      const conn = { s, got: '' };
      s.on('data', (d) => (conn.got += d.toString('latin1')));
      return conn;
    };
    const a = open();
    const b = open();
    const pause = () => new Promise((r) => setTimeout(r, 20));
    const reqA = get(BOOTVARS, 'Connection: close\r\n');
    const reqB = get('/healthz', 'Connection: close\r\n');
    // Each half waits in its connection while the other connection's read fills the buffer.
    a.s.write(reqA.slice(0, 30));
    await pause();
    b.s.write(reqB.slice(0, 20));
    await pause();
    a.s.write(reqA.slice(30));
    await pause();
    b.s.write(reqB.slice(20));
    await until(async () => a.got.includes('menu-timeout') && b.got.includes('"status":"ok"'), 5_000);
    a.s.destroy();
    b.s.destroy();
    expect(responses(a.got)).toHaveLength(1);
    expect(a.got).toContain('# boot vars for worker-01');
    expect(responses(b.got)).toHaveLength(1);
    // The /healthz head went to node:http whole, although half of it was read before the other connection's.
    expect(viaNodeHttp.slice(before)).toEqual(['/healthz']);
  });

  it('after a hand-over, what arrives later on that connection is read by node:http', async () => {
    const before = viaNodeHttp.length;
    const got = await exchange([get(BOOTVARS) + get('/healthz'), get('/boot-menu?mac=00:0c:29:b9:8b:2d', 'Connection: close\r\n')], () => false);
    const rs = responses(got);
    expect(rs).toHaveLength(3);
    expect(rs[2]).toContain('# boot menu for worker-01');
    expect(viaNodeHttp.slice(before)).toEqual(['/healthz', '/boot-menu?mac=00:0c:29:b9:8b:2d']);
  });

  it('an answer that waits (a registration) holds the requests behind it, in order; nothing is read after Connection: close', async () => {
    const before = viaNodeHttp.length;
    const mac = '02:00:00:00:00:77';
    const got = await exchange(
      [get(`/devices/report?mac=${mac}&serial=S77`) + get(`/boot-vars?mac=${mac}&format=json`) + get(BOOTVARS, 'Connection: close\r\n') + get(BOOTVARS)],
      () => false,
    );
    const rs = responses(got);
    expect(rs).toHaveLength(3);
    expect(rs[0]).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*content-length: 0\r\n/);
    expect(rs[1]).toContain('"menu_default":"reboot"'); // registered (pooled) before it was asked
    expect(rs[2]).toContain('Connection: close');
    expect(viaNodeHttp.length).toBe(before);
    expect((await t.req('GET', `/devices/${mac}`)).body).toMatchObject({ state: 'pooled', fingerprint: { serial: 'S77' } });
  });

  it('never decides where a request with a body ends: node:http reads it (no request smuggled behind a body)', async () => {
    const before = viaNodeHttp.length;
    const smuggled = get('/boot-vars?mac=00:0c:29:b9:8b:2d');
    const body = `${smuggled}`;
    const got = await exchange([`GET /boot-vars?mac=02:00:00:00:00:99 HTTP/1.1\r\nHost: cp\r\nContent-Length: ${body.length}\r\n\r\n${body}` + get('/healthz', 'Connection: close\r\n')], () => false);
    const rs = responses(got);
    // Two requests as node:http reads them: the one with its body, then /healthz; never three.
    expect(rs).toHaveLength(2);
    expect(rs[1]).toContain('"status":"ok"');
    expect(viaNodeHttp.slice(before)).toEqual(['/boot-vars?mac=02:00:00:00:00:99', '/healthz']);
  });

  it('an oversized head, HTTP/1.0, another method, a missing Host: node:http answers each as it always did', async () => {
    const big = await exchange([`GET /boot-vars?mac=00:0c:29:b9:8b:2d HTTP/1.1\r\nHost: cp\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`], (g) => g.includes('\r\n\r\n'));
    expect(big).toMatch(/^HTTP\/1\.1 431 /);
    const old = await exchange([`GET ${BOOTVARS} HTTP/1.0\r\n\r\n`], () => false);
    expect(old).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(old).toContain('# boot vars for worker-01');
    const post = await exchange([`POST ${BOOTVARS} HTTP/1.1\r\nHost: cp\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`], () => false);
    expect(post).toMatch(/^HTTP\/1\.1 405 /);
    const noHost = await exchange([`GET ${BOOTVARS} HTTP/1.1\r\nConnection: close\r\n\r\n`], () => false);
    expect(noHost).toMatch(/^HTTP\/1\.1 400 /);
  });

  it('a connection idle between requests is closed when the server closes', async () => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    s.on('data', (d) => (got += d));
    const closed = new Promise((r) => s.on('close', r));
    s.write(get(BOOTVARS));
    await until(async () => got.includes('menu-timeout'), 5_000);
    expect(got).toContain('# boot vars for worker-01');
    await t.close();
    await closed;
    t = await startApp({ IPXE_CP_TOKEN: 'sekret' }); // afterAll closes this one
  });
});

describe('the boot front parser', () => {
  const paths = ['/boot-vars', '/boot-menu'];
  const head = (s: string) => parseHead(Buffer.from(s, 'latin1'), paths);
  it('takes only strictly formed bodiless GETs of its routes', () => {
    const one = 'GET /boot-vars?mac=a&mac=b HTTP/1.1\r\nHost: x\r\n\r\n';
    expect(head(one)).toEqual({ path: '/boot-vars', query: { mac: ['a', 'b'] }, close: false, length: one.length });
    const two = 'GET /boot-vars HTTP/1.1\r\nhost: x\r\nconnection: Close\r\n\r\n';
    expect(head(`${two}GET`)).toMatchObject({ path: '/boot-vars', query: {}, close: true, length: two.length });
    expect(head('GET /boot-vars?mac=a HTTP/1.1\r\nHost: x\r\n')).toBe('more');
    for (const bad of [
      'GET /boot-varsX HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /other HTTP/1.1\r\nHost: x\r\n\r\n',
      'HEAD /boot-vars HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /boot-vars HTTP/1.0\r\nHost: x\r\n\r\n',
      'GET /boot-vars#x HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET  /boot-vars HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\nX: y\r\n\r\n',
      'GET /boot-vars HTTP/1.1\r\nHost: x\r\nX: \x00\r\n\r\n',
      `GET /boot-vars HTTP/1.1\r\nHost: x\r\nX: ${'a'.repeat(17_000)}`,
    ]) {
      expect([bad.slice(0, 60), head(bad)]).toEqual([bad.slice(0, 60), null]);
    }
  });
});
