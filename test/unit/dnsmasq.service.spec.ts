import { FileLedgerRepository } from '../../src/control-plane/repositories/ledger/file-ledger.repository';
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { AppConfig, loadConfig } from '../../src/control-plane/config/app-config';
import { DnsmasqService } from '../../src/control-plane/dnsmasq/dnsmasq.service';
import { HttpAdapterHost } from '@nestjs/core';
import { Serving } from '../../src/control-plane/common/serving';
import { ProcessRunner } from '../../src/shared/process-runner';
import { MemFs } from '../helpers/mem-fs';
import { until } from '../helpers/poll';
import { LedgerRepository } from '../../src/control-plane/repositories/ledger/ledger.repository';
import { DeviceRecord, newDevice, newWorker, WorkerRecord } from '../../src/control-plane/repositories/ledger/records';

class FakeRunner extends ProcessRunner {
  calls: string[][] = [];
  signals: [number, string][] = [];
  fail = false;
  /** While set, a run waits for it (a slow `docker exec`). */
  gate: Promise<void> | null = null;
  override async run(cmd: string, args: string[]) {
    this.calls.push([cmd, ...args]);
    if (this.gate) await this.gate;
    if (this.fail) throw new Error('boom');
    return { stdout: '', stderr: '' };
  }
  override signal(pid: number, sig: NodeJS.Signals) {
    this.signals.push([pid, sig]);
  }
}

/** Serving whose server starts listening when the test says so. */
class StartedServing extends Serving {
  private waiting: (() => void)[] = [];
  constructor() {
    super(null as unknown as HttpAdapterHost);
  }
  override whenListening(fn: () => void): void {
    this.waiting.push(fn);
  }
  listen(): void {
    for (const fn of this.waiting.splice(0)) setImmediate(fn);
  }
}

function setup(env: Record<string, string>) {
  const config: AppConfig = loadConfig({ IPXE_CP_STATE_DIR: '/s', IPXE_CP_DNSMASQ_DIR: '/d', ...env });
  const fs = new MemFs();
  const store = new FileLedgerRepository(config, fs);
  const runner = new FakeRunner();
  const serving = new StartedServing();
  const svc = new DnsmasqService(config, fs, store, runner, serving);
  const device = (mac: string, worker: string | null): DeviceRecord => newDevice(mac, { state: worker ? 'bound' : 'pooled', bound_worker_id: worker });
  const worker = (id: string, hostname = id): WorkerRecord => newWorker(id, { hostname });
  const put = async (devices: DeviceRecord[], workers: WorkerRecord[]) =>
    store.commit((tx) => {
      for (const w of workers) tx.workers.set(w.worker_id, w);
      for (const d of devices) tx.devices.set(d.mac, d);
    });
  return { svc, fs, runner, put, device, worker, serving };
}

/** A sync's outcome once its reload has run. */
const settled = async (r: { changed: boolean; reload: Promise<string | undefined> }) => {
  const reloadError = await r.reload;
  return reloadError === undefined ? { changed: r.changed } : { changed: r.changed, reloadError };
};

describe('DnsmasqService', () => {
  // The service logs failed reloads; these tests provoke them on purpose.
  beforeAll(() => Logger.overrideLogger(false));

  it('renders bound devices only, sorted by hostname, as mac,hostname lines', async () => {
    const s = setup({});
    await s.put(
      [s.device('02:00:00:00:00:02', 'b'), s.device('02:00:00:00:00:01', 'a'), s.device('02:00:00:00:00:03', null)],
      [s.worker('a', 'zeta'), s.worker('b', 'alpha')],
    );
    expect(s.svc.render()).toBe('02:00:00:00:00:02,alpha\n02:00:00:00:00:01,zeta\n');
  });

  it('the incremental projection always equals a from-scratch render of the ledger (property)', async () => {
    const op = fc.record({
      kind: fc.constantFrom('bind', 'unbind', 'rename', 'delete', 'create', 'warm'),
      mac: fc.integer({ min: 0, max: 7 }),
      worker: fc.integer({ min: 0, max: 5 }),
      host: fc.constantFrom('a', 'b', 'zz', 'ab', 'a-1', 'm'),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
        const s = setup({});
        const macs = Array.from({ length: 8 }, (_, i) => `02:00:00:00:00:0${i}`);
        await s.put(macs.map((m) => s.device(m, null)), []);
        const store = (s.svc as unknown as { store: LedgerRepository }).store;
        for (const o of ops) {
          const id = `w${o.worker}`;
          const mac = macs[o.mac];
          if (o.kind === 'warm') {
            // The index made in the background after start, at any point between changes.
            await (s.svc as unknown as { warmIndex(): Promise<void> }).warmIndex();
          }
          await store.commit((tx) => {
            const w = tx.workers.get(id);
            const d = tx.devices.get(mac)!;
            const boundTo = [...tx.devices.values()].find((x) => x.bound_worker_id === id);
            const hostTaken = [...tx.workers.values()].some((x) => x.hostname === `${o.host}${o.worker}` && x.worker_id !== id);
            if (o.kind === 'create' && !w) tx.workers.set(id, s.worker(id));
            if (o.kind === 'rename' && w && !hostTaken) tx.workers.set(id, { ...w, hostname: `${o.host}${o.worker}` });
            if (o.kind === 'delete' && w) {
              tx.workers.delete(id);
              if (boundTo) tx.devices.set(boundTo.mac, { ...boundTo, state: 'pooled', bound_worker_id: null });
            }
            if (o.kind === 'bind' && w && !boundTo && !d.bound_worker_id) tx.devices.set(mac, { ...d, state: 'bound', bound_worker_id: id });
            if (o.kind === 'unbind' && d.bound_worker_id) tx.devices.set(mac, { ...d, state: 'pooled', bound_worker_id: null });
          });
          await s.svc.sync();
          const expected = [...store.devices.values()]
            .filter((d) => d.bound_worker_id)
            .map((d) => [store.workers.get(d.bound_worker_id!)!.hostname, d.mac])
            .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
            .map(([h, m]) => `${m},${h}\n`)
            .join('');
          expect(s.fs.files.get('/d/dhcp-hosts.conf') ?? '').toBe(expected);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('start derives the file alone; the index follows once the server listens, without writing the file again, and a change after it is incremental', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' });
    await s.put([s.device('02:00:00:00:00:02', 'b'), s.device('02:00:00:00:00:01', 'a')], [s.worker('a', 'zeta'), s.worker('b', 'alpha')]);
    const svc = s.svc as unknown as { unindexed: unknown[] | null; rebuild(): void; workerByMac: Map<string, string> };
    let rebuilds = 0;
    const rebuild = svc.rebuild.bind(svc);
    svc.rebuild = () => (rebuilds++, rebuild());
    await s.svc.onModuleInit();
    expect(s.fs.files.get('/d/dhcp-hosts.conf')).toBe('02:00:00:00:00:02,alpha\n02:00:00:00:00:01,zeta\n');
    expect([svc.unindexed?.length, svc.workerByMac.size]).toEqual([2, 0]);
    s.serving.listen();
    expect(await until(async () => svc.unindexed === null, 5000)).toBe(true);
    expect([...svc.workerByMac]).toEqual([['02:00:00:00:00:02', 'b'], ['02:00:00:00:00:01', 'a']]);
    expect(rebuilds).toBe(1);
    expect(s.runner.calls).toHaveLength(1); // the start's write only
    expect(s.fs.writes.filter(([f]) => f === '/d/dhcp-hosts.conf')).toHaveLength(1);
    await s.put([s.device('02:00:00:00:00:03', 'c')], [s.worker('c', 'beta')]);
    expect(await settled(await s.svc.sync())).toEqual({ changed: true });
    expect(rebuilds).toBe(1);
    expect(s.fs.files.get('/d/dhcp-hosts.conf')).toBe('02:00:00:00:00:02,alpha\n02:00:00:00:00:03,beta\n02:00:00:00:00:01,zeta\n');
  });

  it('a change while the index is built slice by slice builds it at once; the slices stop and never install theirs', async () => {
    const s = setup({});
    const n = 12_000; // more than two slices
    const macOf = (i: number) => `02:00:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;
    await s.put(Array.from({ length: n }, (_, i) => s.device(macOf(i), `w${i}`)), Array.from({ length: n }, (_, i) => s.worker(`w${i}`, `h${i}`)));
    const svc = s.svc as unknown as { warmIndex(): Promise<void>; install(idx: unknown): void; unindexed: unknown[] | null };
    let warming: Promise<void> | null = null;
    const warm = svc.warmIndex.bind(svc);
    svc.warmIndex = () => (warming = warm());
    await s.svc.onModuleInit();
    const installs: unknown[] = [];
    const install = svc.install.bind(svc);
    svc.install = (idx) => (installs.push(idx), install(idx));
    s.serving.listen();
    // The first slice runs on the turn after listening; the change lands before the last one.
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(warming).not.toBeNull();
    expect(svc.unindexed).not.toBeNull();
    const store = (s.svc as unknown as { store: LedgerRepository }).store;
    await store.commit((tx) => tx.workers.set('w7', { ...tx.workers.get('w7')!, hostname: 'a-first' }));
    await settled(await s.svc.sync());
    expect(installs).toHaveLength(1);
    await warming;
    expect(installs).toHaveLength(1);
    const expected = Array.from({ length: n }, (_, i) => [i === 7 ? 'a-first' : `h${i}`, macOf(i)])
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map(([h, m]) => `${m},${h}\n`)
      .join('');
    expect(s.fs.files.get('/d/dhcp-hosts.conf')).toBe(expected);
    // The index answers the next change incrementally, exactly.
    await store.commit((tx) => tx.devices.set(macOf(3), { ...tx.devices.get(macOf(3))!, state: 'pooled', bound_worker_id: null }));
    await settled(await s.svc.sync());
    expect(s.fs.files.get('/d/dhcp-hosts.conf')).toBe(expected.replace(`${macOf(3)},h3\n`, ''));
    expect(installs).toHaveLength(1);
  });

  it('atomic mode swaps the file by link and makes it durable off the answer path: after a quiet second, or at shutdown', async () => {
    const s = setup({});
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    await settled(await s.svc.sync());
    expect(s.fs.writes.filter(([f]) => f === '/d/dhcp-hosts.conf')).toEqual([['/d/dhcp-hosts.conf', 'link']]);
    expect(s.fs.synced).toEqual([]); // not in the change's own path
    expect(await until(async () => s.fs.synced.length === 1, 5000)).toBe(true);
    expect(s.fs.synced).toEqual(['/d/dhcp-hosts.conf']);
    // A change right before shutdown is made durable by the shutdown.
    await s.put([s.device('02:00:00:00:00:02', 'b')], [s.worker('b')]);
    await settled(await s.svc.sync());
    await s.svc.onApplicationShutdown();
    expect(s.fs.synced).toEqual(['/d/dhcp-hosts.conf', '/d/dhcp-hosts.conf']);
  });

  it('docker strategy execs killall -HUP in the container, once per change', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' });
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    expect(await settled(await s.svc.sync())).toEqual({ changed: true });
    expect(await settled(await s.svc.sync())).toEqual({ changed: false });
    expect(s.runner.calls).toEqual([['docker', 'exec', 'ipxe-dnsmasq', 'killall', '-HUP', 'dnsmasq']]);
  });

  it('reloads are coalesced: changes made while one runs share the next one, and sync never waits for them', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' });
    let open!: () => void;
    s.runner.gate = new Promise<void>((r) => (open = r));
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    const first = await s.svc.sync(); // returns with the reload still running
    const later = [];
    for (let i = 2; i <= 6; i++) {
      await s.put([s.device(`02:00:00:00:00:0${i}`, `w${i}`)], [s.worker(`w${i}`)]);
      later.push(await s.svc.sync());
    }
    expect(later.every((r) => r.changed)).toBe(true);
    expect(s.runner.calls).toHaveLength(1);
    expect(new Set(later.map((r) => r.reload)).size).toBe(1); // one queued reload for all five
    s.runner.gate = null;
    open();
    expect(await Promise.all([first.reload, ...later.map((r) => r.reload)])).toEqual([undefined, undefined, undefined, undefined, undefined, undefined]);
    expect(s.runner.calls).toHaveLength(2);
    // Idle again: the next change gets a reload of its own.
    await s.put([s.device('02:00:00:00:00:07', 'w7')], [s.worker('w7')]);
    expect(await settled(await s.svc.sync())).toEqual({ changed: true });
    expect(s.runner.calls).toHaveLength(3);
  });

  it('pidfile strategy signals the pid read from the file; a bad pidfile is a reload error', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'pidfile:/run/dnsmasq.pid' });
    s.fs.files.set('/run/dnsmasq.pid', '4242\n');
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    expect(await settled(await s.svc.sync())).toEqual({ changed: true });
    expect(s.runner.signals).toEqual([[4242, 'SIGHUP']]);
    s.fs.files.set('/run/dnsmasq.pid', 'garbage');
    await s.put([s.device('02:00:00:00:00:02', 'b')], [s.worker('b')]);
    const r = await settled(await s.svc.sync());
    expect(r.changed).toBe(true);
    expect(r.reloadError).toContain('/run/dnsmasq.pid');
    expect(s.fs.files.get('/d/dhcp-hosts.conf')).toContain('02:00:00:00:00:02,b');
  });

  it('command strategy runs through /bin/sh; inplace mode writes in place', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'command:systemctl reload dnsmasq', IPXE_CP_DNSMASQ_WRITE_MODE: 'inplace' });
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    s.runner.fail = true;
    const r = await settled(await s.svc.sync());
    expect(s.runner.calls).toEqual([['/bin/sh', '-c', 'systemctl reload dnsmasq']]);
    expect(r.reloadError).toBe('boom');
    expect(s.fs.writes.filter(([f]) => f === '/d/dhcp-hosts.conf')).toEqual([['/d/dhcp-hosts.conf', 'inplace']]);
  });
});
