import { loadConfig } from '../../src/config/app-config';
import { FileSystem } from '../../src/store/file-system';
import { LedgerStore } from '../../src/store/ledger.store';
import { DeviceRecord, newDevice, newWorker, WorkerRecord } from '../../src/store/records';

class MemFs extends FileSystem {
  files = new Map<string, string>();
  failOn: string | null = null;
  log: string[] = [];
  override readTextSync(f: string) {
    return this.files.get(f) ?? null;
  }
  override statSync(f: string) {
    const v = this.files.get(f);
    return v === undefined ? null : { mtimeMs: 1, size: v.length, ino: 1 };
  }
  override mkdirpSync() {}
  override async writeAtomic(f: string, data: string | Buffer) {
    const d = data.toString();
    this.log.push(f);
    if (this.failOn && f.endsWith(this.failOn)) throw new Error(`disk full: ${f}`);
    this.files.set(f, d);
  }
}

const device = (mac: string, worker: string | null, last_seen: string | null = null): DeviceRecord =>
  newDevice(mac, { state: worker ? 'bound' : 'pooled', bound_worker_id: worker, source: 'ipxe', last_seen });
const worker = (id: string): WorkerRecord => newWorker(id);

function setup() {
  const fs = new MemFs();
  const store = new LedgerStore(loadConfig({ IPXE_CP_STATE_DIR: '/s', IPXE_CP_REPORT_FLUSH_MS: '0' }), fs);
  store.onModuleInit();
  return { fs, store };
}

describe('LedgerStore', () => {
  it('commits devices.yml then workers.yml and only then shows the change', async () => {
    const { fs, store } = setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set('02:00:00:00:00:01', device('02:00:00:00:00:01', 'w1'));
      expect(store.devices.size).toBe(0); // not visible before the commit
    });
    expect(fs.log).toEqual(['/s/devices.yml', '/s/workers.yml']);
    expect(store.boundMacByWorker().get('w1')).toBe('02:00:00:00:00:01');
  });

  it('rolls back by rewriting the files already written when a later write fails', async () => {
    const { fs, store } = setup();
    await store.commit((tx) => {
      tx.devices.set('02:00:00:00:00:01', device('02:00:00:00:00:01', null));
    });
    const before = fs.files.get('/s/devices.yml');
    fs.failOn = 'workers.yml';
    await expect(
      store.commit((tx) => {
        tx.workers.set('w1', worker('w1'));
        tx.devices.set('02:00:00:00:00:01', device('02:00:00:00:00:01', 'w1'));
      }),
    ).rejects.toThrow('disk full');
    expect(fs.files.get('/s/devices.yml')).toBe(before);
    expect(store.devices.get('02:00:00:00:00:01')?.state).toBe('pooled');
    expect(store.workers.size).toBe(0);
  });

  it('a thrown error inside the transaction writes nothing', async () => {
    const { fs, store } = setup();
    await expect(
      store.commit((tx) => {
        tx.workers.set('w1', worker('w1'));
        throw new Error('409');
      }),
    ).rejects.toThrow('409');
    expect(fs.log).toEqual([]);
  });

  it('keeps report telemetry written during a transaction (three-way merge) and flushes it', async () => {
    const { fs, store } = setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set('02:00:00:00:00:01', device('02:00:00:00:00:01', null));
    });
    await store.commit(async (tx) => {
      const d = tx.devices.get('02:00:00:00:00:01')!;
      // A report lands while the transaction is open.
      store.devices.touch('02:00:00:00:00:01', { ...d, last_seen: '2026-11-30T00:00:00+00:00' });
      tx.devices.set(d.mac, { ...d, state: 'bound', bound_worker_id: 'w1' });
    });
    expect(store.devices.get('02:00:00:00:00:01')).toMatchObject({ state: 'bound', last_seen: '2026-11-30T00:00:00+00:00' });
    expect(fs.files.get('/s/devices.yml')).toContain('"last_seen":"2026-11-30T00:00:00+00:00"');
    expect(store.devices.dirty).toBe(false);
    store.devices.touch('02:00:00:00:00:01', { ...store.devices.get('02:00:00:00:00:01')!, last_seen: 'later' });
    store.scheduleFlush();
    await new Promise((r) => setTimeout(r, 20));
    await store.exclusive(() => undefined);
    expect(fs.files.get('/s/devices.yml')).toContain('"last_seen":"later"');
  });
});
