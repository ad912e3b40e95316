import { Controller, Get, Module } from '@nestjs/common';
import { Public } from '../../src/shared/http/auth.guard';
import { startApp, TestApp, typedClient } from '../helpers/app';

describe('auth, errors, settings and the audit trail', () => {
  let t: TestApp;
  afterEach(() => t.close());

  describe('auth (1.3)', () => {
    beforeEach(async () => {
      t = await startApp({ IPXE_CP_TOKEN: 's3cret-token' });
    });

    it('requires the bearer token everywhere except healthz, boot-vars and devices/report', async () => {
      const anon = { authorization: '' };
      expect((await t.req('GET', '/healthz', undefined, anon)).body).toEqual({ status: 'ok' });
      expect((await t.req('GET', '/boot-vars?mac=02:00:00:00:00:01', undefined, anon)).status).toBe(200);
      expect((await t.req('GET', '/devices/report?mac=02:00:00:00:00:01', undefined, anon)).status).toBe(200);
      for (const [m, u] of [
        ['GET', '/devices'],
        ['GET', '/workers'],
        ['GET', '/operations'],
        ['GET', '/settings/auto-register'],
        ['POST', '/workers'],
        ['DELETE', '/devices/02:00:00:00:00:01'],
      ]) {
        for (const h of [anon, { authorization: 'Bearer wrong' }, { authorization: 's3cret-token' }, { authorization: 'Bearer s3cret-token2' }]) {
          const r = await t.req(m, u, m === 'POST' ? { worker_id: 'x' } : undefined, h);
          expect([m, u, h.authorization, r.status]).toEqual([m, u, h.authorization, 401]);
          expect(r.body).toEqual({ statusCode: 401, error: 'Unauthorized', message: 'missing or invalid bearer token' });
        }
      }
      expect((await t.req('GET', '/devices', undefined, { authorization: 'bearer s3cret-token' })).status).toBe(200);
      expect((await t.req('GET', '/workers/nope')).status).toBe(404);
      expect((await t.req('GET', '/workers')).status).toBe(200);
    });

    it('serves the OpenAPI document and Swagger UI', async () => {
      const spec = await t.req('GET', '/openapi.json');
      expect(spec.status).toBe(200);
      expect(spec.body.paths['/boot-vars'].get.responses['200'].content['text/plain']).toBeDefined();
      expect((await t.req('GET', '/docs')).status).toBeLessThan(400);
      // Every asset the page names loads from the page's own URL; /docs/ (relative assets break there) redirects.
      const fastify = t.app.getHttpAdapter().getInstance();
      const page = await fastify.inject({ url: '/docs' });
      const assets = [...page.body.matchAll(/(?:href|src)="([^"]+\.(?:css|js))"/g)].map((m) => new URL(m[1], 'http://cp/docs').pathname);
      expect(assets.length).toBeGreaterThanOrEqual(3);
      for (const a of assets) expect([a, (await fastify.inject({ url: a })).statusCode]).toEqual([a, 200]);
      const slash = await fastify.inject({ url: '/docs/' });
      expect([slash.statusCode, slash.headers.location]).toEqual([301, '/docs']);
    });
  });

  describe('errors', () => {
    beforeEach(async () => {
      t = await startApp();
    });

    it('413 for a body over 1 MiB, in the one error shape, nothing written', async () => {
      const before = t.snapshot();
      const r = await t.req('POST', '/devices/import', { entries: [{ mac: 'x'.repeat(1024 * 1024) }] });
      expect(r.status).toBe(413);
      expect(r.body).toMatchObject({ statusCode: 413, message: expect.stringContaining('1 MiB') });
      expect(t.snapshot()).toEqual(before);
    });

    it('unknown routes and unsupported bodies get the JSON error shape', async () => {
      const r = await t.req('GET', '/nope');
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ statusCode: 404, error: 'Not Found' });
      // Bodies are JSON only, as the spec says: text and form bodies are a 415, and nothing is created.
      for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
        const r2 = await t.req('POST', '/workers', 'worker_id=x', { 'content-type': type });
        expect([r2.status, r2.body]).toEqual([415, { statusCode: 415, error: 'Unsupported Media Type', message: `Unsupported Media Type: ${type}` }]);
      }
      expect((await t.req('GET', '/workers')).body).toEqual([]);
      // A method the path does not have is a 405 naming the ones it has.
      const m = await t.req('PATCH', '/workers');
      expect([m.status, m.headers.allow, m.body.message]).toEqual([405, 'GET, HEAD, POST', 'method PATCH is not allowed on /workers; allowed: GET, HEAD, POST']);
      // null only where the spec says nullable; a missing field says it is missing.
      const n = await t.req('POST', '/workers', { worker_id: 'w1', arch: null });
      expect([n.status, n.body.message]).toEqual([400, 'arch: must not be null']);
      expect((await t.req('POST', '/workers', { hostname: 'x' })).body.message).toBe('worker_id: is required');
    });
  });

  describe('unknown errors', () => {
    @Controller('explode')
    class ExplodeController {
      @Public()
      @Get()
      boom(): never {
        throw new Error('secret internals at /etc/shadow');
      }
    }
    @Module({ controllers: [ExplodeController] })
    class ExplodeModule {}

    it('become a 500 with an error id and no internals', async () => {
      t = await startApp();
      // Mount a failing route on a second app instance built from the same filter.
      const { Test } = await import('@nestjs/testing');
      const { FastifyAdapter } = await import('@nestjs/platform-fastify');
      const { AllExceptionsFilter } = await import('../../src/shared/http/exception.filter');
      const mod = await Test.createTestingModule({ imports: [ExplodeModule] }).compile();
      const app = mod.createNestApplication(new FastifyAdapter(), { logger: false });
      app.useGlobalFilters(new AllExceptionsFilter());
      await app.init();
      await app.getHttpAdapter().getInstance().ready();
      const r = await app.getHttpAdapter().getInstance().inject({ method: 'GET', url: '/explode' });
      await app.close();
      const body = JSON.parse(r.body);
      expect(r.statusCode).toBe(500);
      expect(body.error_id).toMatch(/^[0-9a-f-]{36}$/);
      expect(body.message).toBe(`internal error (error_id ${body.error_id})`);
      expect(r.body).not.toContain('shadow');
      expect(r.body).not.toContain('at ');
    });
  });

  describe('settings (5.1)', () => {
    it('defaults to IPXE_CP_AUTO_REGISTER, persists PUT in settings.json over the env, audits it', async () => {
      t = await startApp({ IPXE_CP_AUTO_REGISTER: 'false' });
      expect((await t.req('GET', '/settings/auto-register')).body).toEqual({ enabled: false });
      const r = await t.req('PUT', '/settings/auto-register', { enabled: true });
      expect(r.body).toEqual({ enabled: true });
      expect(JSON.parse(t.read('state/settings.json'))).toEqual({ auto_register: true });
      const op = (await t.req('GET', '/operations')).body.entries.pop();
      expect(op).toMatchObject({ op: 'settings.auto_register', enabled: true, previous: false, status: 'ok' });
      const before = t.snapshot();
      for (const body of [{}, { enabled: 'yes' }, { enabled: 1 }, { enabled: true, x: 1 }]) {
        expect((await t.req('PUT', '/settings/auto-register', body)).status).toBe(400);
      }
      expect(t.snapshot()).toEqual(before);
      await t.close();
      t = await startApp({ IPXE_CP_AUTO_REGISTER: 'false' }, { dir: t.dir });
      expect((await t.req('GET', '/settings/auto-register')).body).toEqual({ enabled: true });
    });
  });

  describe('GET /operations (12)', () => {
    it('pages with since/limit/next_cursor and filters by MAC', async () => {
      t = await startApp();
      for (let i = 1; i <= 5; i++) await t.req('POST', '/devices', { mac: `02:00:00:00:00:0${i}` });
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:03' });
      const all = (await t.req('GET', '/operations')).body;
      expect(all.entries.map((e: any) => e.id)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect(all.next_cursor).toBe(7);
      for (const e of all.entries) {
        expect(e).toEqual(expect.objectContaining({ id: expect.any(Number), ts: expect.stringMatching(/\+00:00$/), op: expect.any(String), status: 'ok', client: expect.any(String) }));
      }
      const p1 = (await t.req('GET', '/operations?since=2&limit=2')).body;
      expect(p1.entries.map((e: any) => e.id)).toEqual([3, 4]);
      expect(p1.next_cursor).toBe(4);
      const p2 = (await t.req('GET', `/operations?since=${p1.next_cursor}&limit=100`)).body;
      expect(p2.entries.map((e: any) => e.id)).toEqual([5, 6, 7]);
      expect((await t.req('GET', '/operations?since=7')).body).toEqual({ next_cursor: 7, entries: [] });
      const byMac = (await t.req('GET', '/operations?mac=02-00-00-00-00-03')).body.entries;
      expect(byMac.map((e: any) => e.op)).toEqual(['device.register', 'worker.create', 'device.bind']);
      for (const q of ['since=-1', 'limit=0', 'limit=10001', 'since=abc', 'mac=zz', 'other=1']) {
        expect([q, (await t.req('GET', `/operations?${q}`)).status]).toEqual([q, 400]);
      }
    });

    it('filters by op (exact or family), worker and agent, and tail returns the last N matches (what the UI tails)', async () => {
      t = await startApp();
      for (let i = 1; i <= 4; i++) await t.req('POST', '/devices', { mac: `02:00:00:00:00:0${i}` });
      await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:03' });
      await t.req('POST', '/workers/batch', { count: 2, name_prefix: 'b' });
      await t.req('POST', '/devices/bind/batch', { mode: 'manifest', pairs: [{ mac: '02:00:00:00:00:04', worker_id: 'b01' }] });
      const all = (await t.req('GET', '/operations')).body.entries as any[];
      const ids = (q: string) => t.req('GET', `/operations?${q}`).then((r) => (r.body.entries as any[]).map((e) => e.id));
      expect(await ids('op=device.register')).toEqual(all.filter((e) => e.op === 'device.register').map((e) => e.id));
      const family = all.filter((e) => e.op.startsWith('device.')).map((e) => e.id);
      expect(family.length).toBeGreaterThan(5);
      expect(await ids('op=device.*')).toEqual(family);
      expect(await ids('op=worker.*&worker_id=w1')).toEqual(all.filter((e) => e.op.startsWith('worker.') && e.worker_id === 'w1').map((e) => e.id));
      // A batch names its workers in worker_ids: the filter finds it from either worker.
      const b02 = await ids('worker_id=b02');
      expect(b02.length).toBeGreaterThan(0);
      expect(b02.every((id) => { const e = all.find((x) => x.id === id); return e.worker_id === 'b02' || e.worker_ids?.includes('b02'); })).toBe(true);
      expect(await ids('agent=none-such')).toEqual([]);
      // tail: the last N matches, oldest first; since still applies; next_cursor follows on.
      const tail = (await t.req('GET', '/operations?op=device.*&tail=3')).body;
      expect(tail.entries.map((e: any) => e.id)).toEqual(family.slice(-3));
      expect(tail.next_cursor).toBe(family[family.length - 1]);
      expect(await ids(`tail=100&since=${all[all.length - 2].id}`)).toEqual([all[all.length - 1].id]);
      for (const q of ['op=Device.Bind', 'op=device.', 'op=*', 'op=device.*.x', 'worker_id=..', 'agent=-x', 'tail=0', 'tail=10001']) {
        const r = await t.req('GET', `/operations?${q}`);
        expect([q, r.status]).toEqual([q, 400]);
        expect(r.body.message).toContain(q.split('=')[0]);
      }
    });
  });
});

describe('the typed client generated from the spec, against the whole app', () => {
  it('creates, reads, lists and audits with compile-time checked paths, bodies and answers', async () => {
    const t = await startApp({ IPXE_CP_TOKEN: 'typed' });
    try {
      const api = typedClient(t);
      const created = await api.POST('/workers', { body: { worker_id: 'typed-01', boot: { menu_default: 'exit', menu_timeout: 0 } } });
      expect(created.response.status).toBe(201);
      expect(created.data?.worker_id).toBe('typed-01');
      const got = await api.GET('/workers/{worker_id}', { params: { path: { worker_id: 'typed-01' } } });
      expect(got.data?.boot).toEqual({ menu_default: 'exit', menu_timeout: 0 });
      const missing = await api.GET('/workers/{worker_id}', { params: { path: { worker_id: 'nobody' } } });
      expect([missing.response.status, missing.error?.message]).toEqual([404, 'worker not found: nobody']);
      const ops = await api.GET('/operations', { params: { query: { limit: 10 } } });
      expect(ops.data?.entries.map((e) => e.op)).toEqual(['worker.create']);
      const denied = await typedClient(t, 'wrong').GET('/workers');
      expect(denied.response.status).toBe(401);
    } finally {
      await t.close();
    }
  });
});
