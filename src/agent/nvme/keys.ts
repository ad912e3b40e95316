import { crc32 } from 'node:zlib';

/**
 * NVMe secret formats (NVMe base spec / libnvme):
 *   DH-HMAC-CHAP: `DHHC-1:<hh>:<base64(key || crc32le(key))>:`, hh 00-03, key 32/48/64 bytes
 *   TLS PSK:      `NVMeTLSkey-1:<hh>:<base64(psk || crc32le(psk))>:`, hh 01 (32 bytes) / 02 (48 bytes)
 */
function check(prefix: string, value: string, lens: (hh: string) => number[]): string | null {
  const m = new RegExp(`^${prefix}:(0[0-3]):([A-Za-z0-9+/]+={0,2}):$`).exec(value);
  if (!m) return `must look like ${prefix}:<hh>:<base64>:`;
  const raw = Buffer.from(m[2], 'base64');
  const keyLen = raw.length - 4;
  if (!lens(m[1]).includes(keyLen)) return `key length ${keyLen} does not fit transform ${m[1]}`;
  const key = raw.subarray(0, keyLen);
  if (crc32(key) !== raw.readUInt32LE(keyLen)) return 'CRC-32 does not match';
  return null;
}

export function dhchapKeyError(value: string): string | null {
  return check('DHHC-1', value, (hh) => ({ '00': [32, 48, 64], '01': [32], '02': [48], '03': [64] })[hh] ?? []);
}

export function tlsPskError(value: string): string | null {
  return check('NVMeTLSkey-1', value, (hh) => ({ '01': [32], '02': [48] })[hh] ?? []);
}
