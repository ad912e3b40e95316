import { Mutex } from '../../../shared/files/mutex';
import type { AuditFields, TxAudit } from '../audit/audit.repository';

export const PUSH_STATES = ['pushed', 'pending', 'failed', 'removing'] as const;
export type PushState = (typeof PUSH_STATES)[number];

/** Where one worker's credential stands on one agent. No secret in here. */
export interface PushRecord {
  state: PushState;
  attempts: number;
  last_error: string | null;
  last_attempt_at: string | null;
  next_attempt_at: string | null;
  /** 12-hex hash of the key the agent last accepted (null: never). */
  key_sha256: string | null;
  /** Subsystems the agent last linked to the host. */
  subsystems: string[];
  /** The last failure was the agent saying no (an HTTP error), not the agent being away. */
  rejected?: boolean;
}

export interface CredentialRecord {
  worker_id: string;
  hostnqn: string;
  /** The secret (`DHHC-1:..`); the TLS PSK is derived from it, never stored. */
  dhchap_key: string;
  issued_at: string;
  revoked: boolean;
  revoked_at: string | null;
  agents: Record<string, PushRecord>;
  /** The incarnation of the worker it was issued to (WorkerRecord.incarnation; absent for older workers). */
  worker_incarnation?: string | null;
}

/** A credential belongs to the worker of its id only if issued to that incarnation of it. */
export function issuedTo(c: CredentialRecord, w: { incarnation?: string } | undefined): boolean {
  return !!w && (c.worker_incarnation ?? null) === (w.incarnation ?? null);
}

/** A host to take off an agent after its worker was deleted. */
export interface RemovalRecord {
  worker_id: string;
  hostnqn: string;
  agent: string;
  attempts: number;
  last_error: string | null;
  last_attempt_at: string | null;
  next_attempt_at: string | null;
}

export interface FileShape {
  version: 1;
  credentials: Record<string, CredentialRecord>;
  removals: RemovalRecord[];
}

/** What one change did: the new value of every credential it changed (null: deleted), the removals if they changed. */
export interface CredentialDelta {
  credentials: Map<string, CredentialRecord | null>;
  removals: RemovalRecord[] | null;
}

/**
 * Runs fn on a copy-on-write view of the state: a credential is cloned when fn first reads it, so
 * a change costs what it touches, not the fleet (listing every key still works, at its price).
 * Returns fn's result and what it changed (null: nothing); the state itself is not touched.
 */
export function runOnView<R>(data: FileShape, fn: (d: FileShape) => R): { r: R; delta: CredentialDelta | null } {
  const base = data.credentials;
  const touched = new Map<string, CredentialRecord | undefined>();
  const read = (k: string): CredentialRecord | undefined => {
    if (!touched.has(k)) {
      const v = Object.prototype.hasOwnProperty.call(base, k) ? base[k] : undefined;
      if (v === undefined) return undefined;
      touched.set(k, structuredClone(v));
    }
    return touched.get(k);
  };
  const present = (k: string) => (touched.has(k) ? touched.get(k) !== undefined : Object.prototype.hasOwnProperty.call(base, k));
  const credentials = new Proxy(base, {
    get: (t, k) => (typeof k === 'string' ? read(k) : Reflect.get(t, k)),
    set: (_t, k, v) => (typeof k === 'string' ? (touched.set(k, v as CredentialRecord), true) : false),
    deleteProperty: (_t, k) => (typeof k === 'string' ? (touched.set(k, undefined), true) : false),
    has: (t, k) => (typeof k === 'string' ? present(k) : Reflect.has(t, k)),
    ownKeys: () => [...new Set([...Object.keys(base), ...touched.keys()])].filter(present),
    getOwnPropertyDescriptor: (_t, k) => (typeof k === 'string' && present(k) ? { value: read(k), writable: true, enumerable: true, configurable: true } : undefined),
    defineProperty: (_t, k, desc) => (typeof k === 'string' ? (touched.set(k, desc.value as CredentialRecord), true) : false),
  });
  const view: FileShape = { version: 1, credentials, removals: structuredClone(data.removals) };
  const r = fn(view);
  if (view.credentials !== credentials) {
    // The whole map was replaced (a store import): every key is compared.
    touched.clear();
    for (const k of Object.keys(base)) touched.set(k, undefined);
    for (const [k, v] of Object.entries(view.credentials)) touched.set(k, v);
  }
  const removals = view.removals;
  const changed = new Map<string, CredentialRecord | null>();
  for (const [k, v] of touched) {
    const was = Object.prototype.hasOwnProperty.call(base, k) ? base[k] : undefined;
    if (JSON.stringify(v) !== JSON.stringify(was)) changed.set(k, v === undefined ? null : v);
  }
  const removalsChanged = JSON.stringify(removals) !== JSON.stringify(data.removals);
  return { r, delta: changed.size || removalsChanged ? { credentials: changed, removals: removalsChanged ? removals : null } : null };
}

/** Makes a delta the state. */
export function applyDelta(data: FileShape, delta: CredentialDelta): void {
  for (const [k, v] of delta.credentials) {
    if (v === null) delete data.credentials[k];
    else data.credentials[k] = v;
  }
  if (delta.removals) data.removals = delta.removals;
}

/** Collects the audit entries of a credential change (written with it). */
export type CredentialAudit = (op: string, fields: AuditFields) => void;

/** Runs a change's fn with an audit sink: what it returned and the entries it made. */
export function withAudit<R>(fn: (d: FileShape, audit: CredentialAudit) => R): { fn: (d: FileShape) => R; audits: TxAudit[] } {
  const audits: TxAudit[] = [];
  return { fn: (d) => fn(d, (op, fields) => audits.push({ op, fields })), audits };
}

export const newPush = (): PushRecord => ({ state: 'pending', attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null, key_sha256: null, subsystems: [] });

/**
 * NVMe-oF credentials (secrets included) and their push bookkeeping: the only place the control
 * plane keeps NVMe secrets. Reads are served from memory; the engine (nvme-credentials.json, or
 * the credentials tables) is chosen once by RepositoriesModule.
 */
export abstract class CredentialRepository {
  protected data: FileShape = { version: 1, credentials: {}, removals: [] };
  /** Bumped by every change and note: cached boot answers depend on the credentials and push states. */
  revision = 0;
  protected readonly lock = new Mutex();

  /** Everything, secrets included (store export: the bundle is as sensitive as this store). */
  snapshot(): FileShape {
    return structuredClone(this.data);
  }

  get(workerId: string): CredentialRecord | undefined {
    return this.data.credentials[workerId];
  }

  all(): CredentialRecord[] {
    return Object.values(this.data.credentials);
  }

  removals(): RemovalRecord[] {
    return this.data.removals;
  }

  /**
   * Runs fn on a copy of the state, one change at a time, and makes the result durable before it
   * becomes the state. A failed write leaves the previous state in place. For secrets and what
   * operators did (issue, rotate, revoke, delete). The entries fn passes to `audit` are written
   * with the change, atomically (the same log record or transaction): never one without the other.
   */
  abstract change<R>(fn: (d: FileShape, audit: CredentialAudit) => R): Promise<R>;

  /**
   * Push bookkeeping (states, attempts, retry times). The engine may apply it at once and write it
   * shortly after: the reconciler re-derives what a crash loses from what the agents list.
   */
  abstract note<R>(fn: (d: FileShape) => R): Promise<R>;

  /** Writes what note() has not written yet. */
  abstract flush(): Promise<void>;
}
