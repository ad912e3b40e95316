import { DirtyKeys } from '../../src/shared/files/dirty-keys';

const marks = (d: DirtyKeys) => (d as unknown as { marked: Map<string, boolean> }).marked;

describe('DirtyKeys: the keys telemetry changed, handed whole to each flush', () => {
  it('takes each dirty key once, in the order first marked, and none is dirty afterwards', () => {
    const d = new DirtyKeys();
    for (const k of ['b', 'a', 'b', 'c', 'a']) d.add(k);
    expect([d.size, [...d]]).toEqual([3, ['b', 'a', 'c']]);
    expect(d.take()).toEqual(['b', 'a', 'c']);
    expect([d.size, [...d], d.has('a')]).toEqual([0, [], false]);
    expect(d.take()).toEqual([]);
  });

  it('a key unmarked by a commit is not taken, and marked again it is taken once', () => {
    const d = new DirtyKeys();
    d.add('a');
    d.add('b');
    d.delete('a');
    expect([d.size, d.has('a'), [...d]]).toEqual([1, false, ['b']]);
    d.add('a');
    d.add('a');
    expect([d.size, [...d].sort()]).toEqual([2, ['a', 'b']]);
    expect(d.take().sort()).toEqual(['a', 'b']);
    d.delete('b');
    expect(d.size).toBe(0);
  });

  it('keeps a mark per key across flushes (no table grown again per flush), and forgets the keys of records that are gone', () => {
    const d = new DirtyKeys();
    for (let round = 0; round < 3; round++) {
      for (const k of ['a', 'b', 'c']) d.add(k);
      expect(d.take()).toEqual(['a', 'b', 'c']);
      expect(marks(d).size).toBe(3);
    }
    d.add('b');
    d.forget('b');
    d.forget('c');
    expect([d.size, d.has('b'), marks(d).size, d.take()]).toEqual([0, false, 1, []]);
    d.clear();
    expect(marks(d).size).toBe(0);
  });
});
