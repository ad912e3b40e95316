/**
 * The device list's filter and search, one definition for GET /devices/page and the web UI:
 * state, claimed key, and free text matched against the MAC (any spelling), serial, product,
 * manufacturer and the bound worker, case-insensitively. Pure (no Node, no DOM).
 */
export interface DeviceFilter {
  /** '' or 'all': every state. */
  state?: string;
  q?: string;
  /** '' or 'any': either. */
  key?: string;
}

/** What the filter reads of a device (a ledger record or its DTO). */
export interface FilterableDevice {
  mac: string;
  state: string;
  bound_worker_id?: string | null;
  key_hash?: string | null;
  fingerprint?: { serial?: string | null; product?: string | null; manufacturer?: string | null } | null;
}

/** Hex digits of a MAC in any spelling, so `000C29`, `00-0c-29` and `00:0c:29` all find it. */
function macDigits(s: string): string {
  return s.toLowerCase().replace(/[^0-9a-f]/g, '');
}

/**
 * The lower-cased text a search looks in: the MAC's hex digits, then MAC, serial, product,
 * manufacturer, bound worker, NUL-separated. The digits lead so a MAC-like query needs no
 * per-device work beyond one indexOf in the (cached) text.
 */
export function searchText(d: FilterableDevice): string {
  const fp = d.fingerprint ?? {};
  return [macDigits(d.mac), d.mac, fp.serial, fp.product, fp.manufacturer, d.bound_worker_id].map((v) => (typeof v === 'string' ? v.toLowerCase() : '')).join('\0');
}

/**
 * The free text as a search reads it: trimmed and lower-cased, and, when it could be (part of) a
 * MAC in any spelling, its hex digits, which are looked for in the MAC's digits only.
 */
export function parseQuery(raw: string | undefined): { q: string; qMac: string; macLike: boolean } {
  const q = (raw ?? '').trim().toLowerCase();
  const qMac = macDigits(q);
  return { q, qMac, macLike: q !== '' && /^[0-9a-f:.\-\s]+$/.test(q) && qMac.length >= 2 };
}

/**
 * A predicate for the filter; build it once per query, call it per device. `text` may return a
 * cached searchText(d) (the server keeps one per record across searches).
 */
export function deviceMatcher<D extends FilterableDevice>(f: DeviceFilter, text: (d: D) => string = searchText): (d: D) => boolean {
  const { q, qMac, macLike } = parseQuery(f.q);
  const state = f.state && f.state !== 'all' ? f.state : '';
  const key = f.key && f.key !== 'any' ? f.key : '';
  return (d) => {
    if (state && d.state !== state) return false;
    if (key === 'claimed' && !d.key_hash) return false;
    if (key === 'none' && d.key_hash) return false;
    if (!q) return true;
    const t = text(d);
    if (macLike) {
      // Within the leading digits segment only (its end is the first NUL).
      const at = t.indexOf(qMac);
      if (at >= 0 && at + qMac.length <= t.indexOf('\0')) return true;
    }
    // A query has no NUL (it would match across two fields); the digits segment is not free text.
    if (q.includes('\0')) return false;
    const at = t.indexOf(q, t.indexOf('\0') + 1);
    return at >= 0;
  };
}

/** The list's order: by MAC. */
export const byMac = (a: { mac: string }, b: { mac: string }): number => (a.mac < b.mac ? -1 : a.mac > b.mac ? 1 : 0);
