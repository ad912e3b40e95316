import { FileLedgerRepository, TELEMETRY_PER_RECORD } from '../../src/control-plane/repositories/ledger/file-ledger.repository';
import { Logger } from '@nestjs/common';
import { ApiError } from '../../src/shared/http/api-error';
import { loadConfig } from '../../src/control-plane/config/app-config';
import { DeviceRecord, newDevice, newWorker, WorkerRecord } from '../../src/control-plane/repositories/ledger/records';
import { MemFs } from '../helpers/mem-fs';

const device = (mac: string, worker: string | null, last_seen: string | null = null): DeviceRecord =>
  newDevice(mac, { state: worker ? 'bound' : 'pooled', bound_worker_id: worker, source: 'ipxe', last_seen });
const worker = (id: string): WorkerRecord => newWorker(id);
const M1 = '02:00:00:00:00:01';
const M2 = '02:00:00:00:00:02';

async function setup(fs = new MemFs(), env: Record<string, string> = {}) {
  const store = new FileLedgerRepository(
    loadConfig({ IPXE_CP_STATE_DIR: '/s', IPXE_CP_REPORT_FLUSH_MS: '0', IPXE_CP_CHECKPOINT_MS: '600000', ...env }),
    fs,
  );
  await store.onModuleInit();
  return { fs, store };
}

const walLines = (fs: MemFs) => (fs.files.get('/s/ledger.wal') ?? '').split('\n').filter(Boolean);

describe('LedgerRepository', () => {
  beforeAll(() => Logger.overrideLogger(false));

  it('a commit is one fsynced change-log record, visible only after it; the YAML files are checkpoints', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, 'w1'));
      expect(store.devices.size).toBe(0); // not visible before the commit
    });
    expect(fs.writes).toEqual([['/s/ledger.wal', 'append']]);
    expect(walLines(fs)).toHaveLength(1);
    // The first record after a checkpoint also names the files it goes with (b) and the values
    // before (p), so a start can tell an entry edited by hand while stopped from one left as it was.
    expect(walLines(fs)[0]).toMatch(/^[0-9a-f]{8} \{"seq":1,"b":\{"d":"","w":""\},"p":\{"d":\{"02:00:00:00:00:01":null\},"w":\{"w1":null\}\},"d":\{"02:00:00:00:00:01":/);
    expect(store.boundMacByWorker().get('w1')).toBe(M1);
    await store.checkpoint();
    expect(fs.files.get('/s/devices.yml')).toContain(`"${M1}": {"mac":"${M1}"`);
    expect(fs.files.get('/s/workers.yml')).toContain('"w1": {"worker_id":"w1"');
    expect(fs.files.get('/s/ledger.wal')).toBe('');
  });

  it('IPXE_CP_CHECKPOINT_MS=0 rewrites both files on every commit', async () => {
    const { fs, store } = await setup(new MemFs(), { IPXE_CP_CHECKPOINT_MS: '0' });
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, 'w1'));
    });
    expect(fs.writes.map(([f, k]) => `${f}:${k}`)).toEqual(['/s/ledger.wal:append', '/s/devices.yml:atomic', '/s/workers.yml:atomic']);
    expect(fs.files.get('/s/ledger.wal')).toBe('');
  });

  it('a full disk fails the commit with 507 and changes nothing', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => tx.devices.set(M1, device(M1, null)));
    const wal = fs.files.get('/s/ledger.wal');
    fs.failOn = 'ledger.wal';
    const err = await store
      .commit((tx) => {
        tx.workers.set('w1', worker('w1'));
        tx.devices.set(M1, device(M1, 'w1'));
      })
      .catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.getStatus()).toBe(507);
    expect(err.message).toMatch(/no space left writing \/s\/ledger\.wal \(ENOSPC\); nothing was changed/);
    expect(fs.files.get('/s/ledger.wal')).toBe(wal);
    expect(store.devices.get(M1)?.state).toBe('pooled');
    expect(store.workers.size).toBe(0);
    fs.failOn = null; // space is back: works without a restart
    await store.commit((tx) => tx.workers.set('w1', worker('w1')));
    expect(store.workers.size).toBe(1);
  });

  it('a thrown error inside the transaction writes nothing', async () => {
    const { fs, store } = await setup();
    await expect(
      store.commit((tx) => {
        tx.workers.set('w1', worker('w1'));
        throw new Error('409');
      }),
    ).rejects.toThrow('409');
    expect(fs.writes).toEqual([]);
  });

  it('keeps report telemetry written during a transaction (three-way merge) and logs it in batches', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, null));
    });
    await store.commit(async (tx) => {
      const d = tx.devices.get(M1)!;
      store.devices.touch(M1, { ...d, last_seen: '2026-11-30T00:00:00+00:00' }); // a report lands meanwhile
      tx.devices.set(d.mac, { ...d, state: 'bound', bound_worker_id: 'w1' });
    });
    expect(store.devices.get(M1)).toMatchObject({ state: 'bound', last_seen: '2026-11-30T00:00:00+00:00' });
    expect(walLines(fs)[1]).toContain('"last_seen":"2026-11-30T00:00:00+00:00"');
    expect(store.devices.dirtyKeys.size).toBe(0);
    store.devices.touch(M1, { ...store.devices.get(M1)!, last_seen: 'later' });
    store.scheduleFlush();
    await new Promise((r) => setTimeout(r, 20));
    await store.exclusive(() => undefined);
    expect(walLines(fs)).toHaveLength(3);
    expect(walLines(fs)[2]).toContain('"last_seen":"later"');
  });

  it('a report that lands while the telemetry flush writes is logged by the next flush; a flush that fails keeps its devices to log', async () => {
    let whileWriting: (() => void) | null = null;
    class Racing extends MemFs {
      override async appendDurable(f: string, d: string | Buffer | readonly Buffer[]) {
        const during = whileWriting;
        whileWriting = null;
        during?.();
        return super.appendDurable(f, d);
      }
    }
    const { fs, store } = await setup(new Racing());
    await store.commit((tx) => {
      tx.devices.set(M1, device(M1, null));
      tx.devices.set(M2, device(M2, null));
    });
    const seen = (mac: string, at: string) => store.devices.touch(mac, { ...store.devices.get(mac)!, last_seen: at });
    seen(M1, 'a1');
    whileWriting = () => seen(M1, 'a2');
    await store.flushTelemetry();
    expect(walLines(fs)[1]).toContain('"last_seen":"a1"');
    expect([...store.devices.dirtyKeys]).toEqual([M1]);
    await store.flushTelemetry();
    expect(walLines(fs)[2]).toContain('"last_seen":"a2"');
    expect(store.devices.dirtyKeys.size).toBe(0);
    // A write that fails: its devices are still to log, with those seen since.
    seen(M2, 'b1');
    fs.failOn = 'ledger.wal';
    await expect(store.flushTelemetry()).rejects.toThrow(/no space left/);
    seen(M1, 'a3');
    expect([...store.devices.dirtyKeys].sort()).toEqual([M1, M2]);
    fs.failOn = null;
    await store.flushTelemetry();
    expect(walLines(fs)).toHaveLength(4);
    expect(walLines(fs)[3]).toContain('"last_seen":"b1"');
    expect(walLines(fs)[3]).toContain('"last_seen":"a3"');
    expect(store.devices.dirtyKeys.size).toBe(0);
  });

  it(`a storm's telemetry goes as records of ${TELEMETRY_PER_RECORD} devices in one append; a restart replays them, and a kill mid-append keeps the whole records before it`, async () => {
    const { fs, store } = await setup();
    const macs = Array.from({ length: 450 }, (_, i) => `02:00:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`);
    await store.commit((tx) => {
      for (const m of macs) tx.devices.set(m, device(m, null));
    });
    for (const m of macs) store.devices.touch(m, { ...store.devices.get(m)!, last_seen: `seen-${m}` });
    const appends = fs.writes.length;
    store.scheduleFlush();
    await new Promise((r) => setTimeout(r, 20));
    await store.exclusive(() => undefined);
    expect(store.devices.dirtyKeys.size).toBe(0);
    // One append (one fdatasync) of three records: 200, 200, 50 devices, numbered on.
    expect(fs.writes.slice(appends)).toEqual([['/s/ledger.wal', 'append']]);
    const recs = walLines(fs).slice(1).map((l) => JSON.parse(l.slice(9)) as { seq: number; d: Record<string, DeviceRecord> });
    expect(recs.map((r) => [r.seq, Object.keys(r.d).length])).toEqual([[2, 200], [3, 200], [4, 50]]);
    expect(recs.flatMap((r) => Object.keys(r.d))).toEqual(macs);
    // The files as a kill -9 would leave them, in a MemFs of their own each.
    const copy = () => {
      const c = new MemFs();
      for (const [f, v] of fs.files) c.edit(f, v);
      return c;
    };
    const again = (await setup(copy())).store;
    expect(macs.filter((m) => again.devices.get(m)?.last_seen !== `seen-${m}`)).toEqual([]);
    // Killed while the third record was written: the first two records' telemetry is kept.
    const lines = fs.files.get('/s/ledger.wal')!.split('\n').filter(Boolean);
    const torn = copy();
    torn.edit('/s/ledger.wal', `${lines.slice(0, 3).join('\n')}\n${lines[3].slice(0, 100)}`);
    const cut = (await setup(torn)).store;
    expect(macs.filter((m) => cut.devices.get(m)?.last_seen === `seen-${m}`)).toEqual(macs.slice(0, 400));
  });

  it('registrations of a storm share one change-log record', async () => {
    const { fs, store } = await setup();
    const macs = Array.from({ length: 50 }, (_, i) => `02:00:00:00:01:${i.toString(16).padStart(2, '0')}`);
    const created = await Promise.all([...macs, macs[0]].map((m) => store.register(device(m, null))));
    expect(created.filter(Boolean)).toHaveLength(50);
    expect(walLines(fs)).toHaveLength(1);
    expect(store.devices.size).toBe(50);
  });

  it('a restart replays the change log; a torn last record is cut', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, 'w1'));
    });
    await store.commit((tx) => tx.devices.set(M2, device(M2, null)));
    const full = fs.files.get('/s/ledger.wal')!;
    fs.edit('/s/ledger.wal', full + full.split('\n')[1].slice(0, 40)); // a kill mid-append
    const again = (await setup(fs)).store;
    expect(again.devices.get(M1)?.bound_worker_id).toBe('w1');
    expect(again.devices.get(M2)?.state).toBe('pooled');
    expect(again.workers.get('w1')).toBeDefined();
    // The replay was checkpointed and the log emptied.
    expect(fs.files.get('/s/devices.yml')).toContain(M2);
    expect(fs.files.get('/s/ledger.wal')).toBe('');
  });

  it('a damaged record before the last one stops the start naming the line', async () => {
    const fs = new MemFs();
    const { store } = await setup(fs);
    await store.commit((tx) => tx.devices.set(M1, device(M1, null)));
    await store.commit((tx) => tx.devices.set(M2, device(M2, null)));
    const [a, b] = walLines(fs);
    fs.edit('/s/ledger.wal', `${a.replace('pooled', 'bound!')}\n${b}\n`);
    await expect(setup(fs)).rejects.toThrow(/ledger\.wal:1: damaged change-log record/);
  });

  it('a checkpoint cut between devices.yml and workers.yml is repaired by the replay', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, 'w1'));
    });
    fs.failOn = 'workers.yml';
    await expect(store.checkpoint()).rejects.toBeTruthy();
    expect(fs.files.get('/s/devices.yml')).toContain('"bound_worker_id":"w1"');
    expect(fs.files.get('/s/workers.yml')).toBeUndefined();
    fs.failOn = null;
    const again = (await setup(fs)).store;
    expect(again.workers.get('w1')).toBeDefined();
    expect(again.devices.get(M1)?.bound_worker_id).toBe('w1');
  });

  it('start-up returns a device bound to a missing worker to the pool and refuses a worker bound twice', async () => {
    const fs = new MemFs();
    fs.edit('/s/workers.yml', 'workers:\n  w1: {"state":"registered"}\n');
    fs.edit(
      '/s/devices.yml',
      `devices:\n  "${M1}": {"state":"bound","bound_worker_id":"w1"}\n  "${M2}": {"state":"bound","bound_worker_id":"w1"}\n`,
    );
    await expect(setup(fs)).rejects.toThrow(/devices\.yml:3: worker "w1" is bound by two devices: 02:00:00:00:00:01 \(line 2\), 02:00:00:00:00:02 \(line 3\)/);
    // Several workers bound twice: the one that appears first is named, with all its devices.
    fs.edit('/s/workers.yml', 'workers:\n  w1: {"state":"registered"}\n  w2: {"state":"registered"}\n');
    const bound = (mac: string, w: string) => `  "${mac}": {"state":"bound","bound_worker_id":"${w}"}\n`;
    fs.edit('/s/devices.yml', `devices:\n${bound(M1, 'w2')}${bound(M2, 'w1')}${bound('02:00:00:00:00:03', 'w1')}${bound('02:00:00:00:00:04', 'w2')}${bound('02:00:00:00:00:05', 'w2')}`);
    await expect(setup(fs)).rejects.toThrow(
      /devices\.yml:5: worker "w2" is bound by two devices: 02:00:00:00:00:01 \(line 2\), 02:00:00:00:00:04 \(line 5\), 02:00:00:00:00:05 \(line 6\)/,
    );
    fs.edit('/s/devices.yml', `devices:\n  "${M1}": {"state":"bound","bound_worker_id":"gone"}\n`);
    const { store } = await setup(fs);
    expect(store.devices.get(M1)).toMatchObject({ state: 'pooled', bound_worker_id: null });
    expect(fs.files.get('/s/devices.yml')).toContain('"state":"pooled"');
  });

  it('merges a hand edit key by key with commits that are only in the change log', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.devices.set(M1, device(M1, null));
      tx.workers.set('w1', worker('w1'));
    });
    await store.checkpoint();
    await store.commit((tx) => tx.devices.set(M2, device(M2, null))); // in the log only
    // The operator edits the checkpoint they see: M1 gets a serial.
    const text = fs.files.get('/s/devices.yml')!.replace('"serial":null', '"serial":"HAND"');
    fs.edit('/s/devices.yml', text);
    await store.commit((tx) => tx.workers.set('w2', worker('w2')));
    expect(store.devices.get(M1)?.fingerprint.serial).toBe('HAND');
    expect(store.devices.get(M2)).toBeDefined();
    await store.checkpoint();
    expect(fs.files.get('/s/devices.yml')).toContain('"serial":"HAND"');
    expect(fs.files.get('/s/devices.yml')).toContain(M2);
  });

  it('last_seen moved in place (a report of the same machine) survives a hand edit of another record; a hand edit of its own facts wins', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.devices.set(M1, device(M1, null, 'old'));
      tx.devices.set(M2, device(M2, null, 'old'));
    });
    await store.checkpoint();
    const d1 = store.devices.get(M1)!;
    store.devices.touchInPlace(M1, d1, (r) => (r.last_seen = 'new'));
    expect(store.devices.get(M1)).toBe(d1); // no copy
    expect(store.devices.dirtyKeys.has(M1)).toBe(true);
    expect(() => store.devices.touchInPlace(M2, d1, () => undefined)).toThrow(/not the record in memory/);
    // The operator edits M2 in the checkpoint (which still says last_seen "old" for M1).
    fs.edit('/s/devices.yml', fs.files.get('/s/devices.yml')!.replace(/("02:00:00:00:00:02": \{.*?)"serial":null/, '$1"serial":"HAND"'));
    await store.commit((tx) => tx.workers.set('w1', worker('w1')));
    expect(store.devices.get(M2)?.fingerprint.serial).toBe('HAND');
    expect(store.devices.get(M1)?.last_seen).toBe('new');
    // Moved in place again, then the operator revokes M1 by hand: their edit is taken.
    await store.checkpoint();
    const again = store.devices.get(M1)!;
    store.devices.touchInPlace(M1, again, (r) => (r.last_seen = 'newer'));
    fs.edit('/s/devices.yml', fs.files.get('/s/devices.yml')!.replace(/("02:00:00:00:00:01": \{.*?)"state":"pooled"/, '$1"state":"revoked"'));
    await store.commit((tx) => tx.workers.set('w2', worker('w2')));
    expect(store.devices.get(M1)?.state).toBe('revoked');
  });

  it('a broken hand edit blocks commits, telemetry flushes and checkpoints; the file is never rewritten', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => tx.devices.set(M1, device(M1, null)));
    await store.checkpoint();
    fs.edit('/s/devices.yml', 'devices:\n  - [broken\n');
    store.devices.touch(M1, { ...store.devices.get(M1)!, last_seen: 'x' });
    store.scheduleFlush();
    await new Promise((r) => setTimeout(r, 20));
    await store.exclusive(() => undefined);
    await store.checkpoint();
    const err = await store.commit((tx) => tx.devices.set(M2, device(M2, null))).catch((e) => e);
    expect(err.getStatus()).toBe(500);
    expect(err.message).toMatch(/devices\.yml:\d+/);
    expect(fs.files.get('/s/devices.yml')).toBe('devices:\n  - [broken\n');
    expect(walLines(fs)).toHaveLength(0);
    fs.edit('/s/devices.yml', `devices:\n  "${M1}": {"state":"pooled","serial":"fixed"}\n`);
    await store.commit((tx) => tx.devices.set(M2, device(M2, null)));
    expect(store.devices.size).toBe(2);
  });

  it('a hand edit binding one worker twice blocks writes naming both lines; one to a missing worker is undone', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, 'w1'));
      tx.devices.set(M2, device(M2, null));
    });
    await store.checkpoint();
    const good = fs.files.get('/s/devices.yml')!;
    const lines = good.split('\n');
    const l2 = lines.findIndex((l) => l.includes(`"${M2}"`));
    lines[l2] = lines[l2].replace('"state":"pooled","bound_worker_id":null', '"state":"bound","bound_worker_id":"w1"');
    fs.edit('/s/devices.yml', lines.join('\n'));
    const err = await store.commit((tx) => tx.workers.set('w2', worker('w2'))).catch((e) => e);
    expect(err.message).toMatch(new RegExp(`devices\\.yml:${l2 + 1}: worker "w1" is bound by two devices`));
    expect(store.devices.get(M2)?.state).toBe('pooled'); // memory keeps the last good state
    lines[l2] = lines[l2].replace('"bound_worker_id":"w1"', '"bound_worker_id":"ghost"');
    fs.edit('/s/devices.yml', lines.join('\n'));
    const changed = jest.fn();
    store.onExternalChange(changed);
    store.read();
    expect(store.devices.get(M2)).toMatchObject({ state: 'pooled', bound_worker_id: null });
    expect(changed).toHaveBeenCalled();
    await store.exclusive(() => undefined); // the repair is logged and checkpointed
    expect(fs.files.get('/s/devices.yml')).not.toContain('ghost');
  });
});

describe('LedgerRepository reads under load', () => {
  beforeAll(() => Logger.overrideLogger(false));

  it('reads closer together than 200 ms never stat the files on the event loop; a hand edit is still merged by a later read', async () => {
    const { fs, store } = await setup();
    await store.commit((tx) => {
      tx.workers.set('w1', worker('w1'));
      tx.devices.set(M1, device(M1, 'w1'));
    });
    await store.checkpoint();
    const sync = jest.spyOn(fs, 'statSync');
    const tick = () => new Promise((r) => setTimeout(r, 2));
    // A storm: a read every few ms for 700 ms.
    const end = performance.now() + 700;
    while (performance.now() < end) {
      store.read();
      await tick();
    }
    expect(sync.mock.calls.length).toBeLessThanOrEqual(2); // at most the first, idle read's check
    expect(fs.asyncStats).toBeGreaterThanOrEqual(4); // every 200 ms, off the loop
    // An operator adds a device by hand in the middle of the storm.
    fs.handEdit('/s/devices.yml', (fs.files.get('/s/devices.yml') ?? '') + `  "${M2}": {"state":"pooled"}\n`);
    let seen = false;
    for (const stop = performance.now() + 2000; !seen && performance.now() < stop; await tick()) seen = store.read().devices.get(M2) !== undefined;
    expect(seen).toBe(true);
    sync.mockRestore();
  });
});
