import { createHash, createHmac, randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * NVMe secret formats (NVMe base spec / libnvme):
 *   DH-HMAC-CHAP: `DHHC-1:<hh>:<base64(key || crc32le(key))>:`, hh 00-03, key 32/48/64 bytes
 *   TLS PSK:      `NVMeTLSkey-1:<hh>:<base64(psk || crc32le(psk))>:`, hh 01 (32 bytes) / 02 (48 bytes)
 */
const FORMS = new Map<string, RegExp>();

function check(prefix: string, value: string, lens: (hh: string) => number[]): string | null {
  // One compiled expression per prefix: a start checks every stored secret (100,000 at scale).
  let form = FORMS.get(prefix);
  if (!form) FORMS.set(prefix, (form = new RegExp(`^${prefix}:(0[0-3]):([A-Za-z0-9+/]+={0,2}):$`)));
  const m = form.exec(value);
  if (!m) return `must look like ${prefix}:<hh>:<base64>:`;
  const raw = Buffer.from(m[2], 'base64');
  const keyLen = raw.length - 4;
  if (!lens(m[1]).includes(keyLen)) return `key length ${keyLen} does not fit transform ${m[1]}`;
  const key = raw.subarray(0, keyLen);
  if (crc32(key) !== raw.readUInt32LE(keyLen)) return 'CRC-32 does not match';
  return null;
}

/** Base64 digit values by character code (-1: not a digit). */
const B64 = new Int8Array(128).fill(-1);
for (let i = 0; i < 64; i++) B64['ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.charCodeAt(i)] = i;
const CRC_TABLE = new Int32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  CRC_TABLE[n] = c;
}
/** Decoded bytes of one secret (at most a 64-byte key and its CRC). */
const DECODED = new Uint8Array(68);
/** The one key length of transforms 01-03 (00 takes 32, 48 or 64). */
const TRANSFORM_KEY_LEN = [0, 32, 48, 64];

/**
 * True for a well-formed `DHHC-1:<hh>:<base64>:` secret, decided in JavaScript: no regular
 * expression, Buffer or native call per secret (a start checks every stored one, 100,000 at
 * scale: ~70 ms that way, bench:scale). Accepts only what check() accepts; anything else (false)
 * goes to check(), which names what is wrong.
 */
function dhchapKeyValid(value: string): boolean {
  const len = value.length;
  if (!value.startsWith('DHHC-1:0') || value.charCodeAt(9) !== 58 || value.charCodeAt(len - 1) !== 58) return false;
  const hh = value.charCodeAt(8) - 48;
  if (hh < 0 || hh > 3) return false;
  // Canonical base64 only: whole quanta, padding at most two '=' at the end.
  const b64Len = len - 11;
  if (b64Len <= 0 || b64Len % 4 !== 0) return false;
  let pad = 0;
  if (value.charCodeAt(len - 2) === 61) pad = value.charCodeAt(len - 3) === 61 ? 2 : 1;
  const bytes = (b64Len / 4) * 3 - pad;
  if (bytes > DECODED.length) return false;
  let acc = 0;
  let bits = 0;
  let out = 0;
  for (let i = 10, end = len - 1 - pad; i < end; i++) {
    const c = value.charCodeAt(i);
    const d = c < 128 ? B64[c] : -1;
    if (d < 0) return false;
    acc = ((acc << 6) | d) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (out < bytes) DECODED[out++] = (acc >>> bits) & 0xff;
    }
  }
  const keyLen = bytes - 4;
  if (hh === 0 ? keyLen !== 32 && keyLen !== 48 && keyLen !== 64 : keyLen !== TRANSFORM_KEY_LEN[hh]) return false;
  let crc = -1;
  for (let i = 0; i < keyLen; i++) crc = CRC_TABLE[(crc ^ DECODED[i]) & 0xff] ^ (crc >>> 8);
  crc = ~crc >>> 0;
  return crc === (DECODED[keyLen] | (DECODED[keyLen + 1] << 8) | (DECODED[keyLen + 2] << 16) | (DECODED[keyLen + 3] << 24)) >>> 0;
}

export function dhchapKeyError(value: string): string | null {
  if (dhchapKeyValid(value)) return null;
  return check('DHHC-1', value, (hh) => ({ '00': [32, 48, 64], '01': [32], '02': [48], '03': [64] })[hh] ?? []);
}

export function tlsPskError(value: string): string | null {
  return check('NVMeTLSkey-1', value, (hh) => ({ '01': [32], '02': [48] })[hh] ?? []);
}

/** The key bytes of a valid `DHHC-1:<hh>:<base64>:` secret (call dhchapKeyError first). */
export function dhchapKeyBytes(value: string): Buffer {
  const raw = Buffer.from(value.split(':')[2], 'base64');
  return raw.subarray(0, raw.length - 4);
}

/** `<prefix>:<hh>:<base64(key || crc32le(key))>:`, the form nvme-cli prints and reads. */
export function interchange(prefix: 'DHHC-1' | 'NVMeTLSkey-1', hh: string, key: Buffer): string {
  const crc = Buffer.alloc(4);
  crc.writeUInt32LE(crc32(key));
  return `${prefix}:${hh}:${Buffer.concat([key, crc]).toString('base64')}:`;
}

/** A fresh DH-HMAC-CHAP secret: 32 random bytes, no transformation (`nvme gen-dhchap-key`'s default). */
export function generateDhchapKey(): string {
  return interchange('DHHC-1', '00', randomBytes(32));
}

/**
 * The TLS PSK of a host, derived from its DH-HMAC-CHAP secret with the NVMe/TCP retained-PSK
 * construction (TP 8011; libnvme `derive_retained_key`): HKDF-Expand-Label(HKDF-Extract(0, key),
 * "HostNQN", hostnqn, 32) with SHA-256, the label in RFC 8446 form ("tls13 " prefix, length
 * bytes). So the PSK changes, and is revoked, whenever the secret is, and it is different per host.
 * Sent as `NVMeTLSkey-1:01:<base64(psk || crc32)>:`.
 */
export function deriveTlsPsk(dhchapKey: string, hostnqn: string): string {
  return interchange('NVMeTLSkey-1', '01', hkdfLabel('sha256', dhchapKeyBytes(dhchapKey), 'HostNQN', hostnqn, 32));
}

/**
 * The controller's DH-HMAC-CHAP secret for bidirectional authentication, derived from the host's
 * secret like the TLS PSK (HKDF-SHA-256, label "Kurrent ctrl", context the host NQN): it rotates
 * and is revoked with the host secret, and needs no storage of its own. It protects nothing the
 * host secret does not: the host must hold both to check the controller's answer.
 */
export function deriveCtrlKey(dhchapKey: string, hostnqn: string): string {
  return interchange('DHHC-1', '00', hkdfLabel('sha256', dhchapKeyBytes(dhchapKey), 'Kurrent ctrl', hostnqn, 32));
}

/**
 * The worker's iSCSI CHAP secret for targets that require CHAP (LIO), derived from its storage
 * credential like the controller key (HKDF-SHA-256, label "Kurrent iscsi chap", context the
 * worker id), 18 bytes as 24 base64url characters: it rotates and is revoked with the credential.
 */
export function deriveIscsiChapSecret(dhchapKey: string, workerId: string): string {
  return hkdfLabel('sha256', dhchapKeyBytes(dhchapKey), 'Kurrent iscsi chap', workerId, 18).toString('base64url');
}

/**
 * HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, length) (RFC 5869, label form of RFC
 * 8446 7.1: "tls13 " prefix, length bytes); one block, so length <= the hash's size.
 */
function hkdfLabel(hash: 'sha256' | 'sha384', ikm: Buffer, label: string, context: string, length: number): Buffer {
  const prk = createHmac(hash, Buffer.alloc(hash === 'sha384' ? 48 : 32)).update(ikm).digest();
  const l = Buffer.from(`tls13 ${label}`);
  const c = Buffer.from(context);
  const info = Buffer.concat([Buffer.from([length >> 8, length & 0xff, l.length]), l, Buffer.from([c.length]), c, Buffer.from([1])]);
  return createHmac(hash, prk).update(info).digest().subarray(0, length);
}

/**
 * What goes into the kernel's `.nvme` keyring for one (host, subsystem), built from a configured
 * PSK in interchange form (NVMe/TCP TLS, TP 8011 and TP 8018; libnvme `derive_nvme_keys`). First
 * the retained PSK: HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", hostnqn, L) with
 * SHA-256 (hh 01, L 32) or SHA-384 (hh 02, L 48). Then two entries:
 * - version 0, `NVMe0R<hh> <hostnqn> <subsysnqn>` with the retained PSK itself: what the 6.12
 *   nvme-tcp host looks up (nvme_tls_psk_default) and sends, and tlshd finds on the target;
 * - version 1, `NVMe1R<hh> <hostnqn> <subsysnqn> <digest>`, digest = Base64(HMAC(retained,
 *   hostnqn " " subsysnqn " NVMe-over-Fabrics")), with the TLS PSK HKDF-Expand-Label(
 *   HKDF-Extract(0, retained), "nvme-tls-psk", "<hh> <digest>", L): what a host that sends the
 *   version-1 identity (newer kernels and nvme-cli, or an explicit tls_key) hands to tlshd.
 */
export function tlsPskEntries(tlsPsk: string, hostnqn: string, subsysnqn: string): { identity: string; key: Buffer }[] {
  const [, hh, b64] = tlsPsk.split(':');
  const raw = Buffer.from(b64, 'base64');
  const configured = raw.subarray(0, raw.length - 4);
  const [hash, len] = hh === '02' ? (['sha384', 48] as const) : (['sha256', 32] as const);
  const retained = hkdfLabel(hash, configured, 'HostNQN', hostnqn, len);
  const digest = createHmac(hash, retained).update(`${hostnqn} ${subsysnqn} NVMe-over-Fabrics`).digest('base64');
  return [
    { identity: `NVMe0R${hh} ${hostnqn} ${subsysnqn}`, key: retained },
    { identity: `NVMe1R${hh} ${hostnqn} ${subsysnqn} ${digest}`, key: hkdfLabel(hash, retained, 'nvme-tls-psk', `${hh} ${digest}`, len) },
  ];
}

/** Whether a keyring identity (either version) is the one of this (host, subsystem). */
export function isTlsPskIdentityOf(identity: string, hostnqn: string, subsysnqn: string): boolean {
  const p = identity.split(' ');
  return /^NVMe[01]R0[12]$/.test(p[0]) && p[1] === hostnqn && p[2] === subsysnqn;
}

/** First 12 hex digits of SHA-256 of a secret: tells secrets apart without revealing them. */
export function secretSha12(secret: string): string {
  return createHash('sha256').update(secret).digest('hex').slice(0, 12);
}
