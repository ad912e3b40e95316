/**
 * MAC addresses arrive as `00:0c:29:b9:8b:2d`, `00-0C-29-B9-8B-2D`, `000c.29b9.8b2d` or bare
 * hex (`${mac:hexraw}`); the ledger stores the lower-case colon form only.
 */
const CANONICAL = /^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$/;

export function normalizeMac(input: unknown): string | null {
  if (typeof input !== 'string') return null;
  // Fast path: iPXE's ${mac} is already the canonical form (every boot hits this).
  if (CANONICAL.test(input)) return input;
  const hex = input.trim().replace(/[:\-.]/g, '').toLowerCase();
  if (!/^[0-9a-f]{12}$/.test(hex)) return null;
  return hex.match(/../g)!.join(':');
}

/** Worker ids, hostnames and agent ids: letters, digits, dot, underscore, hyphen (stored lower-case). */
export const ID_PATTERN = /^[a-z0-9](?:[a-z0-9._-]{0,62})$/;

export function normalizeId(input: unknown): string | null {
  if (typeof input !== 'string') return null;
  const v = input.trim().toLowerCase();
  if (!ID_PATTERN.test(v) || v.includes('..')) return null;
  return v;
}
