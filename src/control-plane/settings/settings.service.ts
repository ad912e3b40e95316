import { Injectable, OnModuleInit } from '@nestjs/common';
import type { TxAudit } from '../audit/audit.service';
import { conflict } from '../../shared/http/api-error';
import { Clock } from '../common/clock';
import { AppConfig } from '../config/app-config';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { AdmissionDto, RefusalReason } from './dto/admission.dto';
import { BootPolicyDto, DEFAULT_BOOT_POLICY, SetBootPolicyDto } from './dto/boot-policy.dto';
import { changedKeys, SettingsFile, SettingsRepository, WindowState } from '../repositories/settings/settings.repository';

export type { SettingsFile, WindowState };

/** The stored boot policy over the defaults. */
const effectivePolicy = (stored: SettingsFile['boot_policy']): BootPolicyDto => Object.freeze({ ...DEFAULT_BOOT_POLICY, ...(stored ?? {}) });

export interface WindowView {
  open: boolean;
  opened_at: string | null;
  expires_at: string | null;
  max_devices: number | null;
  admitted: number;
  remaining: number | null;
}

/** Runtime settings (state/settings.json), which win over the environment's start-up defaults. */
@Injectable()
export class SettingsService implements OnModuleInit {
  private data: SettingsFile = {};
  /** Bumped whenever the settings change: cached boot answers depend on them (BootAnswerCache). */
  revision = 0;

  constructor(
    private readonly config: AppConfig,
    private readonly store: LedgerRepository,
    private readonly clock: Clock,
    private readonly repo: SettingsRepository,
  ) {}

  async onModuleInit(): Promise<void> {
    this.refused.since = this.clock.isoNow();
    // Devices registered by another control plane count against the window's quota.
    this.store.onExternalChange(() => (this.admitted = null));
    this.repo.onChange((doc) => this.adopt(doc));
    this.adopt(await this.repo.load());
  }

  private adopt(doc: SettingsFile): void {
    this.data = doc;
    this.policy = effectivePolicy(doc.boot_policy);
    this.admitted = null;
    this.revision++;
  }

  // ---- registration window (seed 004 section 1) ----

  /** Unknown devices turned away since this process started or the current window opened (this control plane's count). */
  private refused = { since: '', by_reason: { auto_register_off: 0, no_window: 0, no_key: 0, window_full: 0 } as Record<RefusalReason, number> };

  /** /devices/report turned an unknown device away (the audit record is the caller's, rate-limited). */
  noteRefused(reason: RefusalReason): void {
    this.refused.by_reason[reason]++;
  }

  /** How new devices are admitted now: mode, why, the window and what was refused. */
  getAdmission(): AdmissionDto {
    const secure = this.secureRegistration;
    const open = this.windowOpen();
    const mode = secure ? (open ? 'window' : 'closed') : this.autoRegister ? 'open' : 'closed';
    const explanation = secure
      ? open
        ? 'registration window open: new devices are pooled only with a key, until it expires or its quota is used'
        : 'secure registration (a window was opened once, or signature enforcement is on): new devices enter only through a registration window, with a key; auto-register no longer admits keyless devices. Open a window, or add devices by POST /devices or import'
      : this.autoRegister
        ? 'auto-register: any new MAC that reports is pooled (up to IPXE_CP_POOL_LIMIT and the per-address rate)'
        : 'closed: auto-register is off; new devices are added only by POST /devices or import';
    const total = Object.values(this.refused.by_reason).reduce((a, b) => a + b, 0);
    return {
      mode,
      explanation,
      auto_register: this.autoRegister,
      secure_registration: secure,
      window: this.getWindow(),
      refused: { since: this.refused.since, total, by_reason: { ...this.refused.by_reason } },
    };
  }

  /** Devices admitted by the current window: counted from the ledger once, then kept under the lock. */
  private admitted: number | null = null;

  private window(): WindowState | null {
    return this.data.registration_window ?? null;
  }

  /** Open now: not closed, not expired (on the injected clock). */
  windowOpen(): boolean {
    const w = this.window();
    return !!w && !w.closed_at && this.clock.now().getTime() < Date.parse(w.expires_at);
  }

  private admittedCount(): number {
    if (this.admitted === null) {
      const w = this.window();
      let n = 0;
      if (w) {
        const since = Date.parse(w.opened_at);
        for (const d of this.store.devices.values()) {
          if (d.source === 'ipxe' && d.key_hash && d.first_seen && Date.parse(d.first_seen) >= since) n++;
        }
      }
      this.admitted = n;
    }
    return this.admitted;
  }

  getWindow(): WindowView {
    const w = this.window();
    const open = this.windowOpen();
    const admitted = w ? this.admittedCount() : 0;
    return {
      open,
      opened_at: w?.opened_at ?? null,
      expires_at: w?.expires_at ?? null,
      max_devices: w?.max_devices ?? null,
      admitted,
      remaining: w?.max_devices ? Math.max(0, w.max_devices - admitted) : null,
    };
  }

  /** Takes one seat of the open window; call under the ledger lock (the quota is exact). */
  tryAdmit(): boolean {
    if (!this.windowOpen()) return false;
    const w = this.window()!;
    const n = this.admittedCount();
    if (w.max_devices !== null && n >= w.max_devices) return false;
    this.admitted = n + 1;
    return true;
  }

  /** Gives a seat back (the registration that took it was not committed). */
  releaseAdmit(): void {
    if (this.admitted) this.admitted--;
  }

  openWindow(ttlMinutes: number, maxDevices: number | null, client: string): Promise<WindowView> {
    return this.store.exclusive(async () => {
      const now = this.clock.now();
      const replaced = this.windowOpen();
      const w: WindowState = {
        opened_at: this.clock.isoNow(),
        expires_at: new Date(now.getTime() + ttlMinutes * 60_000).toISOString().replace(/\.\d{3}Z$/, '+00:00'),
        max_devices: maxDevices,
        closed_at: null,
      };
      await this.save({ ...this.data, registration_window: w, secure_registration: true }, { op: 'registration_window.open', fields: { ttl_minutes: ttlMinutes, max_devices: maxDevices, expires_at: w.expires_at, replaced, client } });
      this.admitted = 0;
      this.refused = { since: w.opened_at, by_reason: { auto_register_off: 0, no_window: 0, no_key: 0, window_full: 0 } };
      return this.getWindow();
    });
  }

  closeWindow(client: string): Promise<WindowView> {
    return this.store.exclusive(async () => {
      const w = this.window();
      if (w && this.windowOpen()) {
        await this.save({ ...this.data, registration_window: { ...w, closed_at: this.clock.isoNow() } }, { op: 'registration_window.close', fields: { admitted: this.admittedCount(), client } });
      }
      return this.getWindow();
    });
  }

  /**
   * Secure registration: once a window has been opened (or enforcement is on), new devices enter
   * the pool only through a window and with a key; until then auto_register works as in seed 000.
   */
  get secureRegistration(): boolean {
    return this.data.secure_registration === true || this.signatureEnforcement;
  }

  // ---- signature enforcement (seed 004 section 1 / 5) ----

  get signatureEnforcement(): boolean {
    return this.data.signature_enforcement === true;
  }

  /** Bound devices without a key: they could not boot once enforcement is on. */
  keylessBound(): string[] {
    const out: string[] = [];
    for (const d of this.store.read().devices.values()) if (d.state === 'bound' && !d.pubkey) out.push(d.mac);
    return out.sort();
  }

  getEnforcement(): { enabled: boolean; keyless_bound_devices: string[] } {
    return { enabled: this.signatureEnforcement, keyless_bound_devices: this.keylessBound() };
  }

  setEnforcement(enabled: boolean, force: boolean, client: string): Promise<{ enabled: boolean; keyless_bound_devices: string[] }> {
    return this.store.exclusive(async () => {
      const keyless = this.keylessBound();
      if (enabled && keyless.length && !force) {
        throw conflict(`${keyless.length} bound device(s) have no key and could not boot: ${keyless.slice(0, 20).join(', ')}${keyless.length > 20 ? ', ...' : ''}; claim their keys in a registration window or pass force: true`, {
          devices: keyless,
        });
      }
      const previous = this.signatureEnforcement;
      await this.save({ ...this.data, signature_enforcement: enabled }, { op: 'settings.signature_enforcement', fields: { enabled, previous, force, keyless_bound: keyless.length, client } });
      return this.getEnforcement();
    });
  }

  /** Writes the keys this change sets over the stored document (another writer's keys are kept), with its audit entry. */
  private async save(next: SettingsFile, audit?: TxAudit): Promise<void> {
    this.adopt(await this.repo.save(changedKeys(this.data, next), next, audit ? [audit] : []));
  }

  /** The settings as stored (store export). */
  snapshot(): SettingsFile {
    return structuredClone(this.data);
  }

  /** Store import into an empty store: the document as exported. */
  restore(data: SettingsFile): Promise<void> {
    return this.store.exclusive(() => this.save(data));
  }

  // ---- boot policy (issue 25: stuck boots, boot loops) ----

  /** The effective policy: stored values over the defaults (read on every boot: built once per change). */
  get bootPolicy(): BootPolicyDto {
    return this.policy;
  }

  private policy: BootPolicyDto = DEFAULT_BOOT_POLICY;

  setBootPolicy(change: SetBootPolicyDto, client: string): Promise<BootPolicyDto> {
    return this.store.exclusive(async () => {
      const previous = this.bootPolicy;
      const next = { ...(this.data.boot_policy ?? {}) };
      for (const k of ['loop_threshold', 'loop_window_minutes', 'loop_action', 'stuck_after_seconds'] as const) if (change[k] !== undefined) (next as Record<string, unknown>)[k] = change[k];
      const policy = effectivePolicy(next);
      await this.save({ ...this.data, boot_policy: next }, { op: 'settings.boot_policy', fields: { ...policy, previous, client } });
      return { ...this.bootPolicy };
    });
  }

  /** Effective value: settings.json, else IPXE_CP_AUTO_REGISTER. */
  get autoRegister(): boolean {
    return this.data.auto_register ?? this.config.autoRegister;
  }

  getAutoRegister(): { enabled: boolean } {
    return { enabled: this.autoRegister };
  }

  setAutoRegister(enabled: boolean, client: string): Promise<{ enabled: boolean }> {
    return this.store.exclusive(async () => {
      const previous = this.autoRegister;
      await this.save({ ...this.data, auto_register: enabled }, { op: 'settings.auto_register', fields: { enabled, previous, client } });
      return { enabled };
    });
  }
}
