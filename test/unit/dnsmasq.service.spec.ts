import { Logger } from '@nestjs/common';
import { AppConfig, loadConfig } from '../../src/config/app-config';
import { DnsmasqService } from '../../src/dnsmasq/dnsmasq.service';
import { ProcessRunner } from '../../src/common/process-runner';
import { FileSystem } from '../../src/store/file-system';
import { LedgerStore } from '../../src/store/ledger.store';
import { DeviceRecord, newDevice, newWorker, WorkerRecord } from '../../src/store/records';

/** In-memory FileSystem: the service never touches the disk. */
class MemFs extends FileSystem {
  files = new Map<string, string>();
  writes: [string, 'atomic' | 'inplace'][] = [];
  override readTextSync(f: string) {
    return this.files.get(f) ?? null;
  }
  override async readText(f: string) {
    return this.files.get(f) ?? null;
  }
  override statSync() {
    return null;
  }
  override mkdirpSync() {}
  override async writeAtomic(f: string, data: string | Buffer) {
    const d = data.toString();
    this.files.set(f, d);
    this.writes.push([f, 'atomic']);
  }
  override async writeInPlace(f: string, d: string) {
    this.files.set(f, d);
    this.writes.push([f, 'inplace']);
  }
}

class FakeRunner extends ProcessRunner {
  calls: string[][] = [];
  signals: [number, string][] = [];
  fail = false;
  override async run(cmd: string, args: string[]) {
    this.calls.push([cmd, ...args]);
    if (this.fail) throw new Error('boom');
    return { stdout: '', stderr: '' };
  }
  override signal(pid: number, sig: NodeJS.Signals) {
    this.signals.push([pid, sig]);
  }
}

function setup(env: Record<string, string>) {
  const config: AppConfig = loadConfig({ IPXE_CP_STATE_DIR: '/s', IPXE_CP_DNSMASQ_DIR: '/d', ...env });
  const fs = new MemFs();
  const store = new LedgerStore(config, fs);
  const runner = new FakeRunner();
  const svc = new DnsmasqService(config, fs, store, runner);
  const device = (mac: string, worker: string | null): DeviceRecord => newDevice(mac, { state: worker ? 'bound' : 'pooled', bound_worker_id: worker });
  const worker = (id: string, hostname = id): WorkerRecord => newWorker(id, { hostname });
  const put = async (devices: DeviceRecord[], workers: WorkerRecord[]) =>
    store.commit((tx) => {
      for (const w of workers) tx.workers.set(w.worker_id, w);
      for (const d of devices) tx.devices.set(d.mac, d);
    });
  return { svc, fs, runner, put, device, worker };
}

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

  it('docker strategy execs killall -HUP in the container, once per change', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' });
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    expect(await s.svc.sync()).toEqual({ changed: true });
    expect(await s.svc.sync()).toEqual({ changed: false });
    expect(s.runner.calls).toEqual([['docker', 'exec', 'ipxe-dnsmasq', 'killall', '-HUP', 'dnsmasq']]);
  });

  it('pidfile strategy signals the pid read from the file; a bad pidfile is a reload error', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'pidfile:/run/dnsmasq.pid' });
    s.fs.files.set('/run/dnsmasq.pid', '4242\n');
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    expect(await s.svc.sync()).toEqual({ changed: true });
    expect(s.runner.signals).toEqual([[4242, 'SIGHUP']]);
    s.fs.files.set('/run/dnsmasq.pid', 'garbage');
    await s.put([s.device('02:00:00:00:00:02', 'b')], [s.worker('b')]);
    const r = await s.svc.sync();
    expect(r.changed).toBe(true);
    expect(r.reloadError).toContain('/run/dnsmasq.pid');
    expect(s.fs.files.get('/d/dhcp-hosts.conf')).toContain('02:00:00:00:00:02,b');
  });

  it('command strategy runs through /bin/sh; inplace mode writes in place', async () => {
    const s = setup({ IPXE_CP_DNSMASQ_RELOAD: 'command:systemctl reload dnsmasq', IPXE_CP_DNSMASQ_WRITE_MODE: 'inplace' });
    await s.put([s.device('02:00:00:00:00:01', 'a')], [s.worker('a')]);
    s.runner.fail = true;
    const r = await s.svc.sync();
    expect(s.runner.calls).toEqual([['/bin/sh', '-c', 'systemctl reload dnsmasq']]);
    expect(r.reloadError).toBe('boom');
    expect(s.fs.writes.filter(([f]) => f === '/d/dhcp-hosts.conf')).toEqual([['/d/dhcp-hosts.conf', 'inplace']]);
  });
});
