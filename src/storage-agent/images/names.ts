import { UNSAFE_NAME_CHARS } from '../../shared/grammars';
import { badRequest } from '../../shared/http/api-error';

/** A plain file name inside DISK_DIR: no path, no `..`, no leading dot, no NUL, no control chars. */
export function checkFileName(field: string, name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) throw badRequest(`${field}: required, a file name`);
  if (name.length > 255) throw badRequest(`${field}: longer than 255 characters`);
  if (name.includes('/') || name.includes('\\')) throw badRequest(`${field}: must be a plain file name inside DISK_DIR, not a path`);
  if (name.startsWith('.')) throw badRequest(`${field}: must not start with a dot`);
  if (UNSAFE_NAME_CHARS.test(name)) throw badRequest(`${field}: must not contain control, line-separator or format characters (zero-width, bidi overrides)`);
  return name;
}

/** Sizes: one grammar for both APIs (src/shared/size.ts). */
export { parseSize } from '../../shared/size';

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
