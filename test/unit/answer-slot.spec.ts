import fc from 'fast-check';
import { AnswerSlot } from '../../src/control-plane/boot/answer-slot';

/** The answer cache's per-MAC slot answers as a Map would, for every sequence of its operations. */
describe('AnswerSlot', () => {
  const HOSTS = [undefined, 'seat-1', 'SEAT-1'];
  const op = fc.record({ kind: fc.constantFrom('set', 'delete'), host: fc.constantFrom<string | undefined>(...HOSTS), value: fc.integer() });

  it('matches a Map under any sequence of set and delete (get compared after each)', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 30 }), (ops) => {
        const slot = new AnswerSlot<{ v: number }>();
        const map = new Map<string | undefined, { v: number }>();
        for (const o of ops) {
          if (o.kind === 'set') {
            const e = { v: o.value };
            slot.set(o.host, e);
            map.set(o.host, e);
          } else expect(slot.delete(o.host)).toBe(map.delete(o.host));
          for (const h of HOSTS) expect(slot.get(h)).toBe(map.get(h));
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps a second name beside the first, and the first again after it was deleted', () => {
    const slot = new AnswerSlot<string>();
    slot.set('seat-1', 'a');
    slot.set(undefined, 'b');
    expect([slot.get('seat-1'), slot.get(undefined)]).toEqual(['a', 'b']);
    expect(slot.delete('seat-1')).toBe(true);
    expect(slot.get('seat-1')).toBeUndefined();
    slot.set('seat-1', 'c');
    expect([slot.get('seat-1'), slot.get(undefined)]).toEqual(['c', 'b']);
    expect(slot.delete(undefined)).toBe(true);
    expect(slot.delete(undefined)).toBe(false);
    expect(slot.get(undefined)).toBeUndefined();
  });
});
