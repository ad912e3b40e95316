import type { TxAudit } from '../audit/audit.repository';

/** A registration window as the settings document keeps it (it survives restarts and closes on time). */
export interface WindowState {
  opened_at: string;
  expires_at: string;
  max_devices: number | null;
  closed_at: string | null;
}

/** The runtime settings document (settings.json, or the `settings` row of `documents`). */
export interface SettingsFile {
  auto_register?: boolean;
  registration_window?: WindowState | null;
  /** Set when the first window opens: from then on new devices enter the pool only through a window. */
  secure_registration?: boolean;
  signature_enforcement?: boolean;
  /** Boot-loop and stuck-boot rules (GET /settings/boot-policy); absent: the defaults. */
  boot_policy?: { loop_threshold?: number; loop_window_minutes?: number; loop_action?: 'hold' | 'keep-looping'; stuck_after_seconds?: number };
  /** Per master, its rollout (which version its disks are to hold): RolloutsService. */
  master_rollouts?: Record<string, RolloutState>;
}

/** A master's rollout: its disks move to `version`, first those of the canary workers, then all. */
export interface RolloutState {
  version: number;
  /** The version the fleet was on before (what a rollback selects); null when none was known. */
  previous: number | null;
  /** Workers whose disks take the version in the canary phase (fixed when the rollout starts). */
  canary: string[];
  phase: 'canary' | 'all';
  rollback: boolean;
  started_at: string;
  promoted_at?: string;
}

/** The settings document; the engine is chosen once by RepositoriesModule. */
export abstract class SettingsRepository {
  private readonly listeners: ((doc: SettingsFile) => void)[] = [];

  /** The document as stored (at start). */
  abstract load(): Promise<SettingsFile>;

  /**
   * Writes `keys` of `next` over the document as it is now (another writer's or a hand edit's
   * other keys are kept) and resolves with the document as written. `audits` are written with the
   * change, atomically: never one without the other.
   */
  abstract save(keys: (keyof SettingsFile)[], next: SettingsFile, audits?: TxAudit[]): Promise<SettingsFile>;

  /** Called with the document when another writer changed it. */
  onChange(fn: (doc: SettingsFile) => void): void {
    this.listeners.push(fn);
  }

  protected changed(doc: SettingsFile): void {
    for (const fn of this.listeners) fn(doc);
  }
}

/** The keys whose values differ between two documents. */
export function changedKeys(cur: SettingsFile, next: SettingsFile): (keyof SettingsFile)[] {
  return (Object.keys({ ...cur, ...next }) as (keyof SettingsFile)[]).filter((k) => JSON.stringify(next[k]) !== JSON.stringify(cur[k]));
}

/** The keys of `next` written over `base` (undefined deletes). */
export function mergeKeys(base: SettingsFile, keys: (keyof SettingsFile)[], next: SettingsFile): SettingsFile {
  const out = { ...base } as Record<string, unknown>;
  for (const k of keys) {
    if (next[k] === undefined) delete out[k];
    else out[k] = next[k];
  }
  return out as SettingsFile;
}
