/** Formatting shared by every page; pure, so unit tests pin it down. */

/** `12 s ago`, `5 min ago`, `3 h ago`, `2 d ago`; `in 4 min` for the future; `never` for null. */
export function relativeTime(iso: string | null | undefined, nowMs: number): string {
  if (!iso) return 'never';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = Math.round((nowMs - t) / 1000);
  const a = Math.abs(d);
  const v = a < 60 ? `${a} s` : a < 3600 ? `${Math.floor(a / 60)} min` : a < 86400 ? `${Math.floor(a / 3600)} h` : `${Math.floor(a / 86400)} d`;
  if (a < 5) return 'just now';
  return d >= 0 ? `${v} ago` : `in ${v}`;
}

/** A countdown: `4:05`, `1:02:03`; never negative. */
export function countdown(msLeft: number): string {
  const s = Math.max(0, Math.ceil(msLeft / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

/** Bytes in binary units, one decimal: `20.0 GiB`. */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** The first `n` hex digits of a sha256 (what the UI shows of key and secret hashes). */
export function hashPrefix(h: string | null | undefined, n = 12): string {
  return h ? h.slice(0, n) : '';
}
