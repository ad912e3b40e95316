/**
 * `npm run store -- export [--out FILE]` / `npm run store -- import FILE`: moves a site between the
 * file store and PostgreSQL (either way), losslessly: devices, workers, settings, NVMe-oF
 * credentials (secrets included: keep the bundle as you keep the store) and the audit with its ids.
 * Both read the store the environment configures (IPXE_CP_STORE, IPXE_CP_DATABASE_URL,
 * IPXE_CP_STATE_DIR, ... as the control plane does). Run it with the control planes stopped; the
 * file store's state-directory lock refuses a running one. Import refuses a store that is not empty.
 */
import { NestFactory } from '@nestjs/core';
import * as fs from 'node:fs';
import { AppModule } from '../src/control-plane/app.module';
import { AuditEntry, AuditService } from '../src/control-plane/audit/audit.service';
import { ConfigError, loadConfig } from '../src/control-plane/config/app-config';
import { CredentialRepository, FileShape } from '../src/control-plane/repositories/credentials/credential.repository';
import { SettingsFile, SettingsService } from '../src/control-plane/settings/settings.service';
import { LedgerRepository } from '../src/control-plane/repositories/ledger/ledger.repository';
import { DeviceRecord, validateDevice, validateWorker, WorkerRecord } from '../src/control-plane/repositories/ledger/records';

export const BUNDLE_FORMAT = 'kurrent-store';
/** The bound on each database wait of an export or import (the largest IPXE_CP_DATABASE_TIMEOUT_MS takes). */
export const MAINTENANCE_DATABASE_TIMEOUT_MS = 600_000;

export interface StoreBundle {
  format: typeof BUNDLE_FORMAT;
  version: 1;
  exported_at: string;
  source: 'file' | 'postgres';
  devices: Record<string, DeviceRecord>;
  workers: Record<string, WorkerRecord>;
  settings: SettingsFile;
  credentials: FileShape;
  audit: AuditEntry[];
}

async function context(env: NodeJS.ProcessEnv) {
  // No reconciler (no passes, no lease, no audit entry of its own): this is a maintenance run.
  // Its import is one transaction of the whole site, whose statements at 100,000 seats ran past
  // the online bound (5 s: a boot must not wait) on this machine; unless the operator set one,
  // each wait may take up to the 10 minutes the setting allows.
  const config = loadConfig({
    ...env,
    IPXE_CP_RECONCILER: 'false',
    IPXE_CP_RECONCILE_SECONDS: '0',
    IPXE_CP_LOG_LEVEL: env.IPXE_CP_LOG_LEVEL ?? 'warn',
    IPXE_CP_DATABASE_TIMEOUT_MS: env.IPXE_CP_DATABASE_TIMEOUT_MS ?? String(MAINTENANCE_DATABASE_TIMEOUT_MS),
  });
  const app = await NestFactory.createApplicationContext(AppModule.forRoot(config), { logger: ['error', 'warn'] });
  return { app, config };
}

export async function exportStore(env: NodeJS.ProcessEnv): Promise<StoreBundle> {
  const { app, config } = await context(env);
  try {
    const store = app.get(LedgerRepository).read();
    const audit = await app.get(AuditService).list({ since: 0, limit: Number.MAX_SAFE_INTEGER });
    return {
      format: BUNDLE_FORMAT,
      version: 1,
      exported_at: new Date().toISOString(),
      source: config.store,
      devices: Object.fromEntries(store.devices.entries()),
      workers: Object.fromEntries(store.workers.entries()),
      settings: app.get(SettingsService).snapshot(),
      credentials: app.get(CredentialRepository).snapshot(),
      audit: audit.entries,
    };
  } finally {
    await app.close();
  }
}

/** Checks the bundle as the store would check its own files; throws naming what is wrong. */
export function checkBundle(b: unknown): StoreBundle {
  const o = b as Partial<StoreBundle>;
  if (!o || o.format !== BUNDLE_FORMAT || o.version !== 1) throw new Error(`not a ${BUNDLE_FORMAT} version 1 bundle`);
  for (const [k, v] of Object.entries(o.devices ?? {})) {
    const r = validateDevice(k, v);
    if (!r.ok) throw new Error(`devices.${k}: ${r.error}`);
  }
  for (const [k, v] of Object.entries(o.workers ?? {})) {
    const r = validateWorker(k, v);
    if (!r.ok) throw new Error(`workers.${k}: ${r.error}`);
  }
  for (const d of Object.values(o.devices ?? {})) {
    if (d.bound_worker_id && !o.workers?.[d.bound_worker_id]) throw new Error(`devices.${d.mac}: bound to ${d.bound_worker_id}, which is not in the bundle`);
  }
  const ids = (o.audit ?? []).map((e) => e.id);
  if (ids.some((id, i) => !Number.isSafeInteger(id) || (i > 0 && id <= ids[i - 1]))) throw new Error('audit: ids must be increasing integers');
  return { devices: {}, workers: {}, settings: {}, credentials: { version: 1, credentials: {}, removals: [] }, audit: [], ...o } as StoreBundle;
}

export async function importStore(env: NodeJS.ProcessEnv, bundle: StoreBundle): Promise<{ devices: number; workers: number; credentials: number; audit: number }> {
  const b = checkBundle(bundle);
  const { app } = await context(env);
  try {
    const store = app.get(LedgerRepository).read();
    const audit = app.get(AuditService);
    const creds = app.get(CredentialRepository);
    if (store.devices.size || store.workers.size || creds.all().length || (await audit.list({ since: 0, limit: 1 })).entries.length) {
      throw new Error('the target store is not empty: import only into a new database or state directory');
    }
    await store.exclusive(() =>
      store.commit((tx) => {
        for (const [k, w] of Object.entries(b.workers)) tx.workers.set(k, w);
        for (const [k, d] of Object.entries(b.devices)) tx.devices.set(k, d);
      }),
    );
    await store.checkpoint();
    await app.get(SettingsService).restore(b.settings);
    await creds.change((d) => {
      d.credentials = b.credentials.credentials;
      d.removals = b.credentials.removals;
    });
    await audit.restore(b.audit);
    return { devices: Object.keys(b.devices).length, workers: Object.keys(b.workers).length, credentials: Object.keys(b.credentials.credentials).length, audit: b.audit.length };
  } finally {
    await app.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    if (cmd === 'export') {
      const i = rest.indexOf('--out');
      const text = JSON.stringify(await exportStore(process.env), null, 1) + '\n';
      if (i >= 0 && rest[i + 1]) fs.writeFileSync(rest[i + 1], text, { mode: 0o600 });
      else process.stdout.write(text);
      return 0;
    }
    if (cmd === 'import' && rest[0]) {
      const r = await importStore(process.env, JSON.parse(fs.readFileSync(rest[0], 'utf8')) as StoreBundle);
      process.stderr.write(`imported ${r.devices} devices, ${r.workers} workers, ${r.credentials} credentials, ${r.audit} audit entries\n`);
      return 0;
    }
    process.stderr.write('usage: npm run store -- export [--out FILE] | import FILE   (the store of the environment: IPXE_CP_STORE, IPXE_CP_DATABASE_URL, IPXE_CP_STATE_DIR)\n');
    return 2;
  } catch (e) {
    process.stderr.write(`store ${cmd}: ${e instanceof ConfigError ? 'configuration error: ' : ''}${(e as Error).message}\n`);
    return 1;
  }
}

if (require.main === module) void main(process.argv.slice(2)).then((code) => process.exit(code));
