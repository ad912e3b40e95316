import { ownString, StringPool } from '../../src/shared/string-pool';
import { validateDevice } from '../../src/control-plane/repositories/ledger/records';

describe('StringPool', () => {
  it('gives back one string per value, up to its cap; past it (or for a long value) the value as it came', () => {
    const pool = new StringPool(2);
    // Built at run time: equal, but distinct strings (not one literal).
    const made = (s: string) => [...s].join('');
    const a1 = pool.of(made('Ryzen 7'));
    expect(pool.of(made('Ryzen 7'))).toBe(a1);
    expect(pool.size).toBe(1);
    pool.of(made('DDR5'));
    expect(pool.size).toBe(2);
    const c = made('RTL8125');
    expect(pool.of(c)).toBe(c);
    expect(pool.size).toBe(2);
    const long = 'x'.repeat(129);
    expect(pool.of(long)).toEqual(long);
    expect(pool.size).toBe(2);
  });

  it('records read from the ledger keep their values (pooling changes no value)', () => {
    const fp = { manufacturer: 'ACME', product: 'Seat', serial: 'SN1', cpumodel: 'Ryzen 7', mem_total: 32768, mem_type: 'DDR5', mem_speed: 5600, chip: 'RTL8125', busid: '0110ec8125' };
    const r = validateDevice('02:00:00:00:00:01', { state: 'pooled', fingerprint: fp });
    expect(r.ok && r.value.fingerprint).toEqual(fp);
    expect(r.ok && r.value.state).toBe('pooled');
  });
});

describe('ownString', () => {
  it('gives back the same characters (a copy for what is long enough to be a view of another string)', () => {
    const query = `mac=02:00:00:00:00:05&uuid=4c4c4544-0000-1000-8000-000000000005&x=${'y'.repeat(300)}`;
    const mac = query.slice(4, 21);
    for (const s of ['', 'SN5', mac, query, 'Größe – ÜBER 13 Zeichen', '\ud800 lone surrogate and "quotes" \\ ', '\u0000\u001f controls 12345']) {
      expect(ownString(s)).toBe(s);
    }
  });
});
