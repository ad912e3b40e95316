import type { Provider } from '@nestjs/common';
import { AuditRepository, type TxAudit } from '../../src/control-plane/repositories/audit/audit.repository';
import { FileAuditRepository } from '../../src/control-plane/repositories/audit/file-audit.repository';
import { PgAuditRepository } from '../../src/control-plane/repositories/audit/pg-audit.repository';
import { LedgerRepository } from '../../src/control-plane/repositories/ledger/ledger.repository';
import { FileLedgerRepository } from '../../src/control-plane/repositories/ledger/file-ledger.repository';
import { PgLedgerRepository } from '../../src/control-plane/repositories/ledger/pg-ledger.repository';
import { Database } from '../../src/control-plane/repositories/pg/database';
import { RepositoriesModule } from '../../src/control-plane/repositories/repositories.module';
import { SettingsFile, SettingsRepository } from '../../src/control-plane/repositories/settings/settings.repository';
import { SettingsService } from '../../src/control-plane/settings/settings.service';

/** What a module provides: token -> the class that answers it. */
function wiring(providers: Provider[]): Map<unknown, unknown> {
  const out = new Map<unknown, unknown>();
  for (const p of providers) {
    if (typeof p === 'function') out.set(p, p);
    else if ('useExisting' in p) out.set(p.provide, p.useExisting);
    else if ('useClass' in p) out.set(p.provide, p.useClass);
  }
  return out;
}

describe('RepositoriesModule: the engine is chosen once', () => {
  it('files: every repository token answers with its file class, nothing of PostgreSQL is provided', () => {
    const w = wiring(RepositoriesModule.forEngine('file').providers!);
    expect(w.get(LedgerRepository)).toBe(FileLedgerRepository);
    expect(w.get(AuditRepository)).toBe(FileAuditRepository);
    expect(w.has(Database)).toBe(false);
    expect(w.has(PgLedgerRepository)).toBe(false);
    expect(w.has(PgAuditRepository)).toBe(false);
  });

  it('postgres: every repository token answers with its PostgreSQL class, nothing of the file engine is provided', () => {
    const w = wiring(RepositoriesModule.forEngine('postgres').providers!);
    expect(w.get(LedgerRepository)).toBe(PgLedgerRepository);
    expect(w.get(AuditRepository)).toBe(PgAuditRepository);
    expect(w.has(Database)).toBe(true);
    expect(w.has(FileLedgerRepository)).toBe(false);
    expect(w.has(FileAuditRepository)).toBe(false);
  });
});

/** A settings store in memory: what a service unit test replaces the engine with. */
class MemorySettings extends SettingsRepository {
  doc: SettingsFile = {};
  saves = 0;
  /** The audit entries each save carried (written with it by a real engine). */
  audited: string[] = [];
  load(): Promise<SettingsFile> {
    return Promise.resolve({ ...this.doc });
  }
  save(keys: (keyof SettingsFile)[], next: SettingsFile, audits: TxAudit[] = []): Promise<SettingsFile> {
    this.saves++;
    this.audited.push(...audits.map((a) => a.op));
    const out = { ...this.doc } as Record<string, unknown>;
    for (const k of keys) out[k] = next[k];
    this.doc = out as SettingsFile;
    return Promise.resolve({ ...this.doc });
  }
  /** Another control plane changed the document. */
  external(doc: SettingsFile): void {
    this.doc = doc;
    this.changed(doc);
  }
}

describe('services see storage only through repositories', () => {
  const setup = async () => {
    const repo = new MemorySettings();
    const ledger = { onExternalChange: () => undefined, exclusive: (fn: () => unknown) => fn() } as unknown as LedgerRepository;
    const clock = { now: () => new Date('2026-12-02T00:00:00Z'), isoNow: () => '2026-12-02T00:00:00.000Z' };
    const svc = new SettingsService({ autoRegister: true } as never, ledger, clock as never, repo);
    await svc.onModuleInit();
    return { repo, svc, audited: repo.audited };
  };

  it('SettingsService writes only the keys it changed and adopts what the repository stored', async () => {
    const { repo, svc, audited } = await setup();
    expect(svc.getAutoRegister()).toEqual({ enabled: true });
    const r0 = svc.revision;
    repo.doc = { signature_enforcement: true }; // written meanwhile by another writer
    await svc.setAutoRegister(false, 'test');
    expect(repo.saves).toBe(1);
    expect(repo.doc).toEqual({ signature_enforcement: true, auto_register: false });
    expect(svc.getAutoRegister()).toEqual({ enabled: false });
    expect(svc.revision).toBeGreaterThan(r0);
    // The entry goes with the change, in the same save.
    expect(audited).toEqual(['settings.auto_register']);
  });

  it('a change another writer made reaches the service and bumps the revision (boot answers depend on it)', async () => {
    const { repo, svc } = await setup();
    const r0 = svc.revision;
    repo.external({ auto_register: false });
    expect(svc.getAutoRegister()).toEqual({ enabled: false });
    expect(svc.revision).toBe(r0 + 1);
  });
});

describe('StoreSync (PostgreSQL): a round catches up the ledger before the documents', () => {
  it('refreshes in the order ledger, settings, credentials whatever order the parts registered in', async () => {
    const { StoreSync } = await import('../../src/control-plane/repositories/pg/store-sync');
    const db = { query: async () => ({ rows: [{ ledger: '5', settings: '3', credentials: '2' }] }) };
    const clock = { now: () => new Date(0) };
    const sync = new StoreSync({ syncMs: 1000, stalenessMaxMs: 1000 } as never, clock as never, db as never);
    const order: string[] = [];
    for (const name of ['credentials', 'settings', 'ledger'] as const) {
      sync.register(name, { appliedVersion: () => 0, refresh: async () => void order.push(name) });
    }
    await sync.round();
    expect(order).toEqual(['ledger', 'settings', 'credentials']);
  });
});
