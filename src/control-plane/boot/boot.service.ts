import { Injectable, OnModuleInit } from '@nestjs/common';
import { badRequest } from '../../shared/http/api-error';
import { Clock } from '../common/clock';
import { EventBudget, OncePer, UNAUTHENTICATED_AUDITS_PER_MINUTE } from '../common/once-per';
import { normalizeId, normalizeMac } from '../../shared/mac';
import { ownString } from '../../shared/string-pool';
import { AppConfig } from '../config/app-config';
import { SettingsService } from '../settings/settings.service';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { DiskRecord, targetName, WorkerRecord } from '../repositories/ledger/records';
import { BootSessionsService, StageNote } from '../boots/boot-sessions.service';
import { KeyObject } from 'node:crypto';
import { AuditService } from '../audit/audit.service';
import { parsePubkey, verifyDeviceSignature } from '../common/device-key';
import { ChallengeService, ChallengeUse } from './challenge.service';
import { DiskResetService } from './disk-reset.service';
import { DiskVarsResolver } from './disk-vars';
import { EncodedAnswer } from './encoded-answer';
import { AnswerSlot, CachedAnswer } from './answer-slot';
import { BOOT_BLOCKERS, BootBlockerCode, BootReadinessDto } from './dto/boot-readiness.dto';
import type { BootMenuDto, BootVarsDto } from './dto/boot-vars.dto';
import { checkVars, IpxeVar, REFUSED_SCRIPT, renderBlocked, renderHold, renderIpxe, ScriptRefused } from './ipxe-script';

function checkFormat(format: unknown): void {
  if (format !== 'ipxe' && format !== 'json') throw badRequest(`format: must be ipxe or json, got ${JSON.stringify(format)}`);
}

type Resolved = { kind: 'worker'; worker: WorkerRecord } | { kind: 'pooled' };
type Who = { r: Resolved; mac: string | null };
/** A value, or its promise where a step had to wait (spending a nonce on PostgreSQL). */
type Answer<T> = T | Promise<T>;
/** A rendered answer, what serving it tells the boot sessions, and whether other devices get the very same answer. */
type Rendered<T> = { body: T; note: StageNote | null; shared: boolean };
/** What the boot routes return: a cached answer already encoded, or one rendered for this request alone. */
export type BootAnswer<T> = Answer<T | EncodedAnswer>;
const then = <T, U>(v: Answer<T>, fn: (v: T) => U): Answer<U> => (v instanceof Promise ? v.then(fn) : fn(v));

const EMPTY_SCRIPT = '#!ipxe\n# no per-worker boot vars found\n';
/** The answers of every MAC the ledger does not know: one copy each, never a cache slot per MAC. */
const UNKNOWN = { ipxe: EncodedAnswer.of(EMPTY_SCRIPT, true), json: EncodedAnswer.of({}, true) } as const;
/** identify's answer for a device refused by signature enforcement (audited and recorded there). */
const DENIED = Symbol('denied');
/** The JSON answer of a refused script: its identity tells render() callers not to cache it. */
const REFUSED_JSON: Record<string, never> = Object.freeze({}) as Record<string, never>;

/**
 * Cached answers (slots and entries) kept at most: this many, plus 4 for every device in the
 * ledger (a slot and an answer for its /boot-vars and its /boot-menu), so a whole fleet's storm
 * stays cached at any size (at 100,000 seats a fixed 50,000 emptied the cache every 25,000 seats:
 * every /boot-vars of the storm was rendered again), while crafted variants of known MACs and names
 * can hold no more than the fleet itself would. Unknown MACs take no slot at all.
 */
const ANSWER_CACHE_BASE = 50_000;
const ANSWERS_PER_DEVICE = 4;
/** The ledger keys a cached answer read: a device by MAC, a worker by id, a name workers answer to. */
type DepKind = 'd' | 'w' | 'h';
/** One cached answer a change of a key drops, kept in a slot's Map: its slot and the hostname it is kept under. */
class HostRef {
  constructor(
    readonly slot: AnswerSlot,
    readonly host: string | undefined,
  ) {}
}
/** The answer in a slot's own fields is referred to by the slot itself (AnswerSlot.ownsAnswerOf), any other by a HostRef. */
type DepRef = AnswerSlot | HostRef;
/** A key's answers: the one, or a list from the second on. */
type DepRefs = DepRef | DepRef[];
type AnswerMap = Map<string | undefined, AnswerSlot>;
/**
 * Raw query values that may key a cached answer: absent, or a string no longer than any valid
 * MAC or hostname spelling, so unauthenticated requests with huge values cannot fill memory.
 */
const cacheableRaw = (v: unknown): v is string | undefined => v === undefined || (typeof v === 'string' && v.length <= 255);

/**
 * GET /boot-vars: a read-only projection of the ledger (no writes, no I/O beyond the cached
 * ledger), answered on the hot path of every boot.
 */
@Injectable()
export class BootService implements OnModuleInit {
  constructor(
    private readonly store: LedgerRepository,
    private readonly settings: SettingsService,
    private readonly disks: DiskVarsResolver,
    private readonly config: AppConfig,
    private readonly audit: AuditService,
    private readonly challenges: ChallengeService,
    private readonly clock: Clock,
    private readonly sessions: BootSessionsService,
    private readonly resets: DiskResetService,
  ) {}

  /** Parsed public keys per MAC (the KeyObject is what makes a verification cheap). */
  private readonly keys = new Map<string, { hex: string; key: KeyObject }>();
  /** One audit record of a denial per (mac, reason) per 10 s, not one per request. */
  private readonly denied = new OncePer(10_000);
  private readonly deniedBudget = new EventBudget(UNAUTHENTICATED_AUDITS_PER_MINUTE);

  /** Refusals already audited (worker, variable, value): one audit record per bad value, not per boot. */
  private readonly refused = new OncePer(Infinity);

  /**
   * Rendered answers by (route, format, raw mac, raw hostname). Ledger changes drop exactly the
   * answers that depend on what changed (LedgerRepository.onBootChange: a device's state or binding, a
   * worker, the names workers answer to), so report telemetry, or a registration elsewhere in the
   * fleet, or another control plane's commits, leave the rest of the cache alone; any change of
   * the settings, the agent registry, the cached capabilities or the credentials (rare, and wide)
   * empties it, as does a load, replay or hand edit of the ledger. An answer is never older than
   * the state it was rendered from (bench:boot: rendering was most of the request's own cost).
   * Not used while signature enforcement is on (each answer then depends on a one-time nonce);
   * refusals and errors are never cached.
   * Layout: answers[route][format] -> raw mac -> raw hostname -> answer; deps: by MAC (d), worker
   * id (w) and name (h) -> the slots whose answer read it.
   */
  private readonly answers: Record<ChallengeUse, Record<'ipxe' | 'json', AnswerMap>> = { vars: { ipxe: new Map(), json: new Map() }, menu: { ipxe: new Map(), json: new Map() } };
  private answersRevision = -1;
  private answersSize = 0;
  private readonly deps: Record<DepKind, Map<string, DepRefs>> = { d: new Map(), w: new Map(), h: new Map() };
  private depRefs = 0;
  /** Bumped by a full ledger change (load, replay, hand edit). */
  private ledgerEpoch = 0;
  /** ANSWER_CACHE_BASE (tests lower it to reach the bound with a handful of devices). */
  answerCacheBase = ANSWER_CACHE_BASE;
  /** Answers served from the cache and rendered (GET /metrics). */
  readonly cacheStats = { hits: 0, misses: 0 };

  /** Cache slots and answers held now (one per raw MAC asked for, one per answer). */
  get cachedAnswers(): number {
    return this.answersSize;
  }

  onModuleInit(): void {
    // A hold begins or ends: that device's answers change.
    this.sessions.onHoldChange((mac) => this.drop('d', mac));
    this.store.onBootChange((c) => {
      if (c.full) {
        this.ledgerEpoch++;
        return;
      }
      for (const m of c.macs) this.drop('d', m);
      for (const w of c.workers) this.drop('w', w);
      for (const h of c.hostnames) this.drop('h', h);
    });
  }

  private drop(kind: DepKind, key: string): void {
    // Every answer kept under a MAC spelled as the ledger spells it read that device: those go
    // with their slots (remember lists no 'd' key for them).
    if (kind === 'd') for (const byFormat of Object.values(this.answers)) for (const m of Object.values(byFormat)) this.answersSize -= m.get(key)?.clear() ?? 0;
    const refs = this.deps[kind].get(key);
    if (!refs) return;
    this.deps[kind].delete(key);
    for (const ref of Array.isArray(refs) ? refs : [refs]) {
      this.depRefs--;
      if (ref instanceof AnswerSlot ? ref.deleteOwn() : ref.slot.delete(ref.host)) this.answersSize--;
    }
  }

  private revision(): number {
    this.store.refreshForBoot(); // a hand edit is a full change: it bumps ledgerEpoch
    return this.ledgerEpoch + this.settings.revision + this.disks.revision();
  }

  /**
   * The cached answers of (route, format) by raw MAC, then raw hostname — keyed by the raw query
   * values themselves (nested maps, no key string is built, so no crafted value can make two
   * requests share a slot) — or null when this request must not use the cache. Emptied first when
   * what every answer depends on changed.
   */
  private answerMap(use: ChallengeUse, rawMac: unknown, rawHostname: unknown, format: unknown): AnswerMap | null {
    if ((format !== 'ipxe' && format !== 'json') || !cacheableRaw(rawMac) || !cacheableRaw(rawHostname)) return null;
    if (this.settings.signatureEnforcement) return null;
    const rev = this.revision();
    const max = this.answerCacheBase + ANSWERS_PER_DEVICE * this.store.devices.size;
    if (rev !== this.answersRevision || this.answersSize >= max || this.depRefs >= 4 * max) {
      for (const byFormat of Object.values(this.answers)) for (const m of Object.values(byFormat)) m.clear();
      for (const m of Object.values(this.deps)) m.clear();
      this.shared.clear();
      this.depRefs = 0;
      this.answersRevision = rev;
      this.answersSize = 0;
    }
    return this.answers[use][format];
  }

  /** Answers many devices share (a pooled device's reboot loop), encoded once per cache generation. */
  private readonly shared = new Map<string, EncodedAnswer>();

  private remember<T extends string | object>(byMac: AnswerMap | null, format: unknown, rawMac: unknown, rawHostname: unknown, out: Answer<Rendered<T>>): BootAnswer<T> {
    this.cacheStats.misses++;
    // A promise only comes from signature enforcement, whose answers are never cached.
    if (out instanceof Promise) return out.then((x) => x.body);
    const { body, note, shared } = out;
    if (byMac === null || body === REFUSED_SCRIPT || body === REFUSED_JSON) return body;
    const empty = body === EMPTY_SCRIPT || (typeof body === 'object' && Object.keys(body).length === 0);
    const keys = this.dependencies(rawMac, rawHostname);
    // Nothing here the ledger knows (any MAC, any name): the one shared empty answer, and no slot,
    // so a flood of made-up MACs costs no memory. A registration makes the next request a miss.
    if (keys === null) return empty ? UNKNOWN[format as 'ipxe' | 'json'] : body;
    let enc: EncodedAnswer;
    if (empty) enc = UNKNOWN[format as 'ipxe' | 'json'];
    else if (shared) {
      const text = typeof body === 'string' ? body : JSON.stringify(body);
      enc = this.shared.get(text) ?? EncodedAnswer.of(body, true);
      this.shared.set(text, enc);
    } else enc = EncodedAnswer.of(body);
    let slot = byMac.get(rawMac as string | undefined);
    // Keys outlive the request: the ledger's own strings where the query spells them so (iPXE
    // does), else copies, never views of its query (ownString).
    if (!slot) {
      byMac.set(typeof rawMac === 'string' ? (rawMac === keys.mac ? keys.mac : ownString(rawMac)) : undefined, (slot = new AnswerSlot()));
      this.answersSize++;
    }
    const host = typeof rawHostname === 'string' ? (rawHostname === keys.host ? keys.host : ownString(rawHostname)) : undefined;
    // A boot of this MAC restores reset-mode disks first: a hit must still go through DiskResetService.
    const mac = format === 'ipxe' && typeof rawMac === 'string' ? normalizeMac(rawMac) : null;
    slot.set(host, enc, note, mac !== null && this.resets.restoresOnBoot(mac));
    this.answersSize++;
    // One reference shared by every key: the slot itself for the answer in its own fields (nearly
    // all), else a HostRef. A key with one answer holds the reference itself, a list from the
    // second on (a list of one was ~56 bytes a key, three keys an answer, at 100,000 seats).
    const ref = slot.ownsAnswerOf(host) ? slot : new HostRef(slot, host);
    // A slot keyed by the device's own MAC string is dropped whole with that device (drop): no 'd'
    // key for its answers (one map entry less a seat; iPXE spells the MAC as the ledger does).
    const bySlot = typeof rawMac === 'string' && rawMac === keys.mac;
    for (let i = 0; i < keys.list.length; i += 2) {
      if (bySlot && keys.list[i] === 'd') continue;
      const deps = this.deps[keys.list[i] as DepKind];
      const key = keys.list[i + 1];
      const refs = deps.get(key);
      if (refs === undefined) deps.set(key, ref);
      else if (Array.isArray(refs)) refs.push(ref);
      else deps.set(key, [refs, ref]);
      this.depRefs++;
    }
    return enc;
  }

  /**
   * What an answer for these raw values read from the ledger (see resolve), as kind, key, kind,
   * key...; null when the ledger knows neither the MAC nor the name. Keys are the ledger records'
   * own strings where there is one (they outlive the request), else copies; `mac` and `host`: the
   * record's MAC and the worker's hostname, for the cache to key its slot by when the query spells
   * them the same.
   */
  private dependencies(rawMac: unknown, rawHostname: unknown): { list: string[]; mac?: string; host?: string } | null {
    const list: string[] = [];
    const store = this.store.read();
    let known = false;
    let ownMac: string | undefined;
    let ownHost: string | undefined;
    const mac = typeof rawMac === 'string' ? normalizeMac(rawMac) : null;
    let bound: string | null | undefined;
    if (mac) {
      const d = store.devices.get(mac);
      if (d) known = true;
      ownMac = d?.mac;
      list.push('d', ownMac ?? ownString(mac));
      bound = d?.bound_worker_id;
      if (bound) list.push('w', bound);
    }
    const host = typeof rawHostname === 'string' ? normalizeId(rawHostname) : null;
    if (host) {
      const byId = store.workers.has(host);
      const id = byId ? host : store.workerIdByHostname().get(host);
      const w = id === undefined ? undefined : store.workers.get(id);
      ownHost = w?.hostname === host ? w.hostname : w?.worker_id === host ? w.worker_id : undefined;
      // A worker's id names that worker for as long as it exists (resolve looks ids up first), and
      // its 'w' key (listed below) drops the answer when it changes or goes: no 'h' key then (one
      // less map entry a seat whose iPXE sends its worker id as the hostname).
      if (!byId) list.push('h', ownHost ?? ownString(host));
      if (w) {
        known = true;
        // Usually the device's own worker, already listed: a key once (drop deletes it once).
        if (w.worker_id !== bound) list.push('w', w.worker_id);
      }
    }
    return known ? { list, mac: ownMac, host: ownHost } : null;
  }

  /** GET /devices/challenge: a one-time nonce as an iPXE script (`set nonce <64 hex>`) or JSON. */
  challenge(rawMac: unknown, format: unknown = 'ipxe'): string | { nonce: string; expires_at: string } {
    checkFormat(format);
    const mac = typeof rawMac === 'string' ? normalizeMac(rawMac) : null;
    if (!mac) throw badRequest(`mac: required, a MAC address (got ${JSON.stringify(rawMac ?? null)})`);
    const c = this.challenges.issue(mac);
    if (format === 'json') return c;
    // iPXE asks in the ipxe form: a stage of a known device's boot.
    const d = this.store.read().devices.get(mac);
    if (d) this.sessions.seen({ mac, stage: 'challenge', ...(d.bound_worker_id ? { worker: d.bound_worker_id } : {}) });
    return renderIpxe('challenge: sign nonce || mac with the device key', [{ name: 'nonce', grammar: 'hex64', value: c.nonce }]);
  }

  /** The iPXE script (a string) or, with format=json, the variables (an object). */
  bootVars(rawMac?: unknown, rawHostname?: unknown, format: unknown = 'ipxe', nonce?: unknown, sig?: unknown): BootAnswer<string | BootVarsDto> {
    // A boot (iPXE asks in the ipxe form; tools ask JSON) of a worker with reset-mode disks waits
    // for their restore before the answer; a restore that failed refuses the boot.
    // The common boot first: a cached answer of a worker without reset-mode disks (the cache
    // entry knows; it is dropped with the device's or the worker's records).
    const hit = this.answerMap('vars', rawMac, rawHostname, format)?.get(rawMac as string | undefined)?.get(rawHostname as string | undefined);
    if (hit !== undefined && !hit.restores) return this.serve(hit);
    const mac = format === 'ipxe' && typeof rawMac === 'string' ? normalizeMac(rawMac) : null;
    const reset = mac ? this.resets.ensure(mac) : null;
    if (reset) {
      return reset.then((o) => (o.ok ? this.answer('vars', rawMac, rawHostname, format, nonce, sig, (who) => this.varsFor(who, format)) : this.resetRefused(mac!, o.reason)));
    }
    return this.answer('vars', rawMac, rawHostname, format, nonce, sig, (who) => this.varsFor(who, format));
  }

  /** The empty script for a boot whose reset-mode disks could not be restored, recorded on its session with why. */
  private resetRefused(mac: string, reason: string): string {
    const worker = this.store.read().devices.get(mac)?.bound_worker_id ?? undefined;
    this.sessions.seen({ mac, stage: 'vars', ...(worker ? { worker } : {}), detail: { answer: 'empty', reason } });
    return EMPTY_SCRIPT;
  }

  /** The cached answer of (route, format, mac, hostname), or the one rendered now (and cached when it may be). */
  private answer<T extends string | object>(use: ChallengeUse, rawMac: unknown, rawHostname: unknown, format: unknown, nonce: unknown, sig: unknown, render: (who: Who | null) => T): BootAnswer<T> {
    const byMac = this.answerMap(use, rawMac, rawHostname, format);
    const hit = byMac?.get(rawMac as string | undefined)?.get(rawHostname as string | undefined);
    if (hit !== undefined) return this.serve(hit);
    return this.remember(
      byMac,
      format,
      rawMac,
      rawHostname,
      then(this.identify(use, rawMac, rawHostname, format, nonce, sig), (found) => {
        this.note = null;
        this.sharedRender = false;
        const who = found === DENIED ? null : found;
        const body = render(who);
        const shared = this.sharedRender;
        // A known device the lookup did not match (a pooled one under a worker's hostname, a
        // revoked one): its boot is recorded too. A denial was recorded where it was decided.
        if (found === null) this.noteUnmatched(use, rawMac);
        // Only iPXE asks for the ipxe form: JSON answers go to tools (CLI, UI, scripts), which are no boot.
        const note = format === 'ipxe' ? this.note : null;
        this.note = null;
        if (note) this.sessions.seen(note);
        return { body, note, shared };
      }),
    );
  }

  private serve(hit: CachedAnswer): EncodedAnswer {
    this.cacheStats.hits++;
    // Read first: hit may be its slot, and what seen() tells listeners may drop the device's answers.
    const body = hit.body;
    if (hit.note) this.sessions.seen(hit.note);
    return body;
  }

  /** Set by a render whose answer does not depend on which device asked (a pooled device's). */
  private sharedRender = false;

  /** What the render in progress saw (set by varsFor and menuFor; synchronous, read right after). */
  private note: StageNote | null = null;

  private noteUnmatched(use: ChallengeUse, rawMac: unknown): void {
    const mac = typeof rawMac === 'string' ? normalizeMac(rawMac) : null;
    const d = mac ? this.store.read().devices.get(mac) : undefined;
    if (!mac || !d) return;
    const worker = d.state === 'bound' && d.bound_worker_id ? { worker: d.bound_worker_id } : {};
    // A note may be cached with its answer: it keeps the record's MAC string (the ledger's key), not the query's.
    if (use === 'menu') this.note = Object.freeze({ mac: d.mac, stage: 'menu', ...worker });
    else if (d.state === 'pooled') this.note = Object.freeze({ mac: d.mac, stage: 'vars', detail: { answer: 'pooled' } });
    else {
      const reason = d.state === 'revoked' ? 'the device is revoked' : 'the hostname it sent names another worker than the one it is bound to';
      this.note = Object.freeze({ mac: d.mac, stage: 'vars', ...worker, detail: { answer: 'empty', reason } });
    }
  }

  /** A stage of a device the ledger knows (boot sessions are kept for known devices only). */
  private noteFor(mac: string | null, r: Resolved, stage: 'vars' | 'menu', detail?: Record<string, string>): void {
    const d = mac ? this.store.read().devices.get(mac) : undefined;
    if (!d) return;
    // Cached with its answer: the record's MAC string (the ledger's key), not a view of the query.
    this.note = Object.freeze({ mac: d.mac, stage, ...(r.kind === 'worker' ? { worker: r.worker.worker_id } : {}), ...(detail ? { detail } : {}) });
  }

  private varsFor(who: Who | null, format: unknown): string | BootVarsDto {
    if (!who) return format === 'json' ? {} : EMPTY_SCRIPT;
    const { r, mac } = who;
    if (r.kind === 'worker' && mac && this.sessions.held(mac)) {
      // A looping device: the hold script (JSON: nothing), until an operator releases it.
      this.noteFor(mac, r, 'vars', { answer: 'held', reason: this.sessions.looping(mac)?.reason ?? 'boot loop' });
      return format === 'json' ? {} : renderHold(mac, this.sessions.looping(mac)?.reason ?? 'boot loop');
    }
    const plan = r.kind === 'worker' ? this.workerPlan(r.worker) : null;
    let vars = plan ? plan.vars : this.rebootLoop();
    // A default disk that cannot be connected now: no variable (never another transport), and in the
    // script the reason on the console. The caller already passed resolve (its signature when
    // enforcement is on); the reason is an operational state, less than the secrets it would get.
    if (!vars) {
      this.noteFor(mac, r, 'vars', { answer: 'empty', reason: plan?.blocker ? BOOT_BLOCKERS[plan.blocker] : 'nothing to boot' });
      if (format === 'json') return {};
      return plan?.blocker ? renderBlocked(BOOT_BLOCKERS[plan.blocker]) : EMPTY_SCRIPT;
    }
    // The TLS PSK and DH-HMAC-CHAP secrets go only to the MAC bound to the worker (checked by resolve), never to a
    // hostname alone: hostnames are guessable. NVMe/TCP is refused like a disk that cannot be connected; iSCSI
    // keeps the reference's answer (seed 000 serves a hostname) without the CHAP pair, which the target then asks for.
    if (vars.tls_psk && !mac) {
      this.auditDenial(null, r.kind === 'worker' ? r.worker.worker_id : null, 'secret-bearing boot vars need the bound mac');
      return format === 'json' ? {} : EMPTY_SCRIPT;
    }
    if (vars.iscsi_password && !mac) {
      const { iscsi_username: _u, iscsi_password: _p, ...withoutChap } = vars;
      vars = withoutChap;
    }
    if (r.kind === 'pooled') this.noteFor(mac, r, 'vars', { answer: 'pooled' });
    else if (vars.menu_default === 'reboot') this.noteFor(mac, r, 'vars', { answer: 'reboot', reason: `${r.kind === 'worker' && r.worker.disks.length ? 'no default disk' : 'the worker has no disk'} (answered menu-default reboot)` });
    else if (plan?.disk && vars.menu_default === this.disks.itemId(plan.disk)) {
      this.noteFor(mac, r, 'vars', { answer: 'disk', disk: targetName(plan.disk), transport: plan.disk.transport ?? 'iscsi', agent: plan.disk.agent });
    } else this.noteFor(mac, r, 'vars', { answer: 'item', item: String(vars.menu_default) });
    const list: IpxeVar[] = [];
    if (vars.base_iqn) list.push({ name: 'base-iqn', grammar: 'target-base', value: vars.base_iqn });
    if (vars.iscsi_server) list.push({ name: 'iscsi-server', grammar: 'address', value: vars.iscsi_server });
    if (vars.iscsi_sep) list.push({ name: 'iscsi-sep', grammar: 'iscsi-sep', value: vars.iscsi_sep });
    // iPXE's own setting names: its iSCSI initiator answers the target's CHAP challenge with them.
    if (vars.iscsi_username) list.push({ name: 'username', grammar: 'chap-userid', value: vars.iscsi_username });
    if (vars.iscsi_password) list.push({ name: 'password', grammar: 'chap-secret', value: vars.iscsi_password });
    if (vars.disk_nqn) {
      list.push({ name: 'disk-nqn', grammar: 'nqn', value: vars.disk_nqn });
      list.push({ name: 'storager-ip', grammar: 'address', value: vars.storager_ip! });
      list.push({ name: 'nvme-port', grammar: 'number', value: vars.nvme_port! });
      list.push({ name: 'hostnqn', grammar: 'nqn', value: vars.hostnqn! });
      list.push({ name: 'tls-psk', grammar: 'tls-psk', value: vars.tls_psk! });
      list.push({ name: 'dhchap-secret', grammar: 'dhchap-secret', value: vars.dhchap_secret! });
      list.push({ name: 'dhchap-ctrl-secret', grammar: 'dhchap-secret', value: vars.dhchap_ctrl_secret! });
    }
    list.push({ name: 'menu-default', grammar: 'menu-name', value: vars.menu_default ?? '' });
    list.push({ name: 'menu-timeout', grammar: 'number', value: vars.menu_timeout ?? '' });
    // A pooled device's answer names no device: every pooled MAC shares one encoded copy.
    if (r.kind === 'pooled') this.sharedRender = true;
    const label = r.kind === 'worker' ? r.worker.hostname : 'a pooled device (waiting to be bound to a worker)';
    return this.render(format, `boot vars for ${label}`, list, vars, mac, r);
  }

  /**
   * GET /boot-menu: the items of the worker's boot menu (one per disk it can boot now, named from
   * the disk records) as `set menu-<i>-id|label|root` lines plus `menu-count`, and the install
   * CD's root path. Same identification and enforcement as /boot-vars (a signed nonce may be used
   * once here and once there).
   */
  bootMenu(rawMac?: unknown, rawHostname?: unknown, format: unknown = 'ipxe', nonce?: unknown, sig?: unknown): BootAnswer<string | BootMenuDto> {
    return this.answer('menu', rawMac, rawHostname, format, nonce, sig, (who) => this.menuFor(who, format));
  }

  private menuFor(who: Who | null, format: unknown): string | BootMenuDto {
    if (!who || who.r.kind !== 'worker') return format === 'json' ? {} : EMPTY_SCRIPT;
    const w = who.r.worker;
    const menu = this.disks.menu(w);
    const list: IpxeVar[] = [{ name: 'menu-count', grammar: 'number', value: menu.items.length }];
    menu.items.forEach((it, i) => {
      list.push({ name: `menu-${i}-id`, grammar: 'menu-name', value: it.id });
      list.push({ name: `menu-${i}-label`, grammar: 'menu-label', value: it.label });
      list.push({ name: `menu-${i}-root`, grammar: 'root-path', value: it.root });
    });
    if (menu.install_root) list.push({ name: 'install-root', grammar: 'root-path', value: menu.install_root });
    const dto: BootMenuDto = { items: menu.items, ...(menu.install_root ? { install_root: menu.install_root } : {}) };
    this.noteFor(who.mac, who.r, 'menu');
    return this.render(format, `boot menu for ${w.hostname}`, list, dto, who.mac, who.r);
  }

  /** Format check, MAC and hostname parsing, lookup and (when on) signature enforcement. */
  private identify(use: ChallengeUse, rawMac: unknown, rawHostname: unknown, format: unknown, nonce: unknown, sig: unknown): Answer<Who | null | typeof DENIED> {
    checkFormat(format);
    let mac: string | null = null;
    if (typeof rawMac === 'string' && rawMac.trim() !== '') {
      mac = normalizeMac(rawMac);
      if (!mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(rawMac)}`);
    } else if (rawMac !== undefined && typeof rawMac !== 'string') {
      throw badRequest('mac: must be given once');
    }
    const hostname = typeof rawHostname === 'string' ? normalizeId(rawHostname) : null;
    const r = this.resolve(mac, hostname);
    if (r.kind === 'none') return null;
    if (!this.settings.signatureEnforcement) return { r, mac };
    const denied = (reason: string | null): Who | typeof DENIED => {
      if (!reason) return { r, mac };
      this.auditDenial(mac, r.kind === 'worker' ? r.worker.worker_id : null, reason);
      if (use === 'vars' && format === 'ipxe' && mac && this.store.read().devices.has(mac)) this.sessions.seen({ mac, stage: 'vars', ...(r.kind === 'worker' ? { worker: r.worker.worker_id } : {}), detail: { answer: 'denied', reason } });
      return DENIED;
    };
    return then(this.verify(use, r, mac, nonce, sig), denied);
  }

  /** The one place a boot answer is produced: every value under its grammar, or the refused script. */
  private render<T extends object>(format: unknown, comment: string, list: IpxeVar[], json: T, mac: string | null, r: Resolved): string | T | Record<string, never> {
    try {
      if (format === 'json') {
        checkVars(list);
        return json;
      }
      return renderIpxe(comment, list);
    } catch (e) {
      if (!(e instanceof ScriptRefused)) throw e;
      this.auditRefusal(e, mac, r.kind === 'worker' ? r.worker.worker_id : null);
      this.noteFor(mac, r, comment.startsWith('boot menu') ? 'menu' : 'vars', { answer: 'refused', reason: `${e.variable} failed its grammar` });
      return format === 'json' ? REFUSED_JSON : REFUSED_SCRIPT;
    }
  }

  /**
   * Enforcement: per-worker variables only for a bound device whose signature over an unexpired
   * nonce sealed for its MAC verifies against its stored key, the nonce then spent for this use
   * (once, on any control plane). Spent only after the signature verified, so a forged request
   * cannot use up a device's nonce. Returns the reason for a denial.
   */
  private verify(use: ChallengeUse, r: Resolved, mac: string | null, nonce: unknown, sig: unknown): Answer<string | null> {
    if (r.kind !== 'worker' || !mac) return 'not a bound device';
    const d = this.store.read().devices.get(mac);
    if (!d || d.state !== 'bound' || d.bound_worker_id !== r.worker.worker_id) return 'not a bound device';
    if (!d.pubkey) return 'no key';
    if (typeof nonce !== 'string' || !nonce) return 'no nonce';
    const c = this.challenges.check(mac, nonce.toLowerCase());
    if (!c.ok) return c.reason;
    let k = this.keys.get(mac);
    if (!k || k.hex !== d.pubkey) {
      const p = parsePubkey(d.pubkey);
      if (!p.ok) return 'no key';
      k = { hex: p.hex, key: p.key };
      if (this.keys.size >= 100_000) this.keys.clear();
      this.keys.set(mac, k);
    }
    if (typeof sig !== 'string' || !verifyDeviceSignature(k.key, c.nonce, mac, sig.toLowerCase())) return 'bad signature';
    return then(this.challenges.spend(c, use), (claim) => (claim === 'claimed' ? null : 'replayed'));
  }

  private auditDenial(mac: string | null, workerId: string | null, reason: string): void {
    const now = this.clock.now().getTime();
    if (!this.denied.allow(`${mac}\0${reason}`, now)) return;
    const pass = this.deniedBudget.take(now);
    if (!pass) return;
    this.audit.record('boot.denied', { status: 'failed', mac, worker_id: workerId, reason, ...(pass.dropped ? { dropped: pass.dropped } : {}), client: 'boot-vars' }).catch(() => undefined);
  }

  private auditRefusal(e: ScriptRefused, mac: string | null, workerId: string | null): void {
    if (!this.refused.allow(`${workerId}\0${e.variable}\0${e.value}`, 0)) return;
    // The value itself is hostile by definition: only its JSON-escaped form is recorded.
    this.audit
      .record('boot.refused', { status: 'failed', mac, worker_id: workerId, variable: e.variable, value: JSON.stringify(e.value).slice(0, 300), client: 'boot-vars' })
      .catch(() => undefined);
  }

  /**
   * hostname -> worker (hostname or worker_id); else mac -> device -> bound worker. With a mac,
   * the device must be bound to the worker the hostname names (anti-spoofing).
   */
  private resolve(mac: string | null, hostname: string | null): Resolved | { kind: 'none' } {
    const store = this.store.read();
    const device = mac ? store.devices.get(mac) : undefined;
    if (hostname) {
      const id = store.workers.has(hostname) ? hostname : store.workerIdByHostname().get(hostname);
      const worker = id ? store.workers.get(id) : undefined;
      if (worker) {
        if (!mac) return { kind: 'worker', worker };
        if (device?.state === 'bound' && device.bound_worker_id === worker.worker_id) return { kind: 'worker', worker };
        return { kind: 'none' };
      }
    }
    if (!mac) return { kind: 'none' };
    if (device?.state === 'bound' && device.bound_worker_id) {
      const worker = store.workers.get(device.bound_worker_id);
      return worker ? { kind: 'worker', worker } : { kind: 'none' };
    }
    if (device?.state === 'pooled') return { kind: 'pooled' };
    // Unknown MAC: /boot-vars never writes; with auto-register on, the reboot loop sends the
    // device back through /devices/report, which pools it.
    if (!device && this.settings.autoRegister) return { kind: 'pooled' };
    return { kind: 'none' };
  }

  /**
   * Seed 000 for iSCSI (base_iqn, iscsi_server, iscsi_sep of the default disk, else of the first
   * one; with iSCSI disks on LIO or stgt the worker's CHAP user name and secret), seed 004 for an NVMe/TCP default disk (disk_nqn, storager_ip, nvme_port, hostnqn,
   * tls_psk, and the DH-HMAC-CHAP secrets both directions need; no iSCSI variable). vars null: the
   * NVMe default disk cannot be connected now (the empty script), and blocker says why.
   */
  private workerPlan(w: WorkerRecord): ({ vars: BootVarsDto; blocker: null } | { vars: null; blocker: BootBlockerCode }) & { disk: DiskRecord | undefined } {
    const d = this.disks.defaultDisk(w);
    const out: BootVarsDto = {} as BootVarsDto;
    if (d?.disk.transport === 'nvme-tcp') {
      const nv = this.disks.nvmeOrBlocker(w, d.disk);
      if (typeof nv === 'string') return { vars: null, blocker: nv, disk: d.disk };
      Object.assign(out, nv);
    } else if (d) {
      Object.assign(out, this.disks.iscsi(d.disk));
      const chap = this.disks.iscsiChap(w);
      // A revoked credential locks the worker's iSCSI targets: no script that would try them.
      if (chap === null && this.disks.hasInitiatorAcl(d.disk)) return { vars: null, blocker: 'credential-revoked', disk: d.disk };
      if (chap) Object.assign(out, { iscsi_username: chap.userid, iscsi_password: chap.secret });
    }
    const menuDefault = d?.explicit ? this.disks.itemId(d.disk) : w.boot.menu_default ? this.menuIdFor(w, w.boot.menu_default) : null;
    if (!menuDefault) {
      // The reboot loop boots nothing: no secret goes with it.
      const { iscsi_username: _u, iscsi_password: _p, ...rest } = out;
      return { vars: { ...rest, ...this.rebootLoop() }, blocker: null, disk: d?.disk };
    }
    out.menu_default = menuDefault;
    out.menu_timeout = w.boot.menu_timeout ?? this.config.bootMenuTimeoutMs;
    return { vars: out, blocker: null, disk: d?.disk };
  }

  /**
   * Whether the worker's machine boots its disk now, judged by the code that answers its
   * /boot-vars (workerPlan) plus what that answer cannot see: the bound device, the disk's agent
   * as last probed, and the device key signature enforcement needs.
   */
  readiness(w: WorkerRecord, mac: string | null): BootReadinessDto {
    const codes: BootBlockerCode[] = [];
    if (!mac) codes.push('no-bound-device');
    if (!w.disks.length) codes.push('no-disk');
    else {
      const plan = this.workerPlan(w);
      if (plan.vars === null) codes.push(plan.blocker);
      else if (plan.vars.menu_default === 'reboot') codes.push('no-default-disk');
      else if (!w.disks.some((d) => this.disks.itemId(d) === plan.vars.menu_default)) codes.push('default-not-a-disk');
      const agent = plan.disk && plan.vars?.menu_default !== 'reboot' ? this.disks.agentBlocker(plan.disk) : null;
      if (agent && !codes.includes(agent)) codes.push(agent);
    }
    if (mac && this.settings.signatureEnforcement && !this.store.read().devices.get(mac)?.pubkey) codes.push('no-device-key');
    if (mac && this.sessions.held(mac)) codes.push('boot-loop-hold');
    return { bootable: codes.length === 0, reasons: codes.map((code) => ({ code, message: BOOT_BLOCKERS[code] })) };
  }

  /** boot.menu_default may name an os: the item of that os's disk (which has its own id with an os_version). */
  private menuIdFor(w: WorkerRecord, name: string): string {
    const d = w.disks.find((x) => x.os === name);
    return d ? this.disks.itemId(d) : name;
  }

  private rebootLoop(): BootVarsDto {
    return { menu_default: 'reboot', menu_timeout: this.config.autoBootTimeoutMs };
  }
}
