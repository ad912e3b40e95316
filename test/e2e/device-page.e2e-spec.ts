import { macOf, startApp, TestApp } from '../helpers/app';

type Page = { total: number; counts: Record<string, number>; items: { mac: string; state: string; bound_worker_id: string | null; fingerprint: { serial: string | null } }[]; next_after: string | null };

/**
 * GET /devices/page: what the web UI reads instead of the whole pool. Pages walk the pool in MAC
 * order exactly once; filters and the search agree with GET /devices filtered by hand.
 */
describe('GET /devices/page', () => {
  let t: TestApp;
  const N = 2_500;
  beforeAll(async () => {
    t = await startApp();
    // Imported out of MAC order: the page order is the server's doing.
    const entries = Array.from({ length: N }, (_, i) => {
      const k = (i * 7) % N;
      return { mac: macOf(0x100 + k), serial: `SN-${String(k).padStart(5, '0')}`, product: k % 10 === 0 ? 'OptiPlex 7090' : 'ThinkCentre' };
    });
    for (let i = 0; i < N; i += 1000) expect((await t.req('POST', '/devices/import', { entries: entries.slice(i, i + 1000) })).status).toBe(200);
    for (const k of [3, 40, 1234]) {
      expect((await t.req('POST', '/workers', { worker_id: `lab-${k}` })).status).toBe(201);
      expect((await t.req('POST', `/devices/${macOf(0x100 + k)}/bind?worker_id=lab-${k}`)).status).toBe(200);
    }
  });
  afterAll(() => t?.close());

  const page = async (q: string): Promise<Page> => {
    const r = await t.req('GET', `/devices/page${q}`);
    expect(r.status).toBe(200);
    return r.body;
  };

  it('walks the whole pool in MAC order, each device once, with the counts of the pool', async () => {
    const all = ((await t.req('GET', '/devices')).body as { mac: string }[]).map((d) => d.mac).sort();
    const seen: string[] = [];
    let after = '';
    let pages = 0;
    for (;;) {
      const p = await page(`?limit=700${after ? `&after=${after}` : ''}`);
      expect(p.total).toBe(N);
      expect(p.counts).toEqual({ all: N, pooled: N - 3, bound: 3, revoked: 0 });
      seen.push(...p.items.map((d) => d.mac));
      pages++;
      if (!p.next_after) break;
      expect(p.next_after).toBe(p.items[p.items.length - 1].mac);
      after = p.next_after;
    }
    expect(pages).toBe(4);
    expect(seen).toEqual(all);
    const first = await page('');
    expect(first.items).toHaveLength(200);
    expect(first.items.map((d) => d.mac)).toEqual(all.slice(0, 200));
  });

  it('filters by state and searches MACs in any spelling, serials, products and workers', async () => {
    const bound = await page('?state=bound');
    expect(bound.items.map((d) => d.bound_worker_id)).toEqual(['lab-3', 'lab-40', 'lab-1234'].sort((a, b) => (macOf(0x100 + Number(a.slice(4))) < macOf(0x100 + Number(b.slice(4))) ? -1 : 1)));
    expect(bound.total).toBe(3);
    const mac = macOf(0x100 + 1234);
    for (const spelling of [mac.toUpperCase().replace(/:/g, '-'), mac.replace(/:/g, '').slice(4)]) {
      const p = await page(`?q=${encodeURIComponent(spelling)}`);
      expect(p.items.map((d) => d.mac)).toContain(mac);
    }
    expect((await page('?q=sn-01234')).items.map((d) => d.fingerprint.serial)).toEqual(['SN-01234']);
    expect((await page('?q=LAB-40')).items.map((d) => d.mac)).toEqual([macOf(0x100 + 40)]);
    const optiplex = await page('?q=optiplex&limit=1000');
    expect(optiplex.total).toBe(N / 10);
    expect(optiplex.items).toHaveLength(N / 10);
    expect(optiplex.next_after).toBeNull();
    const pooledOptiplex = await page('?q=optiplex&state=pooled&key=none&limit=5');
    expect(pooledOptiplex.total).toBe(N / 10 - 1); // lab-40 is bound
    expect(pooledOptiplex.items).toHaveLength(5);
    expect((await page(`?q=optiplex&after=${pooledOptiplex.next_after}&limit=1000`)).total).toBe(N / 10);
    expect((await page('?key=claimed')).total).toBe(0);
  });

  it.each([
    ['?limit=0', /^limit: /],
    ['?limit=1001', /^limit: /],
    ['?after=zz', /^after: /],
    ['?state=gone', /^state: /],
    ['?key=maybe', /^key: /],
    [`?q=${'x'.repeat(129)}`, /^q: /],
  ])('refuses %s naming the field', async (q, msg) => {
    const r = await t.req('GET', `/devices/page${q}`);
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(msg);
  });
});
