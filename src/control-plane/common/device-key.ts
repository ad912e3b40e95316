import { createHash, createPublicKey, KeyObject, verify } from 'node:crypto';

/**
 * Device keys (seed 004): the 65-byte uncompressed SEC1 P-256 point `04 || X || Y` as 130 hex
 * digits (iPXE's `${x:hexraw}`), and ECDSA P-256 / SHA-256 signatures as raw `r || s` in 128 hex
 * digits over the bytes `nonce (32) || mac (6)`.
 */
export type ParsedKey = { ok: true; hex: string; sha256: string; key: KeyObject } | { ok: false; reason: string };

const PUBKEY_HEX = /^04[0-9a-f]{128}$/;
const SIG_HEX = /^[0-9a-f]{128}$/;

export function parsePubkey(raw: string): ParsedKey {
  const hex = raw.trim().toLowerCase();
  if (!/^[0-9a-f]*$/.test(hex)) return { ok: false, reason: 'not hex' };
  if (hex.length !== 130) return { ok: false, reason: `not 65 bytes (got ${hex.length} hex digits)` };
  if (!PUBKEY_HEX.test(hex)) return { ok: false, reason: 'not an uncompressed point (must start with 04)' };
  const b = Buffer.from(hex, 'hex');
  try {
    const key = createPublicKey({
      key: { kty: 'EC', crv: 'P-256', x: b.subarray(1, 33).toString('base64url'), y: b.subarray(33).toString('base64url') },
      format: 'jwk',
    });
    return { ok: true, hex, sha256: keySha256(hex), key };
  } catch {
    return { ok: false, reason: 'not a point on P-256' };
  }
}

/** SHA-256 (hex) of the 65 key bytes: `key_hash` in devices.yml, `key_sha256` in the API. */
export function keySha256(hex: string): string {
  return createHash('sha256').update(Buffer.from(hex, 'hex')).digest('hex');
}

/** The exact bytes a device signs: the 32 nonce bytes, then the 6 MAC bytes. */
export function signedBytes(nonce: Buffer, mac: string): Buffer {
  return Buffer.concat([nonce, Buffer.from(mac.replace(/:/g, ''), 'hex')]);
}

/** Verifies a raw r||s signature (DER is refused: it is not 128 hex digits, or does not verify). */
export function verifyDeviceSignature(key: KeyObject, nonce: Buffer, mac: string, sigHex: string): boolean {
  if (!SIG_HEX.test(sigHex)) return false;
  return verify('sha256', signedBytes(nonce, mac), { key, dsaEncoding: 'ieee-p1363' }, Buffer.from(sigHex, 'hex'));
}
