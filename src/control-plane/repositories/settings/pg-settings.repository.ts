import { Injectable, OnModuleInit, Optional } from '@nestjs/common';
import { ApiError } from '../../../shared/http/api-error';
import type { AuditEntry, TxAudit } from '../audit/audit.repository';
import { PgAuditRepository } from '../audit/pg-audit.repository';
import { Database, LOCK } from '../pg/database';
import { StoreSync } from '../pg/store-sync';
import { mergeKeys, SettingsFile, SettingsRepository } from './settings.repository';

/** The settings document as the `settings` row of `documents`, reloaded on NOTIFY and by StoreSync. */
@Injectable()
export class PgSettingsRepository extends SettingsRepository implements OnModuleInit {
  private version = 0;
  private last = '{}';

  constructor(
    private readonly db: Database,
    private readonly sync: StoreSync,
    @Optional() private readonly audit?: PgAuditRepository,
  ) {
    super();
  }

  async onModuleInit(): Promise<void> {
    await this.db.init();
    await this.db.listen('kurrent_documents', (name) => {
      if (name === '' || name === 'settings') void this.reload().catch(() => undefined);
    });
    this.sync.register('settings', { appliedVersion: () => this.version, refresh: () => this.reload() });
  }

  async load(): Promise<SettingsFile> {
    const r = await this.db.query<{ body: SettingsFile; version: string }>('SELECT body, version FROM documents WHERE name = $1', ['settings']);
    this.version = Math.max(this.version, Number(r.rows[0]?.version ?? 0));
    const doc = r.rows[0]?.body ?? {};
    this.last = JSON.stringify(doc);
    return doc;
  }

  private async reload(): Promise<void> {
    const before = this.last;
    const doc = await this.load();
    if (this.last !== before) this.changed(doc);
  }

  /**
   * Under the documents lock, so two control planes changing different settings at once both keep
   * theirs; the audit entries in the same transaction (documents lock, then the audit lock).
   */
  async save(keys: (keyof SettingsFile)[], next: SettingsFile, audits: TxAudit[] = []): Promise<SettingsFile> {
    let audited: AuditEntry[] = [];
    const merged = await this.db.tx(async (c) => {
      if (audits.length) {
        if (!this.audit) throw new Error('a settings change carries audit entries but no audit trail is wired');
        audited = await this.audit.insertInTx(c, audits).catch((e: Error) => {
          throw new ApiError(503, `the database refused the audit entry, nothing was changed: ${e.message}`);
        });
      }
      const cur = ((await c.query('SELECT body FROM documents WHERE name = $1', ['settings'])).rows[0]?.body ?? {}) as SettingsFile;
      const out = mergeKeys(cur, keys, next);
      const v = await c.query<{ version: string }>(
        'INSERT INTO documents (name, version, body) VALUES ($1, 1, $2) ON CONFLICT (name) DO UPDATE SET version = documents.version + 1, body = excluded.body RETURNING version',
        ['settings', JSON.stringify(out)],
      );
      await c.query('SELECT pg_notify($1, $2)', ['kurrent_documents', 'settings']);
      return { out, version: Number(v.rows[0].version) };
    }, LOCK.documents);
    if (audited.length) this.audit!.published(audited);
    this.version = Math.max(this.version, merged.version);
    this.last = JSON.stringify(merged.out);
    return merged.out;
  }
}
