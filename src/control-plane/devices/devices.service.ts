import { BootSessionsService } from '../boots/boot-sessions.service';
import { BootsService } from '../boots/boots.service';
import { BootSessionDto } from '../boots/dto/boot-session.dto';
import { Injectable, Logger, StreamableFile } from '@nestjs/common';
import { badRequest, conflict, notFound } from '../../shared/http/api-error';
import { jsonArrayStream } from '../../shared/http/json-array-stream';
import { Clock } from '../common/clock';
import { EventBudget, OncePer, UNAUTHENTICATED_AUDITS_PER_MINUTE } from '../common/once-per';
import { parsePubkey, ParsedKey } from '../common/device-key';
import { byMac, deviceMatcher, searchText } from '../../shared/device-filter';
import { cleanReportString, isDeviceMac } from '../../shared/grammars';
import { normalizeId, normalizeMac } from '../../shared/mac';
import { fleetStrings, ownString } from '../../shared/string-pool';
import { AuditService } from '../audit/audit.service';
import type { RefusalReason } from '../settings/dto/admission.dto';
import { SettingsService } from '../settings/settings.service';
import { LedgerRepository, Tx } from '../repositories/ledger/ledger.repository';
import { DeviceRecord, emptyFingerprint, Fingerprint, newDevice } from '../repositories/ledger/records';
import { BindingService } from './binding.service';
import { DeviceSearchIndex } from './device-search-index';
import { RegistrationLimiter } from './registration-limiter';
import type {
  BatchBindDto,
  BatchBindResultDto,
  BatchIssueDto,
  BatchMatchedDto,
  BatchPairDto,
  BatchPreviewDto,
  FingerprintMismatchDto,
} from './dto/bind.dto';
import type { DeviceDto } from './dto/device.dto';
import type { ImportEntryDto, ImportResultDto } from './dto/import-devices.dto';
import type { DevicePageDto, DevicePageQueryDto } from './dto/list-devices.dto';
import type { RegisterDeviceDto } from './dto/register-device.dto';
import type { ReportQuery } from './dto/report.dto';

/** Over this, a report field is not a firmware string but an attack: 400. */
const MAX_REPORT_INPUT = 1024;

/** A free-text report field, cleaned (see cleanReportString: no control characters, at most 128). */
/** A repeated query field counts with its last value. */
function lastValue(q: ReportQuery, name: keyof ReportQuery): string | undefined {
  const v = q[name];
  return Array.isArray(v) ? v[v.length - 1] : v;
}

function reportString(q: ReportQuery, name: keyof ReportQuery): string | null {
  const v = lastValue(q, name);
  if (v === undefined || v === null) return null;
  const raw = String(v);
  if (raw.length > MAX_REPORT_INPUT) throw badRequest(`${name}: longer than ${MAX_REPORT_INPUT} characters`);
  const s = cleanReportString(raw);
  return s === '' ? null : s;
}

/** Integers as iPXE reports them: `0x8000` hex or decimal. */
function reportInt(q: ReportQuery, name: keyof ReportQuery): number | null {
  const s = reportString(q, name);
  if (s === null) return null;
  let n: number;
  if (/^0x[0-9a-f]+$/i.test(s)) n = parseInt(s.slice(2), 16);
  else if (/^\d+$/.test(s)) n = Number(s);
  else throw badRequest(`${name}: must be a decimal or 0x-hex integer, got ${JSON.stringify(s)}`);
  if (!Number.isSafeInteger(n)) throw badRequest(`${name}: out of range`);
  return n;
}

/** A device as the API shows it: the key's SHA-256 and claim time, never the key. */
export function deviceView(d: DeviceRecord, lastBoot: BootSessionDto | null): DeviceDto {
  // Field by field (the key itself left out): a rest-and-spread copy built a dictionary-mode object,
  // ~1.2 KB a device, and GET /devices at 100,000 allocated 270 MB (bench:scale, RSS after a storm).
  return {
    mac: d.mac,
    uuid: d.uuid,
    state: d.state,
    bound_worker_id: d.bound_worker_id,
    key_hash: d.key_hash,
    key_claimed_at: d.key_claimed_at,
    source: d.source,
    fingerprint: d.fingerprint,
    first_seen: d.first_seen,
    last_seen: d.last_seen,
    key_sha256: d.key_hash,
    last_boot: lastBoot,
  };
}

type PairVerdict =
  | { kind: 'matched'; mac: string; worker_id: string; item: BatchMatchedDto }
  | { kind: 'conflict' | 'not_found'; item: BatchIssueDto; skip: boolean };

@Injectable()
export class DevicesService {
  private readonly log = new Logger('Devices');
  /** One audit record per (key event, MAC) per minute: see auditKey. */
  private readonly keyAudits = new OncePer(60_000);
  private readonly keyBudgets = new Map<string, EventBudget>();

  constructor(
    private readonly store: LedgerRepository,
    private readonly bindings: BindingService,
    private readonly settings: SettingsService,
    private readonly audit: AuditService,
    private readonly clock: Clock,
    private readonly limiter: RegistrationLimiter,
    private readonly boots: BootsService,
    private readonly sessions: BootSessionsService,
  ) {}

  private view(d: DeviceRecord): DeviceDto {
    return deviceView(d, this.boots.latest(d.mac));
  }

  /**
   * GET /devices/report: fingerprint + last_seen for known devices, pool entry for unknown ones
   * when auto-register is on. A registration is on disk before the answer (group commit with the
   * other registrations of a storm); telemetry of known devices lands in memory at once and is
   * logged in batches (IPXE_CP_REPORT_FLUSH_MS).
   */
  async report(q: ReportQuery, client: string): Promise<''> {
    let mac = normalizeMac(Array.isArray(q.mac) ? q.mac[0] : q.mac);
    if (!mac) throw badRequest(`mac: required, a MAC address (got ${JSON.stringify(q.mac ?? null)})`);
    if (!isDeviceMac(mac)) throw badRequest(`mac: ${mac} is not a device MAC (broadcast, multicast and all-zero addresses are refused)`);
    const reported: Partial<Fingerprint> = {
      manufacturer: reportString(q, 'manufacturer'),
      product: reportString(q, 'product'),
      serial: reportString(q, 'serial'),
      cpumodel: reportString(q, 'cpumodel'),
      mem_total: reportInt(q, 'mem-total'),
      mem_type: reportString(q, 'mem-type'),
      mem_speed: reportInt(q, 'mem-speed'),
      chip: reportString(q, 'chip'),
      busid: reportString(q, 'busid'),
    };
    const uuid = reportString(q, 'uuid');
    const now = this.clock.isoNow();
    const store = this.store.read();
    const d = store.devices.get(mac);
    const rawKey = reportKeyParam(q);
    if (d) {
      if (d.state === 'revoked') return '';
      // The record's own MAC from here on: what is kept past this request (its boot event, the
      // telemetry's dirty key) must not be a view that holds the whole query string alive.
      mac = d.mac;
      this.sessions.seen({ mac, stage: 'report', worker: d.bound_worker_id ?? undefined });
      const fingerprint = mergeFingerprint(d.fingerprint, reported);
      if (fingerprint === d.fingerprint && (uuid ?? d.uuid) === d.uuid && d.first_seen !== null) {
        // The same machine reporting again: only last_seen moves, in the record itself.
        store.devices.touchInPlace(mac, d, (r) => (r.last_seen = now));
      } else {
        // What the record keeps are copies, not views of this request's query (ownString).
        store.devices.touch(mac, { ...d, uuid: uuid === null || uuid === d.uuid ? d.uuid : ownString(uuid), fingerprint, first_seen: d.first_seen ?? now, last_seen: now });
      }
      store.scheduleFlush();
      if (rawKey !== null) {
        const key = parsePubkey(rawKey);
        if (!key.ok) this.auditKey('device.key.invalid', mac, client, { reason: key.reason });
        else await this.reportKey(d, key, now, client);
      }
      return '';
    }
    const key = rawKey === null ? null : parsePubkey(rawKey);
    if (key && !key.ok) this.auditKey('device.key.invalid', mac, client, { reason: key.reason });
    const secure = this.settings.secureRegistration;
    if (secure) {
      // Secure mode (seed 004): new devices only inside a window, and only with a valid key.
      if (!this.settings.windowOpen()) return this.refuse(mac, client, 'no_window');
      if (!key?.ok) return this.refuse(mac, client, 'no_key');
    } else if (!this.settings.autoRegister) return this.refuse(mac, client, 'auto_register_off');
    const verdict = this.limiter.check(client, store.pooledCount());
    if (!verdict.ok) {
      if (verdict.burstStart) {
        this.log.warn(`device registrations refused (${verdict.reason}, limit ${verdict.limit}) from ${client}`);
        this.audit
          .record('device.register.limited', {
            status: 'failed',
            reason: verdict.reason,
            limit: verdict.limit,
            mac,
            previous_burst_refused: verdict.dropped,
            client,
          })
          .catch(() => undefined);
      }
      return '';
    }
    const keyFields = secure && key?.ok ? { pubkey: key.hex, key_hash: key.sha256, key_claimed_at: now } : {};
    let full = false;
    const registered = await store.register(
      newDevice(ownString(mac), { uuid: uuid === null ? null : ownString(uuid), source: 'ipxe', fingerprint: mergeFingerprint(emptyFingerprint(), reported), first_seen: now, last_seen: now, ...keyFields }),
      {
        // The window's quota and the pool limit are taken inside the locked commit: exact under any burst.
        admit: secure
          ? {
              take: () => {
                const ok = this.settings.tryAdmit();
                full ||= !ok;
                return ok;
              },
              release: () => this.settings.releaseAdmit(),
            }
          : undefined,
        poolLimit: this.limiter.poolLimit,
        audit: { op: 'device.register', fields: { mac, source: 'ipxe', ...(secure ? { via: 'registration_window', key_sha256: key!.ok ? key!.sha256 : null } : {}), client } },
      },
    );
    if (!registered && full) return this.refuse(mac, client, 'window_full');
    if (registered) this.sessions.seen({ mac, stage: 'report' });
    return '';
  }

  /**
   * An unknown device turned away: counted for GET /settings/admission and audited as
   * device.register.refused (once per MAC and reason a minute, and at most
   * UNAUTHENTICATED_AUDITS_PER_MINUTE a minute in all, the rest summarised as `dropped`).
   */
  private refuse(mac: string, client: string, reason: RefusalReason): '' {
    this.settings.noteRefused(reason);
    this.auditKey('device.register.refused', mac, client, { reason });
    return '';
  }

  /**
   * A known device reporting a key: claimed inside a window when it has none; a different key
   * than the stored one is never taken from a report (refused and audited).
   */
  private async reportKey(d: DeviceRecord, key: ParsedKey, now: string, client: string): Promise<void> {
    if (!key.ok) return;
    if (d.pubkey) {
      if (d.pubkey !== key.hex) this.auditKey('device.key.mismatch', d.mac, client, { key_sha256: d.key_hash, reported_sha256: key.sha256 });
      return;
    }
    if (!this.settings.windowOpen()) return;
    await this.store.read().reportChange(
      d.mac,
      (cur) => (cur && !cur.pubkey && cur.state !== 'revoked' && this.settings.windowOpen() ? { ...cur, pubkey: key.hex, key_hash: key.sha256, key_claimed_at: now } : null),
      undefined,
      { op: 'device.key.claim', fields: { mac: d.mac, key_sha256: key.sha256, client } },
    );
  }

  /** Key events from the unauthenticated report: one audit record per (event, MAC) per minute. */
  private auditKey(op: string, mac: string, client: string, fields: Record<string, unknown>): void {
    const now = this.clock.now().getTime();
    if (!this.keyAudits.allow(`${op}\0${mac}`, now)) return;
    // And at most UNAUTHENTICATED_AUDITS_PER_MINUTE of these across all MACs (a flood of new ones).
    const budget = this.keyBudgets.get(op) ?? this.keyBudgets.set(op, new EventBudget(UNAUTHENTICATED_AUDITS_PER_MINUTE)).get(op)!;
    const pass = budget.take(now);
    if (!pass) return;
    this.audit.record(op, { status: 'failed', mac, ...fields, ...(pass.dropped ? { dropped: pass.dropped } : {}), client }).catch(() => undefined);
  }

  /** DELETE /devices/{mac}/key: the device may claim a key again inside a window. */
  resetKey(rawMac: string, client: string): Promise<DeviceDto> {
    const mac = this.parseMac(rawMac);
    return this.store.exclusive(async () => {
      const r = await this.store.commit((tx) => {
        const d = tx.devices.get(mac);
        if (!d) throw notFound(`device not found: ${mac}`);
        if (!d.pubkey) throw conflict(`device has no key: ${mac}`);
        const next: DeviceRecord = { ...d, pubkey: null, key_hash: null, key_claimed_at: null };
        tx.devices.set(mac, next);
        tx.audit('device.key.reset', { mac, key_sha256: d.key_hash, client });
        return { next };
      });
      return this.view(r.next);
    });
  }

  /** GET /devices: the pool as it stands now, written out a slice at a time (a DeviceDto array). */
  list(state: string = 'all'): StreamableFile {
    const picked: DeviceRecord[] = [];
    for (const d of this.store.read().devices.values()) if (state === 'all' || d.state === state) picked.push(d);
    return jsonArrayStream(picked, (d) => this.view(d));
  }

  /**
   * GET /devices/page: the filter and search of the UI, done here so a browser never downloads a
   * 100,000-device pool; keyset pages in MAC order (a page stays right while devices come and go).
   */
  page(q: DevicePageQueryDto): DevicePageDto {
    // A page without a search (the screen opening, or re-reading after a change) readies the next search.
    if (!q.q?.trim() && !this.warming) this.warmSearch();
    const devices = this.store.read().devices;
    const counts = { all: 0, pooled: 0, bound: 0, revoked: 0 };
    for (const d of devices.values()) {
      counts.all++;
      counts[d.state]++;
    }
    // The free text narrows through the index first; state and key are checked per candidate.
    const candidates = q.q?.trim() ? this.searchIndex.find(devices, q.q, this.textOf) : devices.values();
    const match = deviceMatcher<DeviceRecord>({ state: q.state, key: q.key });
    let total = 0;
    const hits: DeviceRecord[] = [];
    for (const d of candidates) {
      if (!match(d)) continue;
      total++;
      if (q.after === undefined || d.mac > q.after) hits.push(d);
    }
    const limit = q.limit ?? 200;
    // Only the page is sorted in full: the smallest `limit` MACs are taken first.
    const page = smallest(hits, limit, byMac);
    return { total, counts, items: page.map((d) => this.view(d)), next_after: hits.length > limit ? page[page.length - 1].mac : null };
  }

  private readonly searchIndex = new DeviceSearchIndex<DeviceRecord>();
  private readonly textOf = (d: DeviceRecord): string => {
    let t = this.searchTexts.get(d);
    if (t === undefined) this.searchTexts.set(d, (t = searchText(d)));
    return t;
  };

  /** Search text per ledger record (records are replaced, never changed, so it stays true; the WeakMap lets old ones go). */
  private readonly searchTexts = new WeakMap<DeviceRecord, string>();
  private warming = false;

  /**
   * In the background, 5,000 records per turn of the event loop: the search texts of records that
   * have none, then the index (rebuilt only if the pool's records changed). So the operator's first
   * search after the screen opened, or after an import of 100,000 devices, is a scan, not 100,000
   * texts built inside one answer (~150 ms at 100,000 in production, more under ts-jest).
   */
  private warmSearch(): void {
    this.warming = true;
    const it = this.store.read().devices.values();
    const step = () => {
      try {
        for (let i = 0; i < 5000; i++) {
          const n = it.next();
          if (n.done) {
            this.searchIndex.refresh(this.store.read().devices, this.textOf);
            this.warming = false;
            return;
          }
          if (!this.searchTexts.has(n.value)) this.searchTexts.set(n.value, searchText(n.value));
        }
        setImmediate(step);
      } catch (err) {
        // Only a head start: the search builds what it needs itself.
        this.warming = false;
        this.log.warn(`search warm-up stopped: ${(err as Error).message}`);
      }
    };
    setImmediate(step);
  }

  get(rawMac: string): DeviceDto {
    const mac = this.parseMac(rawMac);
    const d = this.store.read().devices.get(mac);
    if (!d) throw notFound(`device not found: ${mac}`);
    return this.view(d);
  }

  register(dto: RegisterDeviceDto, client: string): Promise<DeviceDto> {
    return this.store.exclusive(async () => {
      const rec = await this.store.commit((tx) => {
        const existing = tx.devices.get(dto.mac);
        if (existing) throw conflict(`device already exists (state=${existing.state}): ${dto.mac}`);
        const r = this.newManual(dto);
        tx.devices.set(r.mac, r);
        tx.audit('device.register', { mac: r.mac, source: 'manual', client });
        return r;
      });
      return this.view(rec);
    });
  }

  import(entries: ImportEntryDto[], client: string): Promise<ImportResultDto> {
    return this.store.exclusive(async () => {
      const res = await this.store.commit((tx) => {
        const out: ImportResultDto = { created: [], skipped: [], failed: [] };
        for (const e of entries) {
          const mac = normalizeMac(e.mac);
          if (!mac) {
            out.failed.push({ mac: e.mac, error: `invalid MAC address: ${e.mac}` });
            continue;
          }
          if (!isDeviceMac(mac)) {
            out.failed.push({ mac, error: `not a device MAC (broadcast, multicast or all-zero): ${mac}` });
            continue;
          }
          const existing = tx.devices.get(mac);
          if (existing?.state === 'revoked') out.failed.push({ mac, error: `device revoked: ${mac}` });
          else if (existing) out.skipped.push({ mac, reason: `already registered (state=${existing.state})` });
          else {
            tx.devices.set(mac, this.newManual({ ...e, mac }));
            out.created.push(mac);
          }
        }
        for (const mac of out.created) tx.audit('device.register', { mac, source: 'manual', via: 'import', client });
        tx.audit('device.import', { created: out.created.length, skipped: out.skipped.length, failed: out.failed.length, client });
        return out;
      });
      return res;
    });
  }

  revoke(rawMac: string, client: string): Promise<DeviceDto> {
    const mac = this.parseMac(rawMac);
    return this.store.exclusive(async () => {
      const rec = await this.store.commit((tx) => {
        const d = tx.devices.get(mac);
        if (!d) throw notFound(`device not found: ${mac}`);
        if (d.state === 'bound') throw conflict(`device is bound to ${d.bound_worker_id}, unbind it first: ${mac}`);
        if (d.state === 'revoked') throw conflict(`device already revoked: ${mac}`);
        // Revocation drops the key too: a revoked device can never sign its way back in.
        const r: DeviceRecord = { ...d, state: 'revoked', pubkey: null, key_hash: null, key_claimed_at: null };
        tx.devices.set(mac, r);
        tx.audit('device.revoke', { mac, key_dropped: d.pubkey !== null, client });
        return { r };
      });
      return this.view(rec.r);
    });
  }

  /**
   * The way back from a revocation: revoked -> pooled, without a key (the device claims one again
   * inside a registration window, as a new one would). Audited as device.restore.
   */
  restore(rawMac: string, client: string): Promise<DeviceDto> {
    const mac = this.parseMac(rawMac);
    return this.store.exclusive(async () => {
      const r = await this.store.commit((tx) => {
        const d = tx.devices.get(mac);
        if (!d) throw notFound(`device not found: ${mac}`);
        if (d.state !== 'revoked') throw conflict(`device is not revoked (state ${d.state}): ${mac}`);
        const next: DeviceRecord = { ...d, state: 'pooled', bound_worker_id: null, pubkey: null, key_hash: null, key_claimed_at: null };
        tx.devices.set(mac, next);
        tx.audit('device.restore', { mac, client });
        return next;
      });
      return this.view(r);
    });
  }

  bind(rawMac: string, workerId: string, force: boolean, client: string): Promise<DeviceDto> {
    const mac = this.parseMac(rawMac);
    return this.store.exclusive(async () => {
      const device = await this.bindings.commit((tx) => {
        const outcome = this.bindings.bind(tx, mac, workerId, force);
        if (outcome.changed) {
          tx.audit('device.bind', {
            mac,
            worker_id: workerId,
            old_worker_id: outcome.old_worker_id,
            old_device_mac: outcome.old_device_mac,
            force,
            client,
          });
          if (outcome.old_device_mac) {
            tx.audit('device.unbind', { mac: outcome.old_device_mac, worker_id: workerId, reason: `replaced by ${mac} (force)`, client });
          }
        }
        return tx.devices.get(mac)!;
      }, client);
      return this.view(device);
    });
  }

  unbind(rawMac: string, client: string): Promise<DeviceDto> {
    const mac = this.parseMac(rawMac);
    return this.store.exclusive(async () => {
      const device = await this.bindings.commit((tx) => {
        const workerId = this.bindings.unbind(tx, mac);
        tx.audit('device.unbind', { mac, worker_id: workerId, client });
        return tx.devices.get(mac)!;
      }, client);
      return this.view(device);
    });
  }

  batchPreview(dto: BatchBindDto): BatchPreviewDto {
    const pairs = this.pairsOf(dto);
    const store = this.store.read();
    // A read-only "transaction" view: classify exactly as execute would.
    const tx = new Tx(store);
    const out: BatchPreviewDto = {
      matched: [],
      conflicts: [],
      not_found: [],
      summary: { total: pairs.length, ok: 0, conflict: 0, not_found: 0 },
    };
    const seenMacs = new Set<string>();
    const seenWorkers = new Set<string>();
    for (const p of pairs) {
      const v = this.classify(tx, p, seenMacs, seenWorkers);
      if (v.kind === 'matched') out.matched.push(v.item);
      else if (v.kind === 'conflict') out.conflicts.push(v.item);
      else out.not_found.push(v.item);
    }
    out.summary.ok = out.matched.length;
    out.summary.conflict = out.conflicts.length;
    out.summary.not_found = out.not_found.length;
    return out;
  }

  batchBind(dto: BatchBindDto, client: string): Promise<BatchBindResultDto> {
    const pairs = this.pairsOf(dto);
    return this.store.exclusive(async () => {
      return this.bindings.commit((tx) => {
        const out: BatchBindResultDto = { succeeded: [], skipped: [], failed: [] };
        const seenMacs = new Set<string>();
        const seenWorkers = new Set<string>();
        for (const p of pairs) {
          const v = this.classify(tx, p, seenMacs, seenWorkers);
          if (v.kind === 'matched') {
            this.bindings.bind(tx, v.mac, v.worker_id, false);
            out.succeeded.push({ mac: v.mac, worker_id: v.worker_id, fingerprint_mismatch: v.item.fingerprint_mismatch });
          } else if (v.skip) out.skipped.push(v.item);
          else out.failed.push({ mac: v.item.mac, worker_id: v.item.worker_id, error: v.item.reason });
        }
        for (const s of out.succeeded) {
          tx.audit('device.bind', { mac: s.mac, worker_id: s.worker_id, old_worker_id: null, old_device_mac: null, via: 'batch', client });
        }
        tx.audit('device.bind.batch', {
          mode: dto.mode ?? 'manifest',
          total: pairs.length,
          succeeded: out.succeeded.length,
          skipped: out.skipped.length,
          failed: out.failed.length,
          macs: out.succeeded.map((s) => s.mac),
          client,
        });
        return out;
      }, client);
    });
  }

  private pairsOf(dto: BatchBindDto): BatchPairDto[] {
    if ((dto.mode ?? 'manifest') === 'sequential') {
      if (!dto.macs || !dto.worker_ids) throw badRequest('macs and worker_ids are required in sequential mode');
      if (dto.macs.length !== dto.worker_ids.length) {
        throw badRequest(`macs and worker_ids must have the same length (${dto.macs.length} != ${dto.worker_ids.length})`);
      }
      return dto.macs.map((mac, i) => ({ mac, worker_id: dto.worker_ids![i] }));
    }
    if (!dto.pairs) throw badRequest('pairs: required in manifest mode');
    return dto.pairs;
  }

  /**
   * One manifest row against the ledger. Preview buckets: matched / conflicts / not_found;
   * execute maps conflicts to skipped and not_found (+ a missing worker) to failed.
   */
  private classify(tx: Tx, p: BatchPairDto, seenMacs: Set<string>, seenWorkers: Set<string>): PairVerdict {
    const issue = (kind: 'conflict' | 'not_found', reason: string, skip: boolean): PairVerdict => ({
      kind,
      item: { mac: p.mac, worker_id: p.worker_id, reason },
      skip,
    });
    const mac = normalizeMac(p.mac);
    if (!mac) return issue('not_found', `invalid MAC address: ${p.mac}`, false);
    if (!isDeviceMac(mac)) return issue('not_found', `not a device MAC (broadcast, multicast or all-zero): ${mac}`, false);
    const workerId = normalizeId(p.worker_id);
    const d = tx.devices.get(mac);
    if (!d) return issue('not_found', `device not in pool: ${mac}`, false);
    if (d.state === 'revoked') return issue('not_found', `device revoked: ${mac}`, false);
    if (seenMacs.has(mac)) return issue('conflict', `duplicate MAC in manifest: ${mac}`, true);
    seenMacs.add(mac);
    const w = workerId ? tx.workers.get(workerId) : undefined;
    if (!w || !workerId) return issue('conflict', `worker not found: ${p.worker_id}`, false);
    if (d.bound_worker_id === workerId) return issue('conflict', `already bound to ${workerId}`, true);
    if (d.bound_worker_id) return issue('conflict', `device already bound to ${d.bound_worker_id}: ${mac}`, true);
    if (seenWorkers.has(workerId)) return issue('conflict', `duplicate worker in manifest: ${workerId}`, true);
    seenWorkers.add(workerId);
    const other = this.bindings.deviceOf(tx, workerId);
    if (other) return issue('conflict', `worker ${workerId} already bound to device ${other.mac}`, true);
    return {
      kind: 'matched',
      mac,
      worker_id: workerId,
      item: {
        mac,
        worker_id: workerId,
        device_state: d.state,
        worker_state: w.state,
        fingerprint_mismatch: fingerprintMismatch(d, p),
      },
    };
  }

  private newManual(dto: { mac: string; uuid?: string; manufacturer?: string; product?: string; serial?: string }): DeviceRecord {
    const fingerprint = emptyFingerprint();
    const clean = (v?: string) => (v === undefined ? null : cleanReportString(v) || null);
    fingerprint.manufacturer = clean(dto.manufacturer);
    fingerprint.product = clean(dto.product);
    fingerprint.serial = clean(dto.serial);
    return newDevice(dto.mac, { uuid: clean(dto.uuid), fingerprint });
  }

  parseMac(raw: string): string {
    const mac = normalizeMac(raw);
    if (!mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(raw)}`);
    if (!isDeviceMac(mac)) throw badRequest(`mac: ${mac} is not a device MAC (broadcast, multicast and all-zero addresses are refused)`);
    return mac;
  }
}

/** The `pubkey` report parameter (130 hex digits), or null when absent or empty. */
function reportKeyParam(q: ReportQuery): string | null {
  const v = lastValue(q, 'pubkey');
  if (typeof v !== 'string' || v.trim() === '') return null;
  return v.length > 1024 ? v.slice(0, 1024) : v;
}

/** The fingerprint with the reported values over it; `cur` itself (no copy) when they change nothing. */
function mergeFingerprint(cur: Fingerprint, reported: Partial<Fingerprint>): Fingerprint {
  let next: Fingerprint | null = null;
  for (const k in reported) {
    const v = reported[k as keyof Fingerprint];
    if (v !== null && v !== undefined && cur[k as keyof Fingerprint] !== v) {
      next ??= { ...cur };
      // Models and chips repeat across the fleet (a serial does not): the record keeps the pooled string.
      // Either way a copy, not a view of the request's query (ownString).
      (next[k as keyof Fingerprint] as unknown) = typeof v === 'string' ? (k === 'serial' ? ownString(v) : fleetStrings.of(v)) : v;
    }
  }
  return next ?? cur;
}

function fingerprintMismatch(d: DeviceRecord, p: BatchPairDto): FingerprintMismatchDto | null {
  const fields: string[] = [];
  const cmp = (name: string, declared: string | undefined, reported: string | null) => {
    const a = declared?.trim();
    const b = reported?.trim();
    if (a && b && a !== b) fields.push(name);
  };
  cmp('manufacturer', p.manufacturer, d.fingerprint.manufacturer);
  cmp('product', p.product, d.fingerprint.product);
  cmp('serial', p.serial, d.fingerprint.serial);
  cmp('uuid', p.uuid, d.uuid);
  return fields.length ? { fields } : null;
}

/** The n smallest items in order: a full sort only when n is not much smaller than the list. */
function smallest<T>(xs: T[], n: number, cmp: (a: T, b: T) => number): T[] {
  if (xs.length <= n * 4) return xs.sort(cmp).slice(0, n);
  // Keep a sorted window of n; most items are bigger than its last and cost one comparison.
  const out = xs.slice(0, n).sort(cmp);
  for (let i = n; i < xs.length; i++) {
    const x = xs[i];
    if (cmp(x, out[n - 1]) >= 0) continue;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cmp(out[mid], x) <= 0) lo = mid + 1;
      else hi = mid;
    }
    out.splice(lo, 0, x);
    out.pop();
  }
  return out;
}
