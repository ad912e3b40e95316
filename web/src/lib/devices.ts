/** Device table logic: filter, search, sort; pure. */
export interface DeviceLike {
  mac: string;
  state: string;
  bound_worker_id?: string | null;
  key_sha256?: string | null;
  fingerprint?: { serial?: string | null; product?: string | null; manufacturer?: string | null } | null;
}

/** Hex digits of a MAC in any spelling, so `000C29`, `00-0c-29` and `00:0c:29` all find it. */
function macDigits(s: string): string {
  return s.toLowerCase().replace(/[^0-9a-f]/g, '');
}

/**
 * state: '' for every state; q: free text matched against MAC (any spelling), serial, product,
 * manufacturer and the bound worker, case-insensitively. Order: by MAC.
 */
export function filterDevices<T extends DeviceLike>(devices: readonly T[], f: { state?: string; q?: string; key?: '' | 'claimed' | 'none' }): T[] {
  const q = (f.q ?? '').trim().toLowerCase();
  const qMac = macDigits(q);
  const macLike = q !== '' && /^[0-9a-f:.\-\s]+$/.test(q) && qMac.length >= 2;
  const out = devices.filter((d) => {
    if (f.state && d.state !== f.state) return false;
    if (f.key === 'claimed' && !d.key_sha256) return false;
    if (f.key === 'none' && d.key_sha256) return false;
    if (!q) return true;
    if (macLike && macDigits(d.mac).includes(qMac)) return true;
    const fp = d.fingerprint ?? {};
    return [d.mac, fp.serial, fp.product, fp.manufacturer, d.bound_worker_id].some((v) => typeof v === 'string' && v.toLowerCase().includes(q));
  });
  return out.sort((a, b) => (a.mac < b.mac ? -1 : a.mac > b.mac ? 1 : 0));
}

/** Counts per state for the filter chips. */
export function countByState(devices: readonly DeviceLike[]): Record<string, number> {
  const c: Record<string, number> = { pooled: 0, bound: 0, revoked: 0 };
  for (const d of devices) c[d.state] = (c[d.state] ?? 0) + 1;
  return c;
}
