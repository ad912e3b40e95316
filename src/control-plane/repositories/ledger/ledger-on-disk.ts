import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { LedgerMap, type Seal, type Validator } from '../../../shared/files/ledger-map';
import { ChangeLog, ChangeRecord } from './change-log';
import { DEVICE_SEAL, DeviceRecord, validateDevice, validateWorker, WORKER_SEAL, WorkerRecord } from './records';

/**
 * The devices as a restart would see them (devices.yml + the change log), read without writing
 * anything: for tools and benches that check what is on disk while a control plane runs.
 */
export function readDevicesOnDisk(stateDir: string, fs: FileSystem): Map<string, DeviceRecord> {
  return readOnDisk(stateDir, fs, 'devices', validateDevice, DEVICE_SEAL, (r) => r.d);
}

/** The workers as a restart would see them (workers.yml + the change log), read without writing anything. */
export function readWorkersOnDisk(stateDir: string, fs: FileSystem): Map<string, WorkerRecord> {
  return readOnDisk(stateDir, fs, 'workers', validateWorker, WORKER_SEAL, (r) => r.w);
}

function readOnDisk<T extends object>(stateDir: string, fs: FileSystem, root: 'devices' | 'workers', validate: Validator<T>, seal: Seal<T>, part: (r: ChangeRecord) => Record<string, unknown> | undefined): Map<string, T> {
  const m = new LedgerMap<T>(path.join(stateDir, `${root}.yml`), root, '', validate, fs, undefined, seal);
  m.loadSync();
  for (const r of new ChangeLog(path.join(stateDir, 'ledger.wal'), fs).loadSync(true)) {
    for (const [k, v] of Object.entries(part(r) ?? {})) m.replay(k, v === null ? undefined : m.check(k, v));
  }
  return new Map(m.entries());
}
