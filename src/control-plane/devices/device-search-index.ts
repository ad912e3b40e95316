import { deviceMatcher, parseQuery, type FilterableDevice } from '../../shared/device-filter';

/** The device pool as a ledger keeps it (a Map or the store's own map): walked in its own order. */
export interface Pool<D> {
  values(): Iterable<D>;
}

/** Between two records' texts in the blob (a query holding it is answered without the blob). */
const SEP = '\u0001';

/**
 * The free-text half of the device search (GET /devices/page?q=) over one string: every record's
 * search text (see searchText: MAC digits, NUL, then the searchable fields) joined by SEP, so a
 * search is one native `indexOf` walk over a few megabytes instead of a text lookup and a
 * substring test per device (~45 ms at 100,000 devices, most of a search-as-you-type round trip).
 *
 * Matches exactly what deviceMatcher's text test matches (property-tested against it). The blob
 * is rebuilt when the pool is not the one it was built from: records are replaced, never changed
 * in a way the search reads (telemetry touched in place is not searchable), so one identity pass
 * over the pool tells. Pure: the caller passes the pool and the (cached) text of a record.
 */
export class DeviceSearchIndex<D extends FilterableDevice> {
  private recs: D[] = [];
  /** Where record i's text starts in the blob, and where its searchable fields start (after its MAC digits and the NUL). */
  private starts = new Int32Array(0);
  private fields = new Int32Array(0);
  private blob = '';

  /** The records of `pool` (in its order) whose text matches the query `raw` (non-empty after trimming). */
  find(pool: Pool<D>, raw: string, text: (d: D) => string): D[] {
    const { q, qMac, macLike } = parseQuery(raw);
    if (q === '') return [];
    // A query holding the separator could match across two records: asked per record (never in practice).
    if (q.includes(SEP)) return [...pool.values()].filter(deviceMatcher<D>({ q: raw }, text));
    this.refresh(pool, text);
    const hit = new Uint8Array(this.recs.length);
    // Free text: anywhere in a record's searchable fields (a query without NUL cannot span two fields).
    if (!q.includes('\0')) this.scan(q, (i, at) => at >= this.fields[i], hit);
    // MAC-like: the digits, inside the MAC digits segment only.
    if (macLike) this.scan(qMac, (i, at) => at + qMac.length < this.fields[i], hit);
    const out: D[] = [];
    for (let i = 0; i < hit.length; i++) if (hit[i]) out.push(this.recs[i]);
    return out;
  }

  /** Marks each record where `needle` occurs at a position `ok` accepts; at most one accepted hit per record is needed. */
  private scan(needle: string, ok: (i: number, at: number) => boolean, hit: Uint8Array): void {
    let from = 0;
    for (;;) {
      const at = this.blob.indexOf(needle, from);
      if (at < 0) return;
      const i = this.recordAt(at);
      if (ok(i, at)) {
        hit[i] = 1;
        from = i + 1 < this.recs.length ? this.starts[i + 1] : this.blob.length;
      } else from = at + 1;
    }
  }

  /** The record whose text holds blob position `at` (binary search over the starts). */
  private recordAt(at: number): number {
    let lo = 0;
    let hi = this.recs.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.starts[mid] <= at) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Builds the blob now if the pool changed (so the next search does not). */
  refresh(pool: Pool<D>, text: (d: D) => string): void {
    let i = 0;
    let same = true;
    for (const d of pool.values()) {
      if (this.recs[i] !== d) {
        same = false;
        break;
      }
      i++;
    }
    if (same && i === this.recs.length) return;
    const recs: D[] = [];
    const parts: string[] = [];
    for (const d of pool.values()) {
      recs.push(d);
      parts.push(text(d));
    }
    const starts = new Int32Array(recs.length);
    const fields = new Int32Array(recs.length);
    let off = 0;
    for (let k = 0; k < parts.length; k++) {
      starts[k] = off;
      const nul = parts[k].indexOf('\0');
      fields[k] = off + (nul < 0 ? 0 : nul + 1);
      off += parts[k].length + 1;
    }
    this.recs = recs;
    this.starts = starts;
    this.fields = fields;
    this.blob = parts.join(SEP);
  }
}
