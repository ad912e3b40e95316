import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * The licences of every npm package in package-lock.json, checked against what an Apache-2.0
 * product may ship (production dependencies) or use to build and test (development ones), and
 * the production list rendered into THIRD_PARTY.md between its markers.
 *
 *   node dist/scripts/licenses.js          check, and say whether THIRD_PARTY.md is current
 *   node dist/scripts/licenses.js --write  also rewrite the list in THIRD_PARTY.md
 */

/** Permissive licences compatible with shipping inside an Apache-2.0 product. */
export const SHIPPABLE = ['MIT', 'ISC', 'BSD-2-Clause', 'BSD-3-Clause', 'Apache-2.0', '0BSD', 'BlueOak-1.0.0', 'Python-2.0', 'CC0-1.0', 'Unlicense'];
/** Also fine for tools that are never shipped: weak copyleft per file (MPL), data under CC-BY. */
export const DEV_ONLY = ['MPL-2.0', 'CC-BY-4.0'];

export interface PackageLicence {
  name: string;
  version: string;
  license: string;
  dev: boolean;
}

export const BEGIN = '<!-- npm-production:begin (npm run licenses -- --write) -->';
export const END = '<!-- npm-production:end -->';

/** An SPDX expression is allowed when some alternative of an OR is allowed (an AND needs all). */
export function allowed(expr: string, list: string[]): boolean {
  const e = expr.replace(/^\((.*)\)$/, '$1').trim();
  if (/ OR /.test(e)) return e.split(/ OR /).some((x) => allowed(x, list));
  if (/ AND /.test(e)) return e.split(/ AND /).every((x) => allowed(x, list));
  return list.includes(e);
}

export function readLicences(root: string): PackageLicence[] {
  const lock = JSON.parse(fs.readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version?: string; license?: unknown; dev?: boolean; link?: boolean }> };
  const out: PackageLicence[] = [];
  for (const [key, p] of Object.entries(lock.packages)) {
    if (!key || p.link) continue;
    let license = typeof p.license === 'string' ? p.license : '';
    if (!license) {
      // Old packages name theirs in a `licenses` array the lock file does not copy.
      const pj = path.join(root, key, 'package.json');
      const legacy = fs.existsSync(pj) ? (JSON.parse(fs.readFileSync(pj, 'utf8')) as { licenses?: { type?: string }[] }).licenses : undefined;
      license = legacy?.map((l) => l.type).filter(Boolean).join(' OR ') ?? '';
    }
    out.push({ name: key.slice(key.lastIndexOf('node_modules/') + 13), version: p.version ?? '', license: license || 'UNKNOWN', dev: !!p.dev });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name) || a.version.localeCompare(b.version));
}

/** Packages whose licence is not allowed for their use, as readable lines. */
export function problems(list: PackageLicence[]): string[] {
  return list.filter((p) => !allowed(p.license, p.dev ? [...SHIPPABLE, ...DEV_ONLY] : SHIPPABLE)).map((p) => `${p.name}@${p.version}: ${p.license} (${p.dev ? 'development' : 'production'})`);
}

/** The production table of THIRD_PARTY.md. */
export function productionTable(list: PackageLicence[]): string {
  const seen = new Set<string>();
  const rows = list.filter((p) => !p.dev && !seen.has(`${p.name}@${p.version}`) && seen.add(`${p.name}@${p.version}`));
  return ['| package | version | licence |', '| --- | --- | --- |', ...rows.map((p) => `| ${p.name} | ${p.version} | ${p.license} |`)].join('\n');
}

/** THIRD_PARTY.md with its npm section replaced by `table`. */
export function withTable(doc: string, table: string): string {
  const a = doc.indexOf(BEGIN);
  const b = doc.indexOf(END);
  if (a < 0 || b < a) throw new Error(`THIRD_PARTY.md lacks the ${BEGIN} ... ${END} markers`);
  return `${doc.slice(0, a + BEGIN.length)}\n${table}\n${doc.slice(b)}`;
}

if (require.main === module) {
  const root = path.resolve(__dirname, '../..');
  const list = readLicences(root);
  const bad = problems(list);
  const file = path.join(root, 'THIRD_PARTY.md');
  const doc = fs.readFileSync(file, 'utf8');
  const next = withTable(doc, productionTable(list));
  if (process.argv.includes('--write') && next !== doc) fs.writeFileSync(file, next);
  process.stdout.write(`${list.length} packages (${list.filter((p) => !p.dev).length} production); licences not allowed: ${bad.length}\n`);
  for (const b of bad) process.stdout.write(`  ${b}\n`);
  const stale = !process.argv.includes('--write') && next !== doc;
  if (stale) process.stdout.write('THIRD_PARTY.md is out of date: npm run licenses -- --write\n');
  process.exitCode = bad.length || stale ? 1 : 0;
}
