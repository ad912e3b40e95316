import { badRequest } from '../../common/api-error';

/** A plain file name inside DISK_DIR: no path, no `..`, no leading dot, no NUL, no control chars. */
export function checkFileName(field: string, name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) throw badRequest(`${field}: required, a file name`);
  if (name.length > 255) throw badRequest(`${field}: longer than 255 characters`);
  if (name.includes('/') || name.includes('\\')) throw badRequest(`${field}: must be a plain file name inside DISK_DIR, not a path`);
  if (name.startsWith('.')) throw badRequest(`${field}: must not start with a dot`);
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(name)) throw badRequest(`${field}: must not contain control characters`);
  return name;
}

const UNITS: Record<string, number> = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 };

/** `40G`, `512M`, `1T`, `1048576` (bytes); 1 MiB to 64 TiB, a whole number of 512-byte sectors. */
export function parseSize(field: string, raw: unknown): number {
  const m = typeof raw === 'string' ? /^(\d{1,15})([KMGT]?)(?:i?B)?$/i.exec(raw.trim()) : null;
  if (!m) throw badRequest(`${field}: must be a size like 40G, 512M or 1T, got ${JSON.stringify(raw)}`);
  const bytes = Number(m[1]) * UNITS[m[2].toUpperCase()];
  if (!Number.isSafeInteger(bytes) || bytes < 2 ** 20 || bytes > 64 * 2 ** 40) {
    throw badRequest(`${field}: must be between 1M and 64T, got ${JSON.stringify(raw)}`);
  }
  if (bytes % 512 !== 0) throw badRequest(`${field}: must be a multiple of 512 bytes`);
  return bytes;
}

/**
 * The part after `<base>:`: what names the target and, by default, its file. iSCSI names allow
 * only lower-case letters, digits, '.', '-' (and ':'); tgtd rejects anything else, '_' included.
 */
export const TARGET_SUFFIX = /^[a-z0-9][a-z0-9.-]{0,200}$/;

/** Checks that an IQN/NQN is `<base>:<suffix>` and returns the suffix. */
export function checkTargetName(field: string, name: unknown, base: string): string {
  if (typeof name !== 'string' || !name) throw badRequest(`${field}: required`);
  if (!name.startsWith(`${base}:`)) {
    throw badRequest(`${field} base mismatch: ${name} does not start with ${base}:`);
  }
  const suffix = name.slice(base.length + 1);
  if (!TARGET_SUFFIX.test(suffix) || suffix.includes('..')) {
    throw badRequest(`${field}: the part after ${base}: must be lower-case letters, digits, '.' or '-', got ${JSON.stringify(suffix)}`);
  }
  return suffix;
}

/** Default target suffix of an ISO (CD): its name lower-cased, other characters as '-'. */
export function isoSuffix(iso: string): string {
  return iso.toLowerCase().replace(/[^a-z0-9.-]/g, '-').replace(/^[^a-z0-9]+/, '');
}
