import { isIPv4, isIPv6 } from 'node:net';

/**
 * The grammar of every value that can reach an iPXE script, and of the identifiers around them.
 * The same predicates validate a value when it is written (API, hand-edited files) and when the
 * renderer emits it, so no stored byte can add a line or a command to a boot script.
 */

const LABEL = '[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?';
const DNS_NAME = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})*$`, 'i');

/** Agent ids and tags: one grammar, lower-case, no leading or trailing punctuation, no `..`. */
export const AGENT_NAME = /^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$/;

/** Items of menu.ipxe and operating-system names: `[a-z0-9.-]`, starting with a letter or digit. */
export const MENU_NAME = /^[a-z0-9][a-z0-9.-]{0,62}$/;

/** The `<base>` of an IQN (iSCSI) or NQN (NVMe) as /boot-vars hands it out (RFC 3720 / NVMe 1.4 names). */
export const TARGET_BASE = /^(?:iqn\.\d{4}-\d{2}\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[a-z0-9.:-]*[a-z0-9])?|nqn\.\d{4}-\d{2}\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[a-z0-9._:-]*[a-z0-9])?)$/;

/**
 * iPXE's `iscsi-sep`: `:<protocol>:<port>:<lun>:` between server and target of a sanboot URI,
 * protocol empty, the port empty for 3260 (else 1-65535), LUN 1 (stgt) or empty (LIO, LUN 0).
 */
export const ISCSI_SEP = /^::(?:[1-9]\d{0,4})?:1?:$/;
const isIscsiSep = (v: string) => ISCSI_SEP.test(v) && !(Number(v.split(':')[2] || 0) > 65535);

/** Bearer tokens: visible ASCII only (they travel in an HTTP header), or a `${ENV}` placeholder. */
export const TOKEN = /^[\x21-\x7e]{1,512}$/;

/** A data-plane address for a URI: IPv4, bracketed IPv6 or a DNS name. */
export function isAddress(v: string): boolean {
  if (isIPv4(v)) return true;
  if (v.startsWith('[') && v.endsWith(']')) return isIPv6(v.slice(1, -1));
  return DNS_NAME.test(v) && !/^\d+(?:\.\d+)*$/.test(v);
}

/** An address as written by an operator: bare IPv6 is bracketed (iPXE URIs need the brackets). */
export function normalizeAddress(raw: string): string | null {
  const v = raw.trim().toLowerCase();
  const bracketed = isIPv6(v) ? `[${v}]` : v;
  return isAddress(bracketed) ? bracketed : null;
}

/** A full NVMe qualified name (subsystem or host): `nqn.yyyy-mm.<reversed domain>:<anything safe>`. */
export const NQN = /^nqn\.\d{4}-\d{2}\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?:[A-Za-z0-9._:-]*[A-Za-z0-9]$/;

/** A configured TLS PSK in the NVMe interchange form (`NVMeTLSkey-1:01|02:<base64>:`). */
export const TLS_PSK = /^NVMeTLSkey-1:0[12]:[A-Za-z0-9+/]{4,128}={0,2}:$/;

/** Menu item labels: letters, digits, space and `._()-` (never `$`, `{`, `}` or a line break). */
export const MENU_LABEL = /^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,79}$/;

/**
 * A sanboot root path: `iscsi:<address><sep><iqn>` (sep `::::` or `:::1:`, a port between the first colons) or
 * `nvme://<address>:<port>/<nqn>`, each part under its own grammar.
 */
export function isRootPath(v: string): boolean {
  let m = /^iscsi:(.+?)(::(?:[1-9]\d{0,4})?:1?:)(iqn\..+)$/.exec(v);
  if (m) return isAddress(m[1]) && isIscsiSep(m[2]) && m[3].length <= 223 && TARGET_BASE.test(m[3]);
  m = /^nvme:\/\/(.+):(\d{1,5})\/(nqn\..+)$/.exec(v);
  if (m) return isAddress(m[1]) && Number(m[2]) >= 1 && Number(m[2]) <= 65535 && m[3].length <= 223 && NQN.test(m[3]);
  return false;
}

export type GrammarName = 'address' | 'target-base' | 'iscsi-sep' | 'menu-name' | 'number' | 'hex64' | 'comment' | 'nqn' | 'tls-psk' | 'menu-label' | 'root-path';

const HEX64 = /^[0-9a-f]{64}$/;
/** Comments: printable ASCII on one line (they are built from validated names and fixed text). */
const COMMENT = /^[\x20-\x7e]{0,200}$/;

export const GRAMMARS: Record<GrammarName, (v: string) => boolean> = {
  address: isAddress,
  'target-base': (v) => v.length <= 223 && TARGET_BASE.test(v),
  'iscsi-sep': isIscsiSep,
  'menu-name': (v) => MENU_NAME.test(v),
  number: (v) => /^\d{1,10}$/.test(v),
  hex64: (v) => HEX64.test(v),
  comment: (v) => COMMENT.test(v),
  nqn: (v) => v.length <= 223 && NQN.test(v),
  'tls-psk': (v) => TLS_PSK.test(v),
  'menu-label': (v) => MENU_LABEL.test(v),
  'root-path': isRootPath,
};

/** A fingerprint string as /devices/report stores it: see cleanReportString. */
export const REPORT_FIELD_MAX = 128;
/** Printable ASCII words separated by single spaces: nothing for cleanReportString to change. */
const PLAIN_REPORT = /^[\x21-\x7e]+(?: [\x21-\x7e]+)*$/;

/**
 * Free text from the unauthenticated /devices/report (SMBIOS strings, chip names): control
 * characters (C0, DEL, C1), line and paragraph separators, format characters (zero-width, bidi
 * overrides), unpaired surrogates and characters outside the Basic Multilingual Plane are
 * dropped, whitespace runs become one space, and the result is cut to REPORT_FIELD_MAX characters.
 */
export function cleanReportString(raw: string): string {
  // What firmware almost always sends (printable ASCII, single spaces, short) is already clean.
  if (raw.length <= REPORT_FIELD_MAX && PLAIN_REPORT.test(raw)) return raw;
  const kept = raw.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Cf}\u{10000}-\u{10ffff}]|[\ud800-\udfff]/gu, ' ');
  return kept.replace(/\s+/g, ' ').trim().slice(0, REPORT_FIELD_MAX).trim();
}

/** MACs a device can have: unicast (I/G bit clear: no multicast, no broadcast) and not all zero. */
export function isDeviceMac(mac: string): boolean {
  const first = parseInt(mac.slice(0, 2), 16);
  return (first & 1) === 0 && mac !== '00:00:00:00:00:00';
}
