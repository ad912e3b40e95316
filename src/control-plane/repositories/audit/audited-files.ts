import type { TxAudit } from './audit.repository';

/** A file replaced whole, written with the audit entries of the change that replaces it. */
export interface AuditedFile {
  /** At start (under the state lock; once). */
  load(): void;
  /**
   * Writes `text` by `replace` (which replaces the file whole) with `audits`. Throws what the write
   * throws; then no entry is written. Resolves once the entries are written too.
   */
  write(text: string, audits: TxAudit[], replace: () => Promise<void>): Promise<void>;
}

/**
 * Files outside the store that the API replaces (config/agents.yml), with their audit entries.
 * The engine is chosen once by RepositoriesModule: on files the change and its entries are one
 * commit (AuditedFileWrite); on PostgreSQL the trail is a table and the file this node's own, so
 * the entries are inserted right after the file is written.
 */
export abstract class AuditedFiles {
  /** `logFile`: where the file engine keeps the intent records (in the state directory); `mode` its mode. */
  abstract open(file: string, logFile: string, mode?: number): AuditedFile;
}
