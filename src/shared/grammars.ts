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
/** An agent id or tag as a request may spell it: trimmed and lower-cased before AGENT_NAME is checked. */
export const AGENT_NAME_INPUT = '^\\s*[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?\\s*$';
/** A MAC as a request may spell it: 12 hex digits, any of `:` `-` `.` anywhere between, any case, surrounding blanks (normalizeMac). */
export const MAC_INPUT = '^\\s*[:.-]*(?:[0-9A-Fa-f][:.-]*){12}\\s*$';
/** A target name an agent is asked for: `<base iqn or nqn>:<suffix>` (the base must be the agent's own; the suffix lower-case). */
export const TARGET_NAME_PATTERN = '^(?:iqn|nqn)\\.\\d{4}-\\d{2}\\.\\S+:[a-z0-9][a-z0-9.-]{0,200}$';

/** Items of menu.ipxe and operating-system names: `[a-z0-9.-]`, starting with a letter or digit. */
export const MENU_NAME = /^[a-z0-9][a-z0-9.-]{0,62}$/;

/**
 * The `yyyy-mm` of an IQN or NQN (RFC 3720 3.2.6.3.1, NVMe base 4.5): a month the naming authority
 * owned its domain, so a real month (01-12) of a plausible year (1970-2999).
 */
const NAME_DATE = '(?:19[7-9]\\d|2\\d{3})-(?:0[1-9]|1[0-2])';

/** The `<base>` of an IQN (iSCSI) or NQN (NVMe) as /boot-vars hands it out (RFC 3720 / NVMe 1.4 names). */
export const TARGET_BASE = new RegExp(
  `^(?:iqn\\.${NAME_DATE}\\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[a-z0-9.:-]*[a-z0-9])?|nqn\\.${NAME_DATE}\\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[a-z0-9._:-]*[a-z0-9])?)$`,
);

/** A host NQN as agents accept it (`nqn.yyyy-mm.<domain>[:<anything safe>]`). */
export const HOST_NQN = new RegExp(`^nqn\\.${NAME_DATE}\\.[a-z0-9][a-z0-9.-]*(:[A-Za-z0-9._:-]+)?$`);
/** An initiator IQN as LIO ACLs accept it. */
export const INITIATOR_IQN = new RegExp(`^iqn\\.${NAME_DATE}\\.[a-z0-9][a-z0-9.-]*[a-z0-9](:[A-Za-z0-9._:-]+)?$`);
/** A bare `iqn.yyyy-mm.<domain>` / `nqn.yyyy-mm.<domain>` base of an agent's or the control plane's names. */
export const BASE_IQN = new RegExp(`^iqn\\.${NAME_DATE}\\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?$`);
export const BASE_NQN = new RegExp(`^nqn\\.${NAME_DATE}\\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?$`);

/**
 * iPXE's `iscsi-sep`: `:<protocol>:<port>:<lun>:` between server and target of a sanboot URI,
 * protocol empty, the port empty for 3260 (else 1-65535), LUN 1 (stgt) or empty (LIO, LUN 0).
 */
export const ISCSI_SEP = /^::(?:[1-9]\d{0,4})?:1?:$/;
const isIscsiSep = (v: string) => ISCSI_SEP.test(v) && !(Number(v.split(':')[2] || 0) > 65535);

/** Bearer tokens: visible ASCII only (they travel in an HTTP header), or a `${ENV}` placeholder. */
export const TOKEN = /^[\x21-\x7e]{1,512}$/;

/**
 * A data-plane address for a URI: a unicast IPv4 address, a bracketed unicast IPv6 address or a
 * DNS name. Not the unspecified address (0.0.0.0/8, ::), broadcast, multicast or reserved
 * (224.0.0.0 and above, ff00::/8): no initiator can connect to those.
 */
export function isAddress(v: string): boolean {
  if (isIPv4(v)) {
    const first = Number(v.split('.')[0]);
    return first !== 0 && first < 224;
  }
  if (v.startsWith('[') && v.endsWith(']')) {
    const a = v.slice(1, -1).toLowerCase();
    return isIPv6(a) && !/^(?:0*:)*:?0*$/.test(a) && !a.startsWith('ff');
  }
  return DNS_NAME.test(v) && !/^\d+(?:\.\d+)*$/.test(v);
}

/** The spec's pattern of an address (isAddress also refuses the unspecified, multicast and reserved ranges). */
export const ADDRESS_PATTERN = '^(?:\\d{1,3}(?:\\.\\d{1,3}){3}|\\[?[0-9A-Fa-f:.]+\\]?|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)$';

/** The spec's pattern of an agent base_url: scheme, host (as ADDRESS_PATTERN), optional port; no path, query or credentials. */
export const BASE_URL_PATTERN = '^https?://(?:\\d{1,3}(?:\\.\\d{1,3}){3}|\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)(?::\\d{1,5})?/?$';

/**
 * Characters no file name of DISK_DIR may hold: C0/C1 controls (NEL included), DEL, line and
 * paragraph separators, and format characters (zero-width, bidi overrides such as U+202E), which
 * make a name display as another.
 */
export const UNSAFE_NAME_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Cf}]/u;

/** The spec's pattern of a file name in DISK_DIR (UNSAFE_NAME_CHARS spelled out for JSON Schema). */
const NAME_CHAR = '[^/\\\\\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u061c\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u206f\\ufeff]';
export const FILE_NAME_PATTERN = `^(?!\\.)${NAME_CHAR}{1,255}$`;
/** A writable disk's file: a file name that does not contain `_tpl_` (which marks masters). */
export const DISK_FILE_PATTERN = `^(?!\\.)(?!.*_tpl_)${NAME_CHAR}{1,255}$`;

/** An address as written by an operator: bare IPv6 is bracketed (iPXE URIs need the brackets). */
export function normalizeAddress(raw: string): string | null {
  const v = raw.trim().toLowerCase();
  const bracketed = isIPv6(v) ? `[${v}]` : v;
  return isAddress(bracketed) ? bracketed : null;
}

/** A full NVMe qualified name (subsystem or host): `nqn.yyyy-mm.<reversed domain>:<anything safe>`. */
export const NQN = new RegExp(`^nqn\\.${NAME_DATE}\\.[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?:[A-Za-z0-9._:-]*[A-Za-z0-9]$`);

/** A configured TLS PSK in the NVMe interchange form (`NVMeTLSkey-1:01|02:<base64>:`). */
/** An iSCSI CHAP user name (CHAP_N): what iPXE's `username` setting sends. */
export const CHAP_USERID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;
/** An iSCSI CHAP secret: 12 to 64 characters (RFC 7143 asks at least 12 bytes), none that needs quoting in an iPXE script. */
export const CHAP_SECRET = /^[A-Za-z0-9._+/=-]{12,64}$/;
/** A DH-HMAC-CHAP secret in interchange form (base64 of 36, 52 or 68 bytes; the CRC is checked where it is accepted). */
export const DHCHAP_SECRET = /^DHHC-1:0[0-3]:[A-Za-z0-9+/]{48,92}={0,2}:$/;
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

export type GrammarName = 'address' | 'target-base' | 'iscsi-sep' | 'menu-name' | 'number' | 'hex64' | 'comment' | 'nqn' | 'tls-psk' | 'dhchap-secret' | 'chap-userid' | 'chap-secret' | 'menu-label' | 'root-path';

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
  'dhchap-secret': (v) => DHCHAP_SECRET.test(v),
  'chap-userid': (v) => CHAP_USERID.test(v),
  'chap-secret': (v) => CHAP_SECRET.test(v),
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
