import * as http from 'node:http';
import { freePort, startApp, TestApp } from '../helpers/app';

/**
 * GET /metrics: Prometheus text, parsed line by line; the series the operators watch are there
 * with bounded labels (no MAC anywhere, no secret), boot routes answered on the raw path are
 * counted like the others, and the token guards it unless IPXE_CP_METRICS_PUBLIC=true.
 */

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The exposition format 0.0.4: `# HELP`, `# TYPE`, then `name{a="b",...} value`. */
function parse(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (!line) continue;
    const t = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (t) {
      types.set(t[1], t[2]);
      continue;
    }
    if (line.startsWith('# HELP ')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (-?[0-9.e+]+|NaN|[+-]Inf)$/.exec(line);
    if (!m) throw new Error(`not exposition format: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types };
}

const pick = (s: Sample[], name: string, labels: Record<string, string> = {}) =>
  s.filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
const value = (s: Sample[], name: string, labels: Record<string, string> = {}) => {
  const m = pick(s, name, labels);
  if (m.length !== 1) throw new Error(`${name} ${JSON.stringify(labels)}: ${m.length} samples`);
  return m[0].value;
};

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path }, (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      })
      .on('error', reject);
  });
}

describe('GET /metrics', () => {
  let t: TestApp;
  afterEach(async () => t?.close());

  it('devices, workers, window, settings, requests per route template (boot routes on the raw path too), commits; no MAC or secret', async () => {
    t = await startApp({ IPXE_CP_TOKEN: 'm-token', IPXE_CP_REPORT_FLUSH_MS: '0' });
    const port = await freePort();
    await t.app.listen(port, '127.0.0.1');
    for (let i = 1; i <= 3; i++) await t.req('POST', '/devices', { mac: `02:00:00:00:00:0${i}` });
    await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
    await t.req('POST', '/workers', { worker_id: 'w2' });
    await t.req('DELETE', '/devices/02:00:00:00:00:03');
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 10, max_devices: 4 });
    // Boot routes over a real socket: answered before Fastify, counted all the same.
    for (let i = 0; i < 5; i++) expect((await get(port, '/boot-vars?mac=02:00:00:00:00:01')).status).toBe(200);
    expect((await get(port, '/boot-vars?mac=nonsense')).status).toBe(400);
    expect((await get(port, '/devices/02:00:00:00:00:02/nope')).status).toBe(404);

    expect((await t.req('GET', '/metrics', undefined, { authorization: '' })).status).toBe(401);
    const r = await t.req('GET', '/metrics');
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    const { samples: s, types } = parse(r.text);

    expect(value(s, 'kurrent_devices', { state: 'pooled' })).toBe(1);
    expect(value(s, 'kurrent_devices', { state: 'bound' })).toBe(1);
    expect(value(s, 'kurrent_devices', { state: 'revoked' })).toBe(1);
    expect(value(s, 'kurrent_devices_key_claimed')).toBe(0);
    expect(value(s, 'kurrent_workers', { readiness: 'partial' })).toBe(1);
    expect(value(s, 'kurrent_workers', { readiness: 'idle' })).toBe(1);
    expect(value(s, 'kurrent_workers', { readiness: 'ready' })).toBe(0);
    expect(value(s, 'kurrent_registration_window_open')).toBe(1);
    expect(value(s, 'kurrent_registration_window_seats_remaining')).toBe(4);
    expect(value(s, 'kurrent_registration_window_seconds_remaining')).toBeGreaterThan(590);
    expect(value(s, 'kurrent_settings_enabled', { setting: 'auto_register' })).toBe(1);
    expect(value(s, 'kurrent_settings_enabled', { setting: 'signature_enforcement' })).toBe(0);

    expect(value(s, 'kurrent_http_requests_total', { method: 'GET', route: '/boot-vars', status: '200' })).toBe(5);
    expect(value(s, 'kurrent_http_requests_total', { method: 'GET', route: '/boot-vars', status: '400' })).toBe(1);
    expect(value(s, 'kurrent_http_requests_total', { method: 'POST', route: '/devices', status: '201' })).toBe(3);
    expect(value(s, 'kurrent_http_requests_total', { method: 'DELETE', route: '/devices/:mac', status: '200' })).toBe(1);
    expect(value(s, 'kurrent_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' })).toBe(1);
    expect(types.get('kurrent_http_request_duration_seconds')).toBe('histogram');
    expect(value(s, 'kurrent_http_request_duration_seconds_count', { method: 'GET', route: '/boot-vars' })).toBe(6);
    expect(value(s, 'kurrent_http_request_duration_seconds_bucket', { method: 'GET', route: '/boot-vars', le: '+Inf' })).toBe(6);

    // Every commit above (3 registers, 2 workers with one bind, a revoke) was timed.
    expect(value(s, 'kurrent_store_commit_duration_seconds_count', { kind: 'commit' })).toBeGreaterThanOrEqual(6);
    expect(value(s, 'kurrent_audit_operations_total', { op: 'device.register', status: 'ok' })).toBe(3);
    expect(pick(s, 'kurrent_process_resident_memory_bytes')).toHaveLength(1);

    // Bounded labels only: no MAC (any spelling), no token, in any label or name.
    expect(r.text).not.toMatch(/02[:-]?00[:-]?00[:-]?00[:-]?00[:-]?0\d/i);
    expect(r.text).not.toContain('m-token');
    const routes = new Set(pick(s, 'kurrent_http_requests_total').map((x) => x.labels.route));
    for (const route of routes) expect(route === 'unmatched' || route.startsWith('/')).toBe(true);
    expect([...routes].every((x) => !/[0-9a-f]{2}:[0-9a-f]{2}/.test(x))).toBe(true);
  });

  it('agents, reconciler passes and the credential queue', async () => {
    t = await startApp({ IPXE_CP_RECONCILE_SECONDS: '0' });
    const dead = await freePort();
    expect((await t.req('POST', '/agents', { id: 'dead-1', base_url: `http://127.0.0.1:${dead}` })).status).toBe(201);
    expect((await t.req('POST', '/agents', { id: 'off-1', base_url: `http://127.0.0.1:${await freePort()}`, enabled: false })).status).toBe(201);
    await t.req('GET', '/agents?live=true');
    await t.req('POST', '/reconcile');
    const { samples: s } = parse((await t.req('GET', '/metrics')).text);
    expect(value(s, 'kurrent_agent_up', { agent: 'dead-1' })).toBe(0);
    expect(pick(s, 'kurrent_agent_up', { agent: 'off-1' })).toHaveLength(0);
    expect(value(s, 'kurrent_agent_enabled', { agent: 'dead-1' })).toBe(1);
    expect(value(s, 'kurrent_agent_enabled', { agent: 'off-1' })).toBe(0);
    expect(value(s, 'kurrent_reconciler_passes_total', { status: 'ok' })).toBe(1);
    for (const state of ['pending', 'failed', 'removing']) expect(value(s, 'kurrent_credential_push_queue', { state })).toBe(0);
  });

  it('IPXE_CP_METRICS_PUBLIC=true opens /metrics alone; every other route still needs the token', async () => {
    t = await startApp({ IPXE_CP_TOKEN: 'm-token', IPXE_CP_METRICS_PUBLIC: 'true' });
    expect((await t.req('GET', '/metrics', undefined, { authorization: '' })).status).toBe(200);
    expect((await t.req('GET', '/devices', undefined, { authorization: '' })).status).toBe(401);
    expect((await t.req('GET', '/operations', undefined, { authorization: '' })).status).toBe(401);
  });
});
