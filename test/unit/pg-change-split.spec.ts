import { splitChanges } from '../../src/control-plane/repositories/ledger/pg-ledger.repository';

describe('the PostgreSQL catch-up: which devices are read whole and which as telemetry', () => {
  const held = (k: string) => k !== 'new';

  it('keys only telemetry flushes touched are read as telemetry; a commit among the rows makes a key whole', () => {
    const rows = [
      { devices: ['a', 'b'], telemetry: true },
      { devices: ['b', 'c'], telemetry: false },
      { devices: ['a', 'c', 'd'], telemetry: true },
    ];
    const r = splitChanges(rows, held);
    expect(r.whole.sort()).toEqual(['b', 'c']);
    expect(r.telemetry.sort()).toEqual(['a', 'd']);
  });

  it('a commit after the telemetry makes the key whole just the same (order does not matter)', () => {
    expect(splitChanges([{ devices: ['a'], telemetry: true }, { devices: ['a'], telemetry: false }], held)).toEqual({ whole: ['a'], telemetry: [] });
  });

  it('telemetry of a device this process does not hold is read whole (it was created where this one has not caught up)', () => {
    expect(splitChanges([{ devices: ['new', 'a'], telemetry: true }], held)).toEqual({ whole: ['new'], telemetry: ['a'] });
  });

  it('rows of control planes that predate the flag (false) are read whole', () => {
    expect(splitChanges([{ devices: ['a'], telemetry: false }], held)).toEqual({ whole: ['a'], telemetry: [] });
  });
});
