import { UNSAFE_NAME_CHARS } from './grammars';
import { badRequest } from './http/api-error';

/**
 * Path parameters of the master version routes (control plane and agent): a master's file name
 * (`_tpl_` in it, a plain name in DISK_DIR) and a version number from 1.
 */
export function checkVersionRef(rawName: unknown, rawVersion: unknown): [string, number] {
  const name = typeof rawName === 'string' ? rawName : '';
  if (!name || name.length > 255 || name.includes('/') || name.includes('\\') || name.startsWith('.') || UNSAFE_NAME_CHARS.test(name)) {
    throw badRequest(`name: must be a plain file name in DISK_DIR (no path, no leading dot, no control or format characters), got ${JSON.stringify(rawName)}`);
  }
  if (!name.includes('_tpl_')) throw badRequest(`name: ${name} is not a master image (_tpl_)`);
  const version = typeof rawVersion === 'number' ? rawVersion : /^[1-9][0-9]{0,8}$/.test(String(rawVersion)) ? Number(rawVersion) : NaN;
  if (!Number.isInteger(version) || version < 1) throw badRequest(`version: must be a whole number from 1, got ${JSON.stringify(rawVersion)}`);
  return [name, version];
}
