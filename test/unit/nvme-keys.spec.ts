import { execFileSync } from 'node:child_process';
import { crc32 } from 'node:zlib';
import { deriveCtrlKey, dhchapKeyBytes, dhchapKeyError, generateDhchapKey, interchange, isTlsPskIdentityOf, tlsPskEntries, tlsPskError } from '../../src/shared/nvme-keys';

/** HKDF-Expand-Label as OpenSSL computes it: an implementation independent of ours. */
function opensslHkdf(digest: 'SHA256' | 'SHA384', key: Buffer, label: string, context: string, len: number): string {
  const l = Buffer.from(`tls13 ${label}`);
  const info = Buffer.concat([Buffer.from([0, len, l.length]), l, Buffer.from([context.length]), Buffer.from(context)]);
  const out = execFileSync('openssl', ['kdf', '-keylen', String(len), '-kdfopt', `digest:${digest}`, '-kdfopt', `hexkey:${key.toString('hex')}`, '-kdfopt', `hexinfo:${info.toString('hex')}`, 'HKDF'], { encoding: 'utf8' });
  return out.trim().replace(/:/g, '').toLowerCase();
}

describe('NVMe key derivations', () => {
  const host = 'nqn.2026-07.com.controller:host.w1';
  const sub = 'nqn.2026-07.com.controller:w1.0123456789ab';

  it('tlsPskEntries: both keyring identities and their keys for a SHA-256 and a SHA-384 PSK, as OpenSSL derives them', () => {
    for (const [hh, digest, len] of [['01', 'SHA256', 32], ['02', 'SHA384', 48]] as const) {
      const configured = Buffer.from(Array.from({ length: len }, (_, i) => (i * 7 + 3) & 0xff));
      const psk = interchange('NVMeTLSkey-1', hh, configured);
      expect(tlsPskError(psk)).toBeNull();
      const [v0, v1] = tlsPskEntries(psk, host, sub);
      const retained = opensslHkdf(digest, configured, 'HostNQN', host, len);
      expect(v0.identity).toBe(`NVMe0R${hh} ${host} ${sub}`);
      expect(v0.key.toString('hex')).toBe(retained);
      // Version 1 (TP 8018): the PSK digest and the TLS PSK of the identity, each by OpenSSL.
      const mac = execFileSync('openssl', ['dgst', `-${digest.toLowerCase()}`, '-mac', 'HMAC', '-macopt', `hexkey:${retained}`, '-binary'], { input: `${host} ${sub} NVMe-over-Fabrics` });
      const b64 = mac.toString('base64');
      expect(b64).toHaveLength(hh === '01' ? 44 : 64);
      expect(v1.identity).toBe(`NVMe1R${hh} ${host} ${sub} ${b64}`);
      expect(v1.key.toString('hex')).toBe(opensslHkdf(digest, Buffer.from(retained, 'hex'), 'nvme-tls-psk', `${hh} ${b64}`, len));
      expect([v0, v1].every((e) => isTlsPskIdentityOf(e.identity, host, sub))).toBe(true);
      expect(isTlsPskIdentityOf(v1.identity, host, `${sub}x`)).toBe(false);
      expect(isTlsPskIdentityOf(v1.identity, `${host}x`, sub)).toBe(false);
    }
  });

  it('deriveCtrlKey: a valid DHHC-1 secret, different per host and from the host secret, as OpenSSL derives it', () => {
    const key = generateDhchapKey();
    const ctrl = deriveCtrlKey(key, host);
    expect(dhchapKeyError(ctrl)).toBeNull();
    expect(ctrl).not.toBe(key);
    expect(deriveCtrlKey(key, `${host}x`)).not.toBe(ctrl);
    expect(dhchapKeyBytes(ctrl).toString('hex')).toBe(opensslHkdf('SHA256', dhchapKeyBytes(key), 'Kurrent ctrl', host, 32));
  });
});

describe('dhchapKeyError: the JavaScript fast path accepts exactly what the reference check accepts', () => {
  /** The check as it was before the fast path: expression, Buffer, zlib's CRC-32. */
  function reference(value: string): boolean {
    const m = /^DHHC-1:(0[0-3]):([A-Za-z0-9+/]+={0,2}):$/.exec(value);
    if (!m) return false;
    const raw = Buffer.from(m[2], 'base64');
    const keyLen = raw.length - 4;
    if (!({ '00': [32, 48, 64], '01': [32], '02': [48], '03': [64] } as Record<string, number[]>)[m[1]].includes(keyLen)) return false;
    return crc32(raw.subarray(0, keyLen)) === raw.readUInt32LE(keyLen);
  }
  // A seeded generator: the same cases every run.
  let seed = 27;
  const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
  const cases: string[] = [];
  for (const hh of ['00', '01', '02', '03', '04', '10']) {
    for (const len of [16, 31, 32, 33, 48, 64, 65]) {
      for (let r = 0; r < 4; r++) {
        const key = Buffer.from(Array.from({ length: len }, () => rnd(256)));
        cases.push(interchange('DHHC-1', hh, key));
      }
    }
  }
  const mutate = (v: string): string => {
    const i = rnd(v.length);
    switch (rnd(7)) {
      case 0:
        return v.slice(0, i) + 'A+/=:é0'[rnd(7)] + v.slice(i + 1);
      case 1:
        return v.slice(0, i) + v.slice(i + 1);
      case 2:
        return v.slice(0, i) + '='.repeat(rnd(3) + 1) + v.slice(i);
      case 3:
        return v.replace(/=+:$/, ':');
      case 4:
        return v.slice(0, -1);
      case 5:
        return `${v} `;
      default:
        // Last base64 digit's spare bits flipped: Buffer ignores them, so must the fast path.
        return v.replace(/([A-Za-z0-9+/])(=+):$/, (_m, d: string, p: string) => `${'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'[('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.indexOf(d) ^ 1) & 63]}${p}:`);
    }
  };
  for (let r = 0, n = cases.length; r < n * 6; r++) cases.push(mutate(cases[rnd(n)]));
  cases.push('', 'DHHC-1:00::', 'DHHC-1:00:====:', 'DHHC-1:0', 'NVMeTLSkey-1:01:AAAA:');

  it(`agrees on ${cases.length} well-formed and damaged secrets, and names what is wrong in each refused one`, () => {
    let accepted = 0;
    for (const v of cases) {
      const ok = reference(v);
      expect([v, dhchapKeyError(v) === null]).toEqual([v, ok]);
      if (ok) accepted++;
      else expect(dhchapKeyError(v)).toMatch(/must look like|key length|CRC-32/);
    }
    // Both kinds are there in numbers.
    expect(accepted).toBeGreaterThan(50);
    expect(cases.length - accepted).toBeGreaterThan(400);
  });
});
