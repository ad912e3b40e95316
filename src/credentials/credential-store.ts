import { Injectable, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { dhchapKeyError } from '../common/nvme-keys';
import { AppConfig } from '../config/app-config';
import { FileSystem } from '../store/file-system';
import { LedgerFileError } from '../store/ledger-map';
import { Mutex } from '../store/mutex';
import { storageFailure } from '../store/storage-error';

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

interface FileShape {
  version: 1;
  credentials: Record<string, CredentialRecord>;
  removals: RemovalRecord[];
}

export const newPush = (): PushRecord => ({ state: 'pending', attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null, key_sha256: null, subsystems: [] });

/**
 * state/nvme-credentials.json: the only place the control plane keeps NVMe secrets. Mode 0600,
 * replaced atomically (temp, fsync, rename) on every change, read once at start. Changes run
 * one at a time (`change`), and a change is visible only once it is on disk.
 */
@Injectable()
export class CredentialStore implements OnModuleInit {
  readonly file: string;
  private data: FileShape = { version: 1, credentials: {}, removals: [] };
  private readonly lock = new Mutex();

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    this.file = path.join(config.stateDir, 'nvme-credentials.json');
  }

  onModuleInit(): void {
    const text = this.fs.readTextSync(this.file);
    if (text === null) return;
    let obj: Partial<FileShape>;
    try {
      obj = JSON.parse(text) as Partial<FileShape>;
    } catch (e) {
      throw new LedgerFileError(this.file, 1, `invalid JSON: ${(e as Error).message}`);
    }
    for (const [id, c] of Object.entries(obj.credentials ?? {})) {
      // The message names the worker, never the value.
      if (typeof c?.dhchap_key !== 'string' || dhchapKeyError(c.dhchap_key)) throw new LedgerFileError(this.file, 1, `credentials.${id}.dhchap_key is not a DHHC-1 secret`);
      if (typeof c.hostnqn !== 'string') throw new LedgerFileError(this.file, 1, `credentials.${id}.hostnqn is missing`);
      c.agents ??= {};
    }
    this.data = { version: 1, credentials: obj.credentials ?? {}, removals: obj.removals ?? [] };
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
   * becomes the state. A failed write leaves the previous state in place.
   */
  change<R>(fn: (d: FileShape) => R): Promise<R> {
    return this.lock.run(async () => {
      const next = structuredClone(this.data);
      const r = fn(next);
      try {
        await this.fs.writeAtomic(this.file, JSON.stringify(next, null, 2) + '\n', 0o600);
      } catch (e) {
        throw storageFailure(e, 'nvme-credentials.json');
      }
      this.data = next;
      return r;
    });
  }
}
