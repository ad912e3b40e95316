import { keySha256 } from '../../common/device-key';

const PUBKEY_FORM = /^04[0-9a-f]{128}$/;
import { isDeviceMac } from '../../../shared/grammars';
import { normalizeId, normalizeMac } from '../../../shared/mac';
import type { Seal, Validator } from '../../../shared/files/ledger-map';
import { fleetStrings } from '../../../shared/string-pool';

export const DEVICE_STATES = ['pooled', 'bound', 'revoked'] as const;
export type DeviceState = (typeof DEVICE_STATES)[number];
export const WORKER_STATES = ['registered', 'ready', 'installing'] as const;
export type WorkerState = (typeof WORKER_STATES)[number];

export interface Fingerprint {
  manufacturer: string | null;
  product: string | null;
  serial: string | null;
  cpumodel: string | null;
  mem_total: number | null;
  mem_type: string | null;
  mem_speed: number | null;
  chip: string | null;
  busid: string | null;
}

export const FINGERPRINT_FIELDS = [
  'manufacturer',
  'product',
  'serial',
  'cpumodel',
  'mem_total',
  'mem_type',
  'mem_speed',
  'chip',
  'busid',
] as const satisfies readonly (keyof Fingerprint)[];

export const emptyFingerprint = (): Fingerprint => ({
  manufacturer: null,
  product: null,
  serial: null,
  cpumodel: null,
  mem_total: null,
  mem_type: null,
  mem_speed: null,
  chip: null,
  busid: null,
});

/** state/devices.yml entry, keyed by lower-case colon MAC. */
export interface DeviceRecord {
  mac: string;
  uuid: string | null;
  state: DeviceState;
  /** The binding authority: the worker this device boots as. */
  bound_worker_id: string | null;
  /** SHA-256 (hex) of the device's P-256 public key (seed 004); null until a key is claimed. */
  key_hash: string | null;
  /** The public key itself, 130 hex digits (`04 || X || Y`): public, kept to verify signatures. */
  pubkey: string | null;
  /** When the key was claimed (inside a registration window). */
  key_claimed_at: string | null;
  source: 'ipxe' | 'manual';
  fingerprint: Fingerprint;
  first_seen: string | null;
  last_seen: string | null;
}

export interface DiskRecord {
  agent: string;
  transport?: string;
  iqn?: string;
  nqn?: string;
  filename: string;
  backing: string;
  os: string;
  os_version?: string | null;
  os_tag?: string;
  /** version: the master version the disk holds (cloned from, or restored to); absent on disks made before versions. */
  source: { type: 'master'; name: string; version?: number } | { type: 'empty'; size: string };
  /** `reset`: restored to its master at the start of every boot of its worker; absent: persistent. */
  mode?: DiskMode;
  /** The master's maintenance disk (the one writer that makes its next version); absent: an ordinary disk. */
  maintenance?: true;
}

/** persistent: keeps what the worker writes (the default); reset: back to its master at every boot. */
export const DISK_MODES = ['persistent', 'reset'] as const;
export type DiskMode = (typeof DISK_MODES)[number];

export interface CdRecord {
  agent: string;
  iqn: string;
  iso: string;
  backing: string;
}

/** The IQN (iSCSI) or NQN (NVMe/TCP) that names a disk's or CD's target on its agent. */
export function targetName(t: DiskRecord | CdRecord): string {
  return ('nqn' in t && t.nqn) || t.iqn!;
}

/** The disks of a worker without the one whose target is `t` on the same agent. */
export function withoutTarget(disks: DiskRecord[], t: DiskRecord): DiskRecord[] {
  const name = targetName(t);
  return disks.filter((d) => d.agent !== t.agent || targetName(d) !== name);
}

export interface BootConfig {
  menu_default: string | null;
  menu_timeout: number | null;
}

/** state/workers.yml entry, keyed by worker_id. Holds no MAC: bindings live on devices. */
export interface WorkerRecord {
  worker_id: string;
  hostname: string;
  arch: string;
  state: WorkerState;
  disks: DiskRecord[];
  cd: CdRecord | null;
  default_os: string | null;
  /** os_tag of the default boot disk (seed 004); default_os is that disk's os. */
  default_disk: string | null;
  boot: BootConfig;
  created_at: string | null;
  /**
   * Random, set when the worker is created: tells this worker from an earlier one of the same id
   * (a credential stamped with another incarnation is a deleted worker's leftover, never used).
   */
  incarnation?: string;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const optStr = (v: unknown) => v === undefined || v === null || typeof v === 'string';
const optNum = (v: unknown) => v === undefined || v === null || (typeof v === 'number' && Number.isFinite(v));

export const validateDevice: Validator<DeviceRecord> = (key, v) => {
  if (!isObj(v)) return { ok: false, error: 'entry must be a mapping' };
  const mac = normalizeMac(key);
  if (mac !== key) return { ok: false, error: 'key must be a lower-case colon MAC (aa:bb:cc:dd:ee:ff)' };
  if (!isDeviceMac(key)) return { ok: false, error: 'key is not a device MAC (broadcast, multicast and all-zero addresses are refused)' };
  if (v.mac !== undefined && normalizeMac(v.mac) !== key) return { ok: false, error: 'mac does not match the key' };
  if (!DEVICE_STATES.includes(v.state as DeviceState)) {
    return { ok: false, error: `state must be one of ${DEVICE_STATES.join(', ')}` };
  }
  const bound = v.bound_worker_id ?? null;
  if (bound !== null && normalizeId(bound) !== bound) return { ok: false, error: 'bound_worker_id is not a valid worker id' };
  if ((v.state === 'bound') !== (bound !== null)) {
    return { ok: false, error: 'state bound and bound_worker_id must go together' };
  }
  for (const f of ['uuid', 'key_hash', 'pubkey', 'key_claimed_at', 'first_seen', 'last_seen'] as const) {
    if (!optStr(v[f])) return { ok: false, error: `${f} must be a string or null` };
  }
  const pubkey = (v.pubkey as string | null | undefined) ?? null;
  // The form only (fast at 50,000 devices); the point is checked on the curve when it is first used.
  if (pubkey !== null && !PUBKEY_FORM.test(pubkey)) return { ok: false, error: 'pubkey must be 130 lower-case hex digits starting with 04' };
  const keyHash = pubkey === null ? ((v.key_hash as string | undefined) ?? null) : keySha256(pubkey);
  if (pubkey !== null && v.key_hash !== undefined && v.key_hash !== null && v.key_hash !== keyHash) {
    return { ok: false, error: 'key_hash does not match pubkey' };
  }
  const fp = v.fingerprint ?? {};
  if (!isObj(fp)) return { ok: false, error: 'fingerprint must be a mapping' };
  const fingerprint = emptyFingerprint();
  for (const f of FINGERPRINT_FIELDS) {
    const x = fp[f];
    if (f === 'mem_total' || f === 'mem_speed') {
      if (!optNum(x)) return { ok: false, error: `fingerprint.${f} must be a number` };
      (fingerprint[f] as number | null) = (x as number | undefined) ?? null;
    } else {
      if (!optStr(x) && typeof x !== 'number') return { ok: false, error: `fingerprint.${f} must be a string` };
      // Models and chips repeat across the fleet: one string each (a serial is the device's own).
      (fingerprint[f] as string | null) = x === undefined || x === null ? null : f === 'serial' ? String(x) : fleetStrings.of(String(x));
    }
  }
  return {
    ok: true,
    value: {
      mac: key,
      uuid: (v.uuid as string) ?? null,
      state: DEVICE_STATES[DEVICE_STATES.indexOf(v.state as DeviceState)],
      bound_worker_id: bound as string | null,
      key_hash: keyHash,
      pubkey,
      key_claimed_at: (v.key_claimed_at as string) ?? null,
      source: v.source === 'manual' ? 'manual' : 'ipxe',
      fingerprint,
      first_seen: (v.first_seen as string) ?? null,
      last_seen: (v.last_seen as string) ?? null,
    },
  };
};

export const validateWorker: Validator<WorkerRecord> = (key, v) => {
  if (!isObj(v)) return { ok: false, error: 'entry must be a mapping' };
  if (normalizeId(key) !== key) return { ok: false, error: 'key is not a valid worker id' };
  const hostname = v.hostname ?? key;
  if (typeof hostname !== 'string' || normalizeId(hostname) !== hostname) {
    return { ok: false, error: 'hostname is not valid' };
  }
  if (!WORKER_STATES.includes(v.state as WorkerState)) {
    return { ok: false, error: `state must be one of ${WORKER_STATES.join(', ')}` };
  }
  const disks = v.disks ?? [];
  if (!Array.isArray(disks) || !disks.every(isObj)) return { ok: false, error: 'disks must be a list of mappings' };
  const cd = v.cd ?? null;
  if (cd !== null && !isObj(cd)) return { ok: false, error: 'cd must be a mapping or null' };
  const boot = v.boot ?? {};
  if (!isObj(boot)) return { ok: false, error: 'boot must be a mapping' };
  if (v.incarnation !== undefined && !(typeof v.incarnation === 'string' && /^[0-9a-f]{16}$/.test(v.incarnation))) {
    return { ok: false, error: 'incarnation must be 16 hex digits' };
  }
  if (!optStr(boot.menu_default)) return { ok: false, error: 'boot.menu_default must be a string' };
  if (!optNum(boot.menu_timeout)) return { ok: false, error: 'boot.menu_timeout must be a number' };
  if (!optStr(v.default_os)) return { ok: false, error: 'default_os must be a string' };
  if (v.default_disk !== undefined && v.default_disk !== null && !(typeof v.default_disk === 'string' && /^[0-9a-f]{12}$/.test(v.default_disk))) {
    return { ok: false, error: 'default_disk must be an os_tag (12 hex digits) or null' };
  }
  // default_disk names a disk of this worker; an older entry (or a hand edit) with only default_os
  // gets the tag of its one disk of that os.
  const tagged = (disks as { os?: unknown; os_tag?: unknown }[]).filter((d) => typeof d.os_tag === 'string');
  let defaultDisk = tagged.some((d) => d.os_tag === v.default_disk) ? (v.default_disk as string) : null;
  if (!defaultDisk && typeof v.default_os === 'string') {
    const same = tagged.filter((d) => d.os === v.default_os);
    if (same.length === 1) defaultDisk = same[0].os_tag as string;
  }
  return {
    ok: true,
    value: {
      worker_id: key,
      hostname,
      arch: typeof v.arch === 'string' ? fleetStrings.of(v.arch) : 'x86_64',
      state: WORKER_STATES[WORKER_STATES.indexOf(v.state as WorkerState)],
      disks: disks as unknown as DiskRecord[],
      cd: cd as CdRecord | null,
      default_os: (v.default_os as string) ?? null,
      default_disk: defaultDisk,
      boot: {
        menu_default: typeof boot.menu_default === 'string' ? fleetStrings.of(boot.menu_default) : null,
        menu_timeout: (boot.menu_timeout as number) ?? null,
      },
      created_at: typeof v.created_at === 'string' ? v.created_at : null,
      ...(typeof v.incarnation === 'string' ? { incarnation: v.incarnation } : {}),
    },
  };
};

/**
 * The version of what validateDevice and validateWorker accept and how they normalise. A ledger
 * file a checkpoint sealed under this grammar is taken at start without validating its entries
 * again (Seal); bump it with any change to those validators or the helpers they call, so that
 * files written before are validated once more. The records spec holds a digest of their code
 * and fails when it moves without this number (test/unit/ledger-map.spec.ts).
 */
export const LEDGER_GRAMMAR = 1;

/** Fingerprint fields validateDevice pools (a serial is the device's own). */
const POOLED_FINGERPRINT = FINGERPRINT_FIELDS.filter((f) => f !== 'serial');

/**
 * A checkpoint's device line as JSON.parse made it is the record validateDevice returned: only
 * its strings are shared again. It runs before the seal is known to hold, on any JSON object, so
 * it never throws and never changes a value (what it gets may still go to validateDevice).
 */
export const DEVICE_SEAL: Seal<DeviceRecord> = {
  grammar: LEDGER_GRAMMAR,
  adopt: (key, d) => {
    if (d.mac === key) d.mac = key;
    const fp = d.fingerprint as unknown as Record<string, unknown> | null;
    // As validateDevice pools them (JSON.parse itself shares only strings of up to 10 characters).
    if (typeof fp === 'object' && fp !== null) {
      for (const f of POOLED_FINGERPRINT) {
        const x = fp[f];
        if (typeof x === 'string') fp[f] = fleetStrings.of(x);
      }
    }
    return d;
  },
};

/** A checkpoint's worker line as JSON.parse made it (see DEVICE_SEAL). */
export const WORKER_SEAL: Seal<WorkerRecord> = {
  grammar: LEDGER_GRAMMAR,
  adopt: (key, w) => {
    if (w.worker_id === key) w.worker_id = key;
    if (w.hostname === key) w.hostname = key;
    if (typeof w.arch === 'string') w.arch = fleetStrings.of(w.arch);
    const boot = w.boot as unknown as Record<string, unknown> | null;
    if (typeof boot === 'object' && boot !== null && typeof boot.menu_default === 'string') boot.menu_default = fleetStrings.of(boot.menu_default);
    return w;
  },
};

/** A fresh worker entry: registered, no disks, no CD, no default boot. */
export function newWorker(id: string, fields: Partial<WorkerRecord> = {}): WorkerRecord {
  return {
    worker_id: id,
    hostname: id,
    arch: 'x86_64',
    state: 'registered',
    disks: [],
    cd: null,
    default_os: null,
    default_disk: null,
    boot: { menu_default: null, menu_timeout: null },
    created_at: null,
    ...fields,
  };
}

/** A fresh device entry: pooled, unbound, empty fingerprint. */
export function newDevice(mac: string, fields: Partial<DeviceRecord> = {}): DeviceRecord {
  return {
    mac,
    uuid: null,
    state: 'pooled',
    bound_worker_id: null,
    key_hash: null,
    pubkey: null,
    key_claimed_at: null,
    source: 'manual',
    fingerprint: emptyFingerprint(),
    first_seen: null,
    last_seen: null,
    ...fields,
  };
}
