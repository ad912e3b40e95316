import { DynamicModule, Global, Module, Provider, Type } from '@nestjs/common';
import { FileSystem } from '../../shared/files/file-system';
import { AuditRepository } from './audit/audit.repository';
import { AuditedFiles } from './audit/audited-files';
import { FileAuditRepository } from './audit/file-audit.repository';
import { FileAuditedFiles } from './audit/file-audited-files';
import { PgAuditedFiles } from './audit/pg-audited-files';
import { PgAuditRepository } from './audit/pg-audit.repository';
import { BootEventRepository } from './boot-events/boot-event.repository';
import { BootSnapshotFile } from './boot-events/boot-snapshot-file';
import { FileBootEventRepository } from './boot-events/file-boot-event.repository';
import { PgBootEventRepository } from './boot-events/pg-boot-event.repository';
import { CacheFreshness } from './cache-freshness';
import { CredentialRepository } from './credentials/credential.repository';
import { FileCredentialRepository } from './credentials/file-credential.repository';
import { PgCredentialRepository } from './credentials/pg-credential.repository';
import { FileReconcilerLease, PgReconcilerLease, ReconcilerLease } from './leases/reconciler-lease.repository';
import { FileLedgerRepository } from './ledger/file-ledger.repository';
import { LedgerRepository } from './ledger/ledger.repository';
import { PgLedgerRepository } from './ledger/pg-ledger.repository';
import { FileNonceRepository } from './nonces/file-nonce.repository';
import { NonceRepository } from './nonces/nonce.repository';
import { PgNonceRepository } from './nonces/pg-nonce.repository';
import { Database } from './pg/database';
import { StoreSync } from './pg/store-sync';
import { FileSettingsRepository } from './settings/file-settings.repository';
import { PgSettingsRepository } from './settings/pg-settings.repository';
import { SettingsRepository } from './settings/settings.repository';

export type StoreEngine = 'file' | 'postgres';

/** Each repository the services depend on (an abstract class, the DI token) and its two engines. */
const REPOSITORIES: [abstract new (...a: never[]) => unknown, Type, Type][] = [
  [AuditRepository, FileAuditRepository, PgAuditRepository],
  [LedgerRepository, FileLedgerRepository, PgLedgerRepository],
  [SettingsRepository, FileSettingsRepository, PgSettingsRepository],
  [CredentialRepository, FileCredentialRepository, PgCredentialRepository],
  [NonceRepository, FileNonceRepository, PgNonceRepository],
  [ReconcilerLease, FileReconcilerLease, PgReconcilerLease],
  [BootEventRepository, FileBootEventRepository, PgBootEventRepository],
  [CacheFreshness, CacheFreshness, StoreSync],
  [AuditedFiles, FileAuditedFiles, PgAuditedFiles],
];

/**
 * The one place that knows which storage engine runs (IPXE_CP_STORE). Only the chosen engine's
 * classes are instantiated; each is also reachable by its own class, so the ledger repository
 * takes the audit repository of its engine (a commit and its audit entries are written together).
 */
@Global()
@Module({})
export class RepositoriesModule {
  static forEngine(engine: StoreEngine): DynamicModule {
    const pick = engine === 'postgres' ? 2 : 1;
    const providers: Provider[] = [FileSystem, BootSnapshotFile];
    if (engine === 'postgres') providers.push(Database);
    for (const row of REPOSITORIES) {
      const impl = row[pick] as Type;
      const token = row[0];
      providers.push(impl);
      if (impl !== token) providers.push({ provide: token, useExisting: impl });
    }
    return { module: RepositoriesModule, providers, exports: providers.map((p) => ('provide' in p ? p.provide : p)) };
  }
}
