import { EncodedAnswer } from '../../src/control-plane/boot/encoded-answer';

/**
 * The boot front's whole responses: built once per answer, copied with a new Date each second.
 * A Buffer once handed out never changes (it may still be queued on a slow socket).
 */
describe('EncodedAnswer.wire', () => {
  const D1 = 'Fri, 04 Dec 2026 03:00:00 GMT';
  const D2 = 'Fri, 04 Dec 2026 03:00:01 GMT';
  const head = (date: string) => `HTTP/1.1 200 OK\r\ncontent-length: 7\r\nDate: ${date}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n`;
  const built = (a: EncodedAnswer, date: string) => {
    const h = head(date);
    return { bytes: Buffer.concat([Buffer.from(h, 'latin1'), a.bytes]), dateAt: h.indexOf(date) };
  };

  it('asks for a build first, then serves the same bytes within the second and a copy with the new Date after it', () => {
    const a = EncodedAnswer.of('#!ipxe\n');
    expect(a.wire(D1, 5)).toBeNull();
    const first = a.keep(built(a, D1), D1, 5);
    expect(first.toString('latin1')).toBe(`${head(D1)}#!ipxe\n`);
    expect(a.wire(D1, 5)).toBe(first);
    const second = a.wire(D2, 5)!;
    expect(second.toString('latin1')).toBe(`${head(D2)}#!ipxe\n`);
    // The first second's bytes are untouched: a socket may still be writing them.
    expect(first.toString('latin1')).toBe(`${head(D1)}#!ipxe\n`);
    expect(a.wire(D2, 5)).toBe(second);
    // The body is kept once, as the template's tail (same memory, not merely the same pool slab).
    expect(a.bytes.toString()).toBe('#!ipxe\n');
    expect(a.bytes.buffer).toBe(first.buffer);
    expect(a.bytes.byteOffset).toBe(first.byteOffset + first.length - a.bytes.length);
    // ...and that memory is the response's own: a slice of Buffer's shared 8 KB pool would keep
    // the whole slab, mostly other requests' garbage, alive as long as the answer is cached.
    expect(first.buffer.byteLength).toBe(first.length);
  });

  it('builds again when the keep-alive timeout changed or a Date is not the fixed 29 characters', () => {
    const a = EncodedAnswer.of({ ok: true });
    a.keep(built(a, D1), D1, 5);
    expect(a.wire(D2, 6)).toBeNull();
    expect(a.wire('Sat, 01 Jan 10000 00:00:00 GMT', 5)).toBeNull();
  });
});
