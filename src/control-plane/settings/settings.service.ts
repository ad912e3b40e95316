import { Injectable, Logger, OnModuleInit, Optional } from '@nestjs/common';
import { Database, LOCK } from '../repositories/pg/database';
import * as path from 'node:path';
import { AuditService } from '../audit/audit.service';
import { ApiError, conflict } from '../../shared/http/api-error';
import { Clock } from '../common/clock';
import { AppConfig } from '../config/app-config';
import { FileChangedError, FileSystem, sameStamp, type FileStamp } from '../../shared/files/file-system';
import { LedgerFileError } from '../../shared/files/ledger-map';
import { LedgerStore } from '../repositories/ledger.store';
import { StoreSync } from '../repositories/store-sync';

/** A registration window as settings.json keeps it (it survives restarts and closes on time). */
export interface WindowState {
  opened_at: string;
  expires_at: string;
  max_devices: number | null;
  closed_at: string | null;
}

export interface SettingsFile {
  auto_register?: boolean;
  registration_window?: WindowState | null;
  /** Set when the first window opens: from then on new devices enter the pool only through a window. */
  secure_registration?: boolean;
  signature_enforcement?: boolean;
}

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
  private readonly log = new Logger('Settings');
  readonly file: string;
  private data: SettingsFile = {};
  /** Bumped whenever the settings change: cached boot answers depend on them (BootAnswerCache). */
  revision = 0;

  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
    private readonly store: LedgerStore,
    private readonly audit: AuditService,
    private readonly clock: Clock,
    @Optional() private readonly db?: Database,
    @Optional() private readonly sync?: StoreSync,
  ) {
    this.file = path.join(config.stateDir, 'settings.json');
  }

  async onModuleInit(): Promise<void> {
    // Devices registered by another control plane count against the window's quota.
    this.store.onExternalChange(() => (this.admitted = null));
    if (this.db?.enabled) {
      await this.db.init();
      await this.db.listen('kurrent_documents', (name) => {
        if (name === '' || name === 'settings') void this.loadPg().catch(() => undefined);
      });
      await this.loadPg();
      this.sync?.register('settings', { appliedVersion: () => this.pgVersion, refresh: () => this.loadPg() });
      return;
    }
    const text = this.fs.readTextSync(this.file);
    this.stamp = this.fs.statSync(this.file);
    this.data = this.parseFile(text);
    this.revision++;
  }

  /** settings.json as last read or written by this process (a different stamp: a hand edit). */
  private stamp: FileStamp | null = null;

  /** Validates settings.json's text (null or blank: no settings); a bad one is a LedgerFileError naming file and line. */
  private parseFile(text: string | null): SettingsFile {
    if (text === null || text.trim() === '') return {};
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new LedgerFileError(this.file, jsonErrorLine(text), `invalid JSON: ${(e as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new LedgerFileError(this.file, 1, 'expected a JSON object');
    }
    const o = parsed as Record<string, unknown>;
    for (const k of ['auto_register', 'secure_registration', 'signature_enforcement']) {
      if (o[k] !== undefined && typeof o[k] !== 'boolean') throw new LedgerFileError(this.file, 1, `${k} must be true or false`);
    }
    const w = o.registration_window as Record<string, unknown> | null | undefined;
    if (w !== undefined && w !== null) {
      const iso = (v: unknown) => typeof v === 'string' && !Number.isNaN(Date.parse(v));
      if (typeof w !== 'object' || !iso(w.opened_at) || !iso(w.expires_at) || !(w.closed_at === null || w.closed_at === undefined || iso(w.closed_at))) {
        throw new LedgerFileError(this.file, 1, 'registration_window must have ISO opened_at, expires_at and closed_at (or null)');
      }
      if (!(w.max_devices === null || w.max_devices === undefined || (Number.isInteger(w.max_devices) && (w.max_devices as number) >= 1))) {
        throw new LedgerFileError(this.file, 1, 'registration_window.max_devices must be a positive integer or null');
      }
    }
    return parsed as SettingsFile;
  }

  // ---- registration window (seed 004 section 1) ----

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
      await this.save({ ...this.data, registration_window: w, secure_registration: true });
      this.admitted = 0;
      await this.audit.record('registration_window.open', { ttl_minutes: ttlMinutes, max_devices: maxDevices, expires_at: w.expires_at, replaced, client });
      return this.getWindow();
    });
  }

  closeWindow(client: string): Promise<WindowView> {
    return this.store.exclusive(async () => {
      const w = this.window();
      if (w && this.windowOpen()) {
        await this.save({ ...this.data, registration_window: { ...w, closed_at: this.clock.isoNow() } });
        await this.audit.record('registration_window.close', { admitted: this.admittedCount(), client });
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
      await this.save({ ...this.data, signature_enforcement: enabled });
      await this.audit.record('settings.signature_enforcement', { enabled, previous, force, keyless_bound: keyless.length, client });
      return this.getEnforcement();
    });
  }

  /**
   * Files: writes the keys this change sets over settings.json as it is now. A hand edit made
   * since this process last read or wrote it is kept (merged: the change's own keys win) and
   * becomes the settings in memory; a broken edit refuses the change naming file and line,
   * nothing written; an edit that lands while the file is written is merged and written again.
   */
  private async save(next: SettingsFile): Promise<void> {
    if (this.db?.enabled) return this.savePg(next);
    const changed = (Object.keys({ ...this.data, ...next }) as (keyof SettingsFile)[]).filter((k) => JSON.stringify(next[k]) !== JSON.stringify(this.data[k]));
    for (let attempt = 1; ; attempt++) {
      const st = this.fs.statSync(this.file);
      let base = this.data;
      if (!sameStamp(st, this.stamp)) {
        try {
          base = this.parseFile(this.fs.readTextSync(this.file));
        } catch (e) {
          if (e instanceof LedgerFileError) throw new ApiError(500, `${e.message}; fix the hand edit, nothing was changed`);
          throw e;
        }
        this.log.warn(`picked up a hand edit of ${this.file}; merged with this change`);
      }
      const out = { ...base } as Record<string, unknown>;
      for (const k of changed) {
        if (next[k] === undefined) delete out[k];
        else out[k] = next[k];
      }
      try {
        await this.fs.writeAtomic(this.file, JSON.stringify(out, null, 2) + '\n', 0o644, { unchangedSince: st });
      } catch (e) {
        if (e instanceof FileChangedError && attempt < 3) continue;
        throw e; // the exception filter names the file and the storage status
      }
      this.stamp = this.fs.statSync(this.file);
      this.data = out as SettingsFile;
      this.admitted = null;
      this.revision++;
      return;
    }
  }

  /** PostgreSQL: the settings document (documents.name = 'settings'), reloaded on NOTIFY. */
  private pgVersion = 0;

  private async loadPg(): Promise<void> {
    const r = await this.db!.query<{ body: SettingsFile; version: string }>('SELECT body, version FROM documents WHERE name = $1', ['settings']);
    const next = r.rows[0]?.body ?? {};
    this.pgVersion = Math.max(this.pgVersion, Number(r.rows[0]?.version ?? 0));
    if (JSON.stringify(next) === JSON.stringify(this.data)) return;
    this.data = next;
    this.admitted = null;
    this.revision++;
  }

  /**
   * Writes the keys this change sets over the current document (under a lock), so two control
   * planes changing different settings at once both keep their change.
   */
  private async savePg(next: SettingsFile): Promise<void> {
    const changed = (Object.keys({ ...this.data, ...next }) as (keyof SettingsFile)[]).filter((k) => JSON.stringify(next[k]) !== JSON.stringify(this.data[k]));
    const merged = await this.db!.tx(async (c) => {
      const cur = ((await c.query('SELECT body FROM documents WHERE name = $1', ['settings'])).rows[0]?.body ?? {}) as SettingsFile;
      const out = { ...cur } as Record<string, unknown>;
      for (const k of changed) out[k] = next[k];
      const v = await c.query<{ version: string }>(
        'INSERT INTO documents (name, version, body) VALUES ($1, 1, $2) ON CONFLICT (name) DO UPDATE SET version = documents.version + 1, body = excluded.body RETURNING version',
        ['settings', JSON.stringify(out)],
      );
      await c.query('SELECT pg_notify($1, $2)', ['kurrent_documents', 'settings']);
      return { out: out as SettingsFile, version: Number(v.rows[0].version) };
    }, LOCK.documents);
    this.pgVersion = Math.max(this.pgVersion, merged.version);
    this.data = merged.out;
    this.revision++;
  }

  /** The settings as stored (store export). */
  snapshot(): SettingsFile {
    return structuredClone(this.data);
  }

  /** Store import into an empty store: the document as exported. */
  restore(data: SettingsFile): Promise<void> {
    return this.store.exclusive(() => this.save(data));
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
      await this.save({ ...this.data, auto_register: enabled });
      await this.audit.record('settings.auto_register', { enabled, previous, client });
      return { enabled };
    });
  }
}

/** Line of a JSON syntax error (V8 gives a position only for some errors). */
function jsonErrorLine(text: string): number {
  const lines = text.split('\n');
  for (let k = 1; k <= lines.length; k++) {
    const prefix = lines.slice(0, k).join('\n');
    try {
      JSON.parse(prefix);
      return k;
    } catch (e) {
      const msg = (e as Error).message;
      const pos = /at position (\d+)/.exec(msg);
      // Errors at the very end of a prefix only mean "incomplete": read one more line.
      if (/end of JSON input/i.test(msg) || (pos && Number(pos[1]) >= prefix.length)) continue;
      return pos ? prefix.slice(0, Number(pos[1])).split('\n').length : k;
    }
  }
  return lines.length;
}
