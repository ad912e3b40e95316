/**
 * Pasted manifests: JSON (an array of objects) or CSV/TSV with an optional header row. Only the
 * structure is checked here; the API validates every value and its message is shown per row.
 */
export interface ParseError {
  line: number;
  message: string;
}
export interface Parsed<T> {
  rows: T[];
  errors: ParseError[];
}

const DEVICE_FIELDS = ['mac', 'serial', 'product', 'manufacturer', 'uuid'] as const;
const PAIR_FIELDS = ['mac', 'worker_id', 'serial', 'product', 'manufacturer', 'uuid'] as const;

export type ImportRow = { mac: string; serial?: string; product?: string; manufacturer?: string; uuid?: string };
export type PairRow = ImportRow & { worker_id: string };

function splitLine(line: string): string[] {
  const sep = line.includes('\t') ? '\t' : line.includes(',') ? ',' : line.includes(';') ? ';' : /\s+/;
  return line.split(sep).map((c) => c.trim().replace(/^"(.*)"$/, '$1'));
}

function parse<T extends Record<string, string>>(text: string, fields: readonly string[], required: readonly string[]): Parsed<T> {
  const src = text.trim();
  const rows: T[] = [];
  const errors: ParseError[] = [];
  if (!src) return { rows, errors };
  if (src.startsWith('[') || src.startsWith('{')) {
    let data: unknown;
    try {
      data = JSON.parse(src);
    } catch (e) {
      return { rows, errors: [{ line: 0, message: `not valid JSON: ${(e as Error).message}` }] };
    }
    const list = Array.isArray(data) ? data : typeof data === 'object' && data && Array.isArray((data as { entries?: unknown }).entries) ? (data as { entries: unknown[] }).entries : Array.isArray((data as { pairs?: unknown })?.pairs) ? (data as { pairs: unknown[] }).pairs : null;
    if (!list) return { rows, errors: [{ line: 0, message: 'JSON must be an array of objects (or {"entries": [...]} / {"pairs": [...]})' }] };
    list.forEach((item, i) => {
      if (typeof item !== 'object' || item === null || Array.isArray(item)) {
        errors.push({ line: i + 1, message: `item ${i + 1} is not an object` });
        return;
      }
      const o: Record<string, string> = {};
      for (const f of fields) {
        const v = (item as Record<string, unknown>)[f];
        if (v !== undefined && v !== null && v !== '') o[f] = String(v);
      }
      const missing = required.filter((f) => !o[f]);
      if (missing.length) errors.push({ line: i + 1, message: `item ${i + 1}: ${missing.join(', ')} missing` });
      else rows.push(o as T);
    });
    return { rows, errors };
  }
  const lines = src.split(/\r?\n/);
  // Without a header row the columns are the fields in their documented order.
  let cols: string[] = [...fields];
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const cells = splitLine(line);
    if (i === 0 && cells.some((c) => fields.includes(c.toLowerCase()))) {
      cols = cells.map((c) => c.toLowerCase());
      const unknown = cols.filter((c) => !fields.includes(c));
      if (unknown.length) errors.push({ line: 1, message: `unknown column(s) ${unknown.join(', ')}; known: ${fields.join(', ')}` });
      return;
    }
    const o: Record<string, string> = {};
    cols.forEach((c, j) => {
      if (fields.includes(c) && cells[j]) o[c] = cells[j];
    });
    const missing = required.filter((f) => !o[f]);
    if (missing.length) errors.push({ line: i + 1, message: `line ${i + 1}: ${missing.join(', ')} missing` });
    else if (cells.length > cols.length) errors.push({ line: i + 1, message: `line ${i + 1}: ${cells.length} cells, at most ${cols.length} expected (${cols.join(', ')})` });
    else rows.push(o as T);
  });
  return { rows, errors };
}

/** Devices to import: `mac[,serial,product,manufacturer,uuid]` per line, or JSON. */
export function parseImport(text: string): Parsed<ImportRow> {
  return parse<ImportRow>(text, DEVICE_FIELDS, ['mac']);
}

/** A bind manifest: `mac,worker_id[,serial,product,manufacturer,uuid]` per line, or JSON. */
export function parsePairs(text: string): Parsed<PairRow> {
  return parse<PairRow>(text, PAIR_FIELDS, ['mac', 'worker_id']);
}
