import { EncodedAnswer, ResponseHead } from '../../src/control-plane/boot/encoded-answer';

/**
 * The boot front's whole responses: a shared head with the second's Date and the answer's body.
 * A Buffer once handed out never changes (it may still be queued on a slow socket).
 */
describe('EncodedAnswer.wire', () => {
  const D1 = 'Fri, 04 Dec 2026 03:00:00 GMT';
  const D2 = 'Fri, 04 Dec 2026 03:00:01 GMT';
  const headText = (date: string, length: number) => `HTTP/1.1 200 OK\r\ncontent-length: ${length}\r\nDate: ${date}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n`;
  const headOf = (a: EncodedAnswer): ResponseHead => {
    const text = headText(' '.repeat(29), a.length);
    return { bytes: Buffer.from(text, 'latin1'), dateAt: text.indexOf('Date: ') + 6 };
  };

  it('serves a shared answer as the same bytes within the second and new bytes with the new Date after it, the old ones untouched', () => {
    const a = EncodedAnswer.of('#!ipxe\n', true);
    const h = headOf(a);
    const first = a.wire(h, D1);
    expect(first.toString('latin1')).toBe(`${headText(D1, 7)}#!ipxe\n`);
    expect(a.wire(h, D1)).toBe(first);
    const second = a.wire(h, D2);
    expect(second).not.toBe(first);
    expect(second.toString('latin1')).toBe(`${headText(D2, 7)}#!ipxe\n`);
    // The first second's bytes are untouched: a socket may still be writing them.
    expect(first.toString('latin1')).toBe(`${headText(D1, 7)}#!ipxe\n`);
    // The shared head is untouched too: every answer of that length writes from it.
    expect(h.bytes.toString('latin1')).toBe(headText(' '.repeat(29), 7));
  });

  it('keeps a body with characters beyond ASCII as UTF-8: its length in bytes, its bytes on the wire', () => {
    const a = EncodedAnswer.of('#!ipxe\nset name café-β\n');
    expect(a.length).toBe(Buffer.byteLength('#!ipxe\nset name café-β\n'));
    expect(a.length).toBeGreaterThan(a.text.length);
    expect(a.bytes.toString('utf8')).toBe('#!ipxe\nset name café-β\n');
    expect(a.headers).toEqual(['cache-control', 'no-store', 'content-type', 'text/plain; charset=utf-8', 'content-length', String(a.length)]);
    const out = a.wire(headOf(a), D1);
    expect(out.subarray(out.length - a.length).toString('utf8')).toBe('#!ipxe\nset name café-β\n');
    expect(out.toString('latin1', 0, out.length - a.length)).toBe(headText(D1, a.length));
  });

  it('encodes an object as JSON, once', () => {
    const a = EncodedAnswer.of({ ok: true, name: 'ü' });
    expect(a.contentType).toBe('application/json; charset=utf-8');
    expect(a.text).toBe('{"ok":true,"name":"ü"}');
    expect(a.length).toBe(23);
    expect(JSON.parse(a.bytes.toString('utf8'))).toEqual({ ok: true, name: 'ü' });
  });

  it('lets go of the last second’s response once another second is served (a storm keeps no copy per answer)', () => {
    const a = EncodedAnswer.of('#!ipxe\necho a\n', true);
    const b = EncodedAnswer.of('#!ipxe\necho b\n', true);
    const a1 = a.wire(headOf(a), D1);
    expect(a.wire(headOf(a), D1)).toBe(a1);
    b.wire(headOf(b), D2);
    // a's D1 copy was dropped when D2 began: asked again, it is built anew (same bytes).
    const again = a.wire(headOf(a), D1);
    expect(again).not.toBe(a1);
    expect(again.equals(a1)).toBe(true);
  });

  it("keeps a device's own answer only from its second request in a second on (a storm asks each seat once: nothing kept)", () => {
    const a = EncodedAnswer.of('#!ipxe\nset disk-nqn nqn.x:seat-1\n');
    const h = headOf(a);
    const kept = () => (a as unknown as { wireBytes: Buffer | null }).wireBytes;
    const first = a.wire(h, D1);
    expect(first.toString('latin1')).toBe(`${headText(D1, a.length)}#!ipxe\nset disk-nqn nqn.x:seat-1\n`);
    expect(kept()).toBeNull();
    const second = a.wire(h, D1);
    expect(second).not.toBe(first);
    expect(second.equals(first)).toBe(true);
    expect(kept()).toBe(second);
    expect(a.wire(h, D1)).toBe(second);
    // A new second: its first response is built and not kept; the second one's copy was let go.
    const next = a.wire(h, D2);
    expect(next.toString('latin1')).toBe(`${headText(D2, a.length)}#!ipxe\nset disk-nqn nqn.x:seat-1\n`);
    expect(kept()).toBeNull();
    // Asked again in that second: that second's bytes, never the last second's copy.
    expect(a.wire(h, D2).equals(next)).toBe(true);
  });
});
