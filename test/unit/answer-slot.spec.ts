import fc from 'fast-check';
import { AnswerSlot, CachedAnswer } from '../../src/control-plane/boot/answer-slot';
import { EncodedAnswer } from '../../src/control-plane/boot/encoded-answer';

const answer = (v: number | string): CachedAnswer => ({ body: EncodedAnswer.of(String(v)), note: { mac: '02:00:00:00:00:01', stage: 'vars', detail: { answer: String(v) } }, restores: typeof v === 'number' && v % 2 === 1 });
const put = (slot: AnswerSlot, host: string | undefined, a: CachedAnswer) => slot.set(host, a.body, a.note, a.restores);
/** What a slot answers for host, as plain fields (the slot's own answer is the slot itself). */
const read = (slot: AnswerSlot, host: string | undefined) => {
  const a = slot.get(host);
  return a && { body: a.body, note: a.note, restores: a.restores };
};

/** The answer cache's per-MAC slot answers as a Map would, for every sequence of its operations. */
describe('AnswerSlot', () => {
  const HOSTS = [undefined, 'seat-1', 'SEAT-1'];
  const op = fc.record({ kind: fc.constantFrom('set', 'delete', 'deleteOwn', 'clear'), host: fc.constantFrom<string | undefined>(...HOSTS), value: fc.integer() });

  it('matches a Map under any sequence of set and delete (get compared after each); deleteOwn drops the one answer ownsAnswerOf named, clear all and counts them', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 30 }), (ops) => {
        const slot = new AnswerSlot();
        const map = new Map<string | undefined, CachedAnswer>();
        for (const o of ops) {
          if (o.kind === 'set') {
            const a = answer(o.value);
            put(slot, o.host, a);
            map.set(o.host, a);
          } else if (o.kind === 'delete') expect(slot.delete(o.host)).toBe(map.delete(o.host));
          else if (o.kind === 'clear') {
            expect(slot.clear()).toBe(map.size);
            map.clear();
          } else {
            const own = HOSTS.filter((h) => slot.ownsAnswerOf(h));
            expect(own.length).toBeLessThanOrEqual(1);
            expect(slot.deleteOwn()).toBe(own.length === 1);
            if (own.length) expect(map.delete(own[0])).toBe(true);
          }
          for (const h of HOSTS) expect(read(slot, h)).toEqual(map.get(h) && { ...map.get(h) });
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps a second name beside the first, and the first again after it was deleted', () => {
    const slot = new AnswerSlot();
    const [a, b, c] = [answer('a'), answer('b'), answer('c')];
    put(slot, 'seat-1', a);
    put(slot, undefined, b);
    expect([read(slot, 'seat-1'), read(slot, undefined)]).toEqual([a, b]);
    expect(slot.delete('seat-1')).toBe(true);
    expect(slot.get('seat-1')).toBeUndefined();
    put(slot, 'seat-1', c);
    expect([read(slot, 'seat-1'), read(slot, undefined)]).toEqual([c, b]);
    expect(slot.delete(undefined)).toBe(true);
    expect(slot.delete(undefined)).toBe(false);
    expect(slot.get(undefined)).toBeUndefined();
  });

  it("an answer in the slot's own fields stays there while it lives (a dependency holding the slot drops that one, or what took its place)", () => {
    const slot = new AnswerSlot();
    put(slot, 'seat-1', answer('a'));
    expect(slot.ownsAnswerOf('seat-1')).toBe(true);
    put(slot, undefined, answer('b'));
    expect([slot.ownsAnswerOf('seat-1'), slot.ownsAnswerOf(undefined)]).toEqual([true, false]);
    // Set again: still in the fields, the new answer.
    put(slot, 'seat-1', answer('c'));
    expect(slot.ownsAnswerOf('seat-1')).toBe(true);
    expect(read(slot, 'seat-1')!.body.text).toBe('c');
    // A name kept in the Map stays there, even once the fields are free.
    expect(slot.deleteOwn()).toBe(true);
    put(slot, undefined, answer('d'));
    expect([slot.ownsAnswerOf(undefined), read(slot, undefined)!.body.text]).toEqual([false, 'd']);
    expect(slot.deleteOwn()).toBe(false);
    expect(read(slot, undefined)!.body.text).toBe('d');
  });
});
