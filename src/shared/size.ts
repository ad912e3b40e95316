import { badRequest } from './http/api-error';

/**
 * The one size grammar of both APIs: a whole number, an optional K/M/G/T (powers of 1024) and an
 * optional B or iB, any case: `40G`, `40GB`, `40GiB`, `512m`, `1048576`. 1 MiB to 64 TiB, a whole
 * number of 512-byte sectors.
 */
export const SIZE_PATTERN = /^0*[1-9]\d{0,14}[KMGTkmgt]?(?:[iI]?[bB])?$/;
export const SIZE_FORMS = 'a size like 40G, 40GB, 40GiB, 512M or 1T';

const UNITS: Record<string, number> = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 };

/** Bytes of a size, or a 400 naming the field and the accepted forms. */
export function parseSize(field: string, raw: unknown): number {
  const m = typeof raw === 'string' && SIZE_PATTERN.test(raw.trim()) ? /^(\d+)([KMGT]?)/i.exec(raw.trim()) : null;
  if (!m) throw badRequest(`${field}: must be ${SIZE_FORMS}, got ${JSON.stringify(raw)}`);
  const bytes = Number(m[1]) * UNITS[m[2].toUpperCase()];
  if (!Number.isSafeInteger(bytes) || bytes < 2 ** 20 || bytes > 64 * 2 ** 40) {
    throw badRequest(`${field}: must be between 1M and 64T, got ${JSON.stringify(raw)}`);
  }
  if (bytes % 512 !== 0) throw badRequest(`${field}: must be a multiple of 512 bytes`);
  return bytes;
}

/** 40G, 1.5M, 512B: the short form of a byte count for messages. */
export function humanSize(n: number): string {
  for (const [u, f] of [['T', 2 ** 40], ['G', 2 ** 30], ['M', 2 ** 20], ['K', 2 ** 10]] as const) {
    if (n >= f) return `${Math.round((n / f) * 10) / 10}${u}`;
  }
  return `${n}B`;
}
