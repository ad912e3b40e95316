import { Readable } from 'node:stream';
import { jsonArrayStream } from '../../src/shared/http/json-array-stream';

const text = async (r: Readable) => {
  const parts: Buffer[] = [];
  for await (const p of r) parts.push(Buffer.from(p));
  return Buffer.concat(parts).toString('utf8');
};

describe('jsonArrayStream: a JSON array written a slice at a time', () => {
  const view = (i: number) => (i % 7 === 3 ? undefined : { i, name: `seat-${i}`, note: i % 5 ? null : 'ümlaut "quoted" \u2028' });

  it.each([0, 1, 2, 3, 4, 5, 6, 7, 11])('gives the bytes of JSON.stringify for %i items in slices of 3', async (n) => {
    const items = Array.from({ length: n }, (_, i) => i);
    const f = jsonArrayStream(items, view, 3);
    expect(f.getHeaders().type).toBe('application/json; charset=utf-8');
    const got = await text(f.getStream());
    expect(got).toBe(JSON.stringify(items.map(view)));
    expect(JSON.parse(got)).toHaveLength(n);
  });

  it('builds views only as the reader takes slices (the list is never whole in memory)', async () => {
    const items = Array.from({ length: 100_000 }, (_, i) => i);
    let built = 0;
    const stream = jsonArrayStream(items, (i) => (built++, { i }), 500).getStream();
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    expect(built).toBeGreaterThan(0);
    expect(built).toBeLessThan(10_000);
    let rest = '';
    for (let r = await it.next(); !r.done; r = await it.next()) rest += String(r.value);
    expect(built).toBe(100_000);
    expect(rest.endsWith(',{"i":99999}]')).toBe(true);
  });
});
