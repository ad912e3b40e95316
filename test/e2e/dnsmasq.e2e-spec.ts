import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { startApp, tempDir, TestApp } from '../helpers/app';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(fn: () => T | undefined | false, what: string, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('dnsmasq projection and reload strategies (real dnsmasq)', () => {
  let t: TestApp;
  afterEach(() => t?.close());

  describe('pidfile: SIGHUP to a real dnsmasq serving DHCP in a private network namespace', () => {
    const ns = `kurrent-t${process.pid}`;
    let dir: string;
    let dnsmasq: ChildProcess;
    const log = () => (fs.existsSync(path.join(dir, 'dnsmasq.log')) ? fs.readFileSync(path.join(dir, 'dnsmasq.log'), 'utf8') : '');
    // Only reads that succeeded ("read FILE"), not "cannot read FILE".
    const reads = () => log().split('\n').filter((l) => l.endsWith(`]: read ${path.join(dir, 'dnsmasq/dhcp-hosts.conf')}`)).length;

    beforeAll(async () => {
      dir = tempDir();
      fs.mkdirSync(path.join(dir, 'dnsmasq'));
      fs.writeFileSync(path.join(dir, 'dnsmasq/dhcp-hosts.conf'), '');
      const ip = (...a: string[]) => execFileSync('ip', a, { stdio: 'pipe' });
      ip('netns', 'add', ns);
      ip('-n', ns, 'link', 'add', 'kv0', 'type', 'veth', 'peer', 'name', 'kv1');
      ip('-n', ns, 'addr', 'add', '10.231.0.1/24', 'dev', 'kv0');
      ip('-n', ns, 'link', 'set', 'kv0', 'up');
      ip('-n', ns, 'link', 'set', 'kv1', 'up');
      dnsmasq = spawn('ip', [
        'netns', 'exec', ns, 'dnsmasq', '--keep-in-foreground', '--conf-file=/dev/null', '--user=root', '--port=0',
        '--interface=kv0', '--bind-interfaces', '--dhcp-range=10.231.0.50,10.231.0.60,12h',
        `--dhcp-hostsfile=${path.join(dir, 'dnsmasq/dhcp-hosts.conf')}`, `--pid-file=${path.join(dir, 'dnsmasq.pid')}`,
        `--log-facility=${path.join(dir, 'dnsmasq.log')}`, `--dhcp-leasefile=${path.join(dir, 'leases')}`,
      ], { stdio: 'ignore' });
      await waitFor(() => reads() >= 1, 'dnsmasq start');
    });

    afterAll(() => {
      dnsmasq?.kill('SIGTERM');
      try {
        execFileSync('ip', ['netns', 'del', ns]);
      } catch {
        /* already gone */
      }
    });

    it('reloads dnsmasq after each binding change and dnsmasq accepts every line', async () => {
      t = await startApp({ IPXE_CP_DNSMASQ_RELOAD: `pidfile:${path.join(dir, 'dnsmasq.pid')}` }, { dir });
      await t.req('POST', '/devices/import', { entries: [{ mac: '02:00:00:00:00:01' }, { mac: '02:00:00:00:00:02' }, { mac: '02:00:00:00:00:03' }] });
      const r0 = reads();
      expect((await t.req('POST', '/workers', { worker_id: 'lab_pc.1', mac: '02:00:00:00:00:01' })).status).toBe(201);
      await waitFor(() => reads() === r0 + 1, 'reload after create');
      expect((await t.req('POST', '/workers/batch', { count: 1, name_prefix: 'pc-', macs: ['02:00:00:00:00:02'] })).status).toBe(200);
      await waitFor(() => reads() === r0 + 2, 'reload after batch');
      // No change, no reload. A mutation answers after its SIGHUP went out, so a real change
      // after the no-op is a barrier: the next read is the change's (the command test below
      // counts reloads exactly).
      await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=lab_pc.1');
      expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:01,lab_pc.1\n02:00:00:00:00:02,pc-01\n');
      expect((await t.req('POST', '/workers', { worker_id: 'lab_pc.3', mac: '02:00:00:00:00:03' })).status).toBe(201);
      await waitFor(() => reads() >= r0 + 3, 'reload after the barrier');
      expect(reads()).toBe(r0 + 3);
      expect(log()).not.toMatch(/bad|illegal|error/i);
    });
  });

  it('a failed reload answers the documented 500 with the file and the ledger already updated', async () => {
    const dir = tempDir();
    t = await startApp({ IPXE_CP_DNSMASQ_RELOAD: `pidfile:${path.join(dir, 'missing.pid')}` }, { dir });
    await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
    await t.req('POST', '/workers', { worker_id: 'w1' });
    const r = await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=w1');
    expect(r.status).toBe(500);
    expect(r.body.message).toMatch(/^dnsmasq reload failed \(dhcp-hosts\.conf already updated\)/);
    expect(r.body.error_id).toBeUndefined();
    expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:01,w1\n');
    expect((await t.req('GET', '/devices/02:00:00:00:00:01')).body.state).toBe('bound');
    // The bind is committed with its entry; the failed reload is a fact of its own, right after it.
    const [bind, reload] = (await t.req('GET', '/operations')).body.entries.slice(-2);
    expect(bind).toMatchObject({ op: 'device.bind', status: 'ok', mac: '02:00:00:00:00:01', worker_id: 'w1' });
    expect(reload).toMatchObject({ op: 'dnsmasq.reload', status: 'failed', macs: ['02:00:00:00:00:01'], error: expect.stringMatching(/^dnsmasq reload failed: /) });
    expect(reload.id).toBe(bind.id + 1);
    const m = await t.req('PUT', '/workers/w1/mac', { mac: '02:00:00:00:00:01' });
    expect(m.status).toBe(200); // unchanged binding: no reload attempted
  });

  it('command: runs the command once per change (one reload for a batch delete)', async () => {
    const dir = tempDir();
    const marker = path.join(dir, 'reloads');
    t = await startApp({ IPXE_CP_DNSMASQ_RELOAD: `command:echo hup >> ${marker}` }, { dir });
    const count = () => (fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8').split('\n').filter(Boolean).length : 0);
    const start = count(); // start-up sync may reload once
    await t.req('POST', '/devices/import', { entries: [1, 2, 3].map((i) => ({ mac: `02:00:00:00:00:0${i}` })) });
    await t.req('POST', '/workers/batch', { count: 3, macs: ['02:00:00:00:00:01', '02:00:00:00:00:02', '02:00:00:00:00:03'] });
    expect(count()).toBe(start + 1);
    // A mutation answers after its reload ran: a no-op (the same binding again) ran none.
    expect((await t.req('POST', '/devices/02:00:00:00:00:01/bind?worker_id=worker-01')).status).toBe(200);
    expect(count()).toBe(start + 1);
    await t.req('POST', '/workers/delete/batch', { worker_ids: ['worker-01', 'worker-02', 'worker-03'] });
    expect(count()).toBe(start + 2);
    expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('');
  });

  it('a slow reload holds no lock: other writes go on meanwhile, and the changes made during it share one more reload', async () => {
    const dir = tempDir();
    const marker = path.join(dir, 'reloads');
    const gate = path.join(dir, 'gate');
    fs.writeFileSync(gate, ''); // open for the start-up sync
    // A reload that waits until the test opens the gate (a `docker exec` that takes its time).
    t = await startApp({ IPXE_CP_DNSMASQ_RELOAD: `command:echo hup >> ${marker}; while [ ! -f ${gate} ]; do sleep 0.05; done` }, { dir });
    const count = () => (fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8').split('\n').filter(Boolean).length : 0);
    await t.req('POST', '/devices/import', { entries: Array.from({ length: 11 }, (_, i) => ({ mac: `02:00:00:00:01:${String(i).padStart(2, '0')}` })) });
    await t.req('POST', '/workers/batch', { count: 11 });
    const start = count();
    fs.rmSync(gate);
    const first = t.req('POST', '/devices/02:00:00:00:01:00/bind?worker_id=worker-01');
    await waitFor(() => count() === start + 1, 'the first reload to start');
    // The first bind waits for its reload; the ledger does not: other writes are answered now.
    expect((await t.req('POST', '/devices', { mac: '02:00:00:00:02:00' })).status).toBe(201);
    const rest = Array.from({ length: 10 }, (_, i) => t.req('POST', `/devices/02:00:00:00:01:${String(i + 1).padStart(2, '0')}/bind?worker_id=worker-${String(i + 2).padStart(2, '0')}`));
    // All ten are committed and in dhcp-hosts.conf while the first reload still runs.
    await waitFor(() => t.read('dnsmasq/dhcp-hosts.conf').split('\n').filter(Boolean).length === 11, 'eleven lines in dhcp-hosts.conf');
    expect(count()).toBe(start + 1);
    fs.writeFileSync(gate, '');
    const answers = await Promise.all([first, ...rest]);
    expect(answers.map((r) => r.status)).toEqual(Array(11).fill(200));
    // One reload for the first change, one shared by the ten made while it ran.
    expect(count()).toBe(start + 2);
  });

  it('docker: runs the real docker client, whose failure (no engine here) is the documented 500', async () => {
    t = await startApp({ IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' });
    await t.req('POST', '/devices', { mac: '02:00:00:00:00:01' });
    const r = await t.req('POST', '/workers', { worker_id: 'w1', mac: '02:00:00:00:00:01' });
    expect(r.status).toBe(500);
    expect(r.body.message).toMatch(/^dnsmasq reload failed \(dhcp-hosts\.conf already updated\): docker exec failed: /);
    expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe('02:00:00:00:00:01,w1\n');
  });

  it('inplace mode keeps the inode (single-file bind mount); atomic mode swaps a symlink to the new content', async () => {
    const dir = tempDir();
    fs.mkdirSync(path.join(dir, 'dnsmasq'), { recursive: true });
    const file = path.join(dir, 'dnsmasq/dhcp-hosts.conf');
    fs.writeFileSync(file, '');
    const ino = fs.statSync(file).ino;
    t = await startApp({ IPXE_CP_DNSMASQ_WRITE_MODE: 'inplace' }, { dir });
    await t.req('POST', '/devices/import', { entries: [{ mac: '02:00:00:00:00:01' }, { mac: '02:00:00:00:00:02' }] });
    await t.req('POST', '/workers', { worker_id: 'a-very-long-hostname-to-shrink-later', mac: '02:00:00:00:00:01' });
    await t.req('POST', '/workers', { worker_id: 'w2', mac: '02:00:00:00:00:02' });
    await t.req('DELETE', '/workers/a-very-long-hostname-to-shrink-later');
    expect(fs.readFileSync(file, 'utf8')).toBe('02:00:00:00:00:02,w2\n');
    expect(fs.statSync(file).ino).toBe(ino);
    await t.close();
    t = await startApp({}, { dir });
    await t.req('DELETE', '/workers/w2');
    expect(fs.readFileSync(file, 'utf8')).toBe('');
    expect(fs.statSync(file).ino).not.toBe(ino);
    // Atomic mode swaps a symlink to a fresh data file (no rename over the data: see replaceViaLink); the previous data file is gone.
    expect(fs.lstatSync(file).isSymbolicLink()).toBe(true);
    expect(fs.readdirSync(path.dirname(file)).sort()).toEqual([fs.readlinkSync(file), 'dhcp-hosts.conf']);
  });
});
