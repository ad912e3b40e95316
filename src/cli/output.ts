/**
 * What the CLI prints and how it exits. Tables for people, `--json` for scripts; errors go to
 * stderr with the API's own message and a distinct exit code per kind of failure.
 */

/** Exit codes (documented in `kurrent --help`). */
export const EXIT = {
  ok: 0,
  /** Other API errors (4xx not listed below). */
  failed: 1,
  /** Bad command line, or a destructive verb without confirmation. */
  usage: 2,
  /** 401 / 403: missing or wrong token. */
  auth: 3,
  /** 404. */
  notFound: 4,
  /** 409. */
  conflict: 5,
  /** 5xx, or the control plane could not be reached. */
  server: 6,
} as const;

export class CliError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

export function exitCodeOf(status: number): number {
  if (status === 401 || status === 403) return EXIT.auth;
  if (status === 404) return EXIT.notFound;
  if (status === 409) return EXIT.conflict;
  if (status >= 500) return EXIT.server;
  return EXIT.failed;
}

type Row = Record<string, unknown>;

const cell = (v: unknown): string => {
  if (v === null || v === undefined) return '-';
  if (Array.isArray(v)) return v.map(cell).join(',') || '-';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
};

/** A plain aligned table (no colour, no box drawing: it pipes into grep and awk). */
export function table(rows: Row[], columns: string[]): string {
  if (!rows.length) return '(none)\n';
  const data = rows.map((r) => columns.map((c) => cell(c.split('.').reduce<unknown>((o, k) => (o as Row | undefined)?.[k], r))));
  const widths = columns.map((c, i) => Math.max(c.length, ...data.map((d) => d[i].length)));
  const line = (cells: string[]) => cells.map((s, i) => (i === cells.length - 1 ? s : s.padEnd(widths[i]))).join('  ');
  return [line(columns.map((c) => c.toUpperCase())), ...data.map(line)].join('\n') + '\n';
}

/** key: value lines for one object. */
export function fields(obj: Row, keys: string[] = Object.keys(obj)): string {
  const w = Math.max(...keys.map((k) => k.length));
  return keys.map((k) => `${k.padEnd(w)}  ${cell(obj[k])}`).join('\n') + '\n';
}

/** "3 minutes ago" for last_seen and friends. */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const s = Math.round((now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(s)) return iso;
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}
