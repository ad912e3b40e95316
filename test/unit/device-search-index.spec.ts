import fc from 'fast-check';
import { DeviceSearchIndex } from '../../src/control-plane/devices/device-search-index';
import { deviceMatcher, searchText, type FilterableDevice } from '../../src/shared/device-filter';

type Dev = FilterableDevice & { fingerprint: { serial: string | null; product: string | null; manufacturer: string | null } };

const hex = fc.integer({ min: 0, max: 255 }).map((n) => n.toString(16).padStart(2, '0'));
const mac = fc.array(hex, { minLength: 6, maxLength: 6 }).map((b) => b.join(':'));
// Small alphabets, so queries hit often, across fields and records.
const word = fc.string({ unit: fc.constantFrom('a', 'B', '0', '1', 'c', '-', ':', ' ', 'é', '\u0000', '\u0001'), maxLength: 6 });
const device: fc.Arbitrary<Dev> = fc.record({
  mac,
  state: fc.constantFrom('pooled', 'bound', 'revoked'),
  bound_worker_id: fc.option(word, { nil: null }),
  fingerprint: fc.record({ serial: fc.option(word, { nil: null }), product: fc.option(word, { nil: null }), manufacturer: fc.option(word, { nil: null }) }),
});
const query = fc.oneof(word, mac.map((m) => m.slice(3, 11).replace(/:/g, '-').toUpperCase()), hex, fc.constant('  0a '));

describe('DeviceSearchIndex', () => {
  it('finds exactly the devices the per-device matcher finds, in pool order, while the pool changes (property)', () => {
    fc.assert(
      fc.property(fc.array(device, { maxLength: 30 }), fc.array(fc.tuple(query, fc.array(device, { maxLength: 3 }), fc.nat()), { minLength: 1, maxLength: 6 }), (initial, rounds) => {
        const pool = new Map<string, Dev>();
        for (const d of initial) pool.set(d.mac, d);
        const index = new DeviceSearchIndex<Dev>();
        for (const [q, changed, drop] of rounds) {
          const got = index.find(pool, q, searchText);
          const want = q.trim() === '' ? [] : [...pool.values()].filter(deviceMatcher<Dev>({ q }));
          expect(got).toEqual(want);
          // Records are replaced, added and removed between searches, as commits do.
          for (const d of changed) pool.set(d.mac, d);
          const keys = [...pool.keys()];
          if (keys.length) pool.delete(keys[drop % keys.length]);
        }
      }),
      { numRuns: 400 },
    );
  });

  it('a MAC-like query looks in the MAC digits only, free text in the fields only', () => {
    const d = (m: string, serial: string): Dev => ({ mac: m, state: 'pooled', bound_worker_id: null, fingerprint: { serial, product: null, manufacturer: null } });
    const pool = new Map([
      ['02:00:00:00:0a:bc', d('02:00:00:00:0a:bc', 'SN-1')],
      ['02:00:00:00:00:01', d('02:00:00:00:00:01', 'x0abc')],
    ]);
    const index = new DeviceSearchIndex<Dev>();
    const macs = (q: string) => index.find(pool, q, searchText).map((x) => x.mac);
    expect(macs('0A-BC')).toEqual(['02:00:00:00:0a:bc']); // digits of the first MAC; "0a-bc" is in no field
    expect(macs('0abc')).toEqual(['02:00:00:00:0a:bc', '02:00:00:00:00:01']); // the MAC's digits, and the second's serial
    expect(macs('sn-1')).toEqual(['02:00:00:00:0a:bc']);
    expect(macs('bc\u0000sn')).toEqual([]); // never across two fields
  });
});
