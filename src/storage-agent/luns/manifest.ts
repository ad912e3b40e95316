import { Injectable, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../shared/files/file-system';
import { LedgerFileError } from '../../shared/files/ledger-map';
import { AgentConfig } from '../agent-config';

export interface ManifestEntry {
  /** Backing file name in DISK_DIR. */
  file: string;
  cd: boolean;
  allowed_hosts?: string[];
  /** lio: initiator IQNs of the node ACLs. */
  allowed_initiators?: string[];
  /** lio: the CHAP credential the ACLs require (this file is 0600 for it). */
  chap?: { userid: string; secret: string };
  /** A disk cloned from a master: the master and the version it holds (a reset changes the version). */
  master?: string;
  master_version?: number;
}

/**
 * The targets this agent made (name -> backing file): lets a restarted tgtd get back targets
 * whose name does not follow from their file (custom filename, per-worker CD of a shared ISO).
 * The files stay the truth: an entry whose file is gone is not rebuilt.
 */
@Injectable()
export class TargetManifest implements OnModuleInit {
  private readonly file: string;
  private entries = new Map<string, ManifestEntry>();
  private writing: Promise<void> | null = null;
  private pending = false;

  constructor(
    config: AgentConfig,
    private readonly fs: FileSystem,
  ) {
    this.file = path.join(config.stateDir, 'targets.json');
    fs.mkdirpSync(config.stateDir);
  }

  onModuleInit(): void {
    const text = this.fs.readTextSync(this.file);
    if (!text) return;
    try {
      const obj = JSON.parse(text) as { targets?: Record<string, ManifestEntry> };
      this.entries = new Map(Object.entries(obj.targets ?? {}));
    } catch (e) {
      throw new LedgerFileError(this.file, 1, `invalid JSON: ${(e as Error).message}`);
    }
  }

  all(): [string, ManifestEntry][] {
    return [...this.entries];
  }

  get(name: string): ManifestEntry | undefined {
    return this.entries.get(name);
  }

  /** Resolves once a write that includes this change is on disk. */
  set(name: string, e: ManifestEntry | undefined): Promise<void> {
    if (e) this.entries.set(name, e);
    else this.entries.delete(name);
    return this.flush();
  }

  /**
   * One writer at a time, coalescing: concurrent creates (100 at once) share a few writes, and
   * an older snapshot can never be renamed over a newer one.
   */
  private flush(): Promise<void> {
    this.pending = true;
    if (!this.writing) {
      this.writing = (async () => {
        while (this.pending) {
          this.pending = false;
          await this.fs.writeAtomic(this.file, JSON.stringify({ targets: Object.fromEntries(this.entries) }, null, 2) + '\n', 0o600);
        }
      })().finally(() => {
        this.writing = null;
      });
    }
    return this.writing;
  }
}
