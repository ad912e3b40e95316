import { execFileSync } from 'node:child_process';
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
