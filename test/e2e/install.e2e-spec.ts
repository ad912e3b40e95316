import { ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describeFiles, freePort, tempDir } from '../helpers/app';

/**
 * The production install (deploy/install.sh and the systemd units) as a packager would check it,
 * staged under a temp root: the layout, units that `systemd-analyze verify` accepts, the installed
 * control plane and agent started as their units start them (same environment file, same
 * ExecStart, the same readiness check), and an upgrade that keeps the settings. (No systemd runs
 * here, so the units are verified, not started by systemd.)
 */

const root = path.join(__dirname, '../..');
const NODE = process.execPath;

/** The KEY=VALUE lines of an environment file, with the install paths moved under the staging root. */
function envFile(file: string, stage: string, extra: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const l of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(l);
    if (m) out[m[1]] = m[2].replace(/^\/(var|opt|srv)\//, `${stage}/$1/`);
  }
  return { PATH: process.env.PATH!, ...out, ...extra };
}

/** ExecStart / ExecStartPost of a unit, with @NODE@ already rendered, as argv. */
function execLines(unit: string, key: 'ExecStart' | 'ExecStartPost'): string[] {
  const line = unit.split('\n').find((l) => l.startsWith(`${key}=`))!;
  return line.slice(key.length + 1).split(' ');
}

describeFiles('production install: deploy/install.sh, systemd units, the installed services', () => {
  const stage = tempDir('kurrent-install-');
  const procs: ChildProcess[] = [];
  afterAll(() => {
    for (const p of procs) p.kill('SIGKILL');
  });

  const install = (...args: string[]) => execFileSync('sh', [path.join(root, 'deploy/install.sh'), '--root', stage, ...args], { cwd: root, encoding: 'utf8' });
  const unit = (name: string) => fs.readFileSync(path.join(stage, 'etc/systemd/system', name), 'utf8');
  /**
   * What systemd does with a unit, under the staging root: ExecStart in WorkingDirectory with the
   * settings file's environment, then ExecStartPost (the readiness check), whose result is returned.
   */
  const startUnit = (name: string, work: string, env: Record<string, string>) => {
    const staged = (args: string[]) => args.map((a) => a.replace(/^\/opt\//, `${stage}/opt/`));
    fs.mkdirSync(work, { recursive: true });
    const [node, ...args] = execLines(unit(name), 'ExecStart');
    procs.push(spawn(node, staged(args), { cwd: work, env, stdio: 'ignore' }));
    const [, ...check] = execLines(unit(name), 'ExecStartPost');
    return spawnSync(NODE, staged(check), { cwd: work, env, encoding: 'utf8' });
  };

  it('installs code, production dependencies only, units with this node, settings files and the dnsmasq snippet', () => {
    expect(install()).toMatch(/installed the control-plane in .*\/opt\/kurrent/);
    const app = path.join(stage, 'opt/kurrent');
    for (const f of ['dist/src/control-plane/start.js', 'dist/src/storage-agent/main.js', 'dist/scripts/wait-healthy.js', 'dist/scripts/store.js', 'web/dist/index.html', 'docker/tftp/boot.ipxe.cfg', 'LICENSE', 'NOTICE', 'bin/kurrent.js']) {
      expect([f, fs.existsSync(path.join(app, f))]).toEqual([f, true]);
    }
    expect(fs.existsSync(path.join(app, 'node_modules/@nestjs/core/package.json'))).toBe(true);
    for (const dev of ['jest', 'typescript', '@redocly/cli', 'playwright-core']) expect([dev, fs.existsSync(path.join(app, 'node_modules', dev))]).toEqual([dev, false]);
    expect(unit('kurrent-control-plane.service')).toContain(`ExecStart=${NODE} --max-semi-space-size=16 --single-threaded-gc /opt/kurrent/dist/src/control-plane/start.js`);
    expect(unit('kurrent-control-plane.service')).not.toContain('@NODE@');
    expect(fs.statSync(path.join(stage, 'etc/kurrent/control-plane.env')).mode & 0o777).toBe(0o640);
    expect(fs.readFileSync(path.join(stage, 'etc/dnsmasq.d/kurrent.conf'), 'utf8')).toContain('dhcp-hostsfile=/var/lib/kurrent/dnsmasq/dhcp-hosts.conf');
    expect(fs.readlinkSync(path.join(stage, 'usr/local/bin/kurrent'))).toBe('/opt/kurrent/bin/kurrent.js');
  });

  it('the unit starts the app exactly as npm run start:prod does (its environment, flags and script)', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    const [, env, node] = /^exec env ((?:[A-Z_]+=\S+ )+)node (.+)$/.exec(pkg.scripts['start:prod'])!;
    const prod = node.split(' ');
    expect(execLines(unit('kurrent-control-plane.service'), 'ExecStart')).toEqual([NODE, ...prod.slice(0, -1), `/opt/kurrent/${prod[prod.length - 1]}`]);
    expect(unit('kurrent-control-plane.service').split('\n')).toContain(`Environment=${env.trim()}`);
  });

  it('systemd-analyze verify accepts every unit (exit 0, nothing printed)', () => {
    install('--agent');
    const dir = path.join(stage, 'etc/systemd/system');
    const units = fs.readdirSync(dir).sort();
    expect(units).toEqual(['kurrent-agent.service', 'kurrent-control-plane.service', 'kurrent-dnsmasq-reload.path', 'kurrent-dnsmasq-reload.service']);
    const r = spawnSync('systemd-analyze', ['verify', ...units.map((u) => `./${u}`)], { cwd: dir, encoding: 'utf8' });
    expect([r.status, r.stdout + r.stderr]).toEqual([0, '']);
    // The hardening the control plane runs under.
    const cp = unit('kurrent-control-plane.service');
    for (const opt of ['User=kurrent', 'ProtectSystem=strict', 'ReadWritePaths=/var/lib/kurrent', 'NoNewPrivileges=yes', 'CapabilityBoundingSet=', 'Restart=on-failure', 'PrivateTmp=yes']) {
      expect(cp.split('\n')).toContain(opt);
    }
  });

  it('the installed control plane starts from its settings file and its readiness check passes; the installed CLI reaches it', async () => {
    const port = await freePort();
    const env = envFile(path.join(stage, 'etc/kurrent/control-plane.env'), stage, { IPXE_CP_PORT: String(port), IPXE_CP_HOST: '127.0.0.1' });
    const work = path.join(stage, 'var/lib/kurrent');
    const ready = startUnit('kurrent-control-plane.service', work, env);
    expect([ready.status, ready.stderr.trim()]).toEqual([0, `healthy: http://127.0.0.1:${port}/healthz`]);
    // The web UI and the spec it serves are the installed ones.
    expect((await fetch(`http://127.0.0.1:${port}/ui/`)).status).toBe(200);
    expect(await (await fetch(`http://127.0.0.1:${port}/openapi.json`)).json()).toEqual(JSON.parse(fs.readFileSync(path.join(root, 'openapi/control-plane.openapi.json'), 'utf8')));
    const cli = spawnSync(NODE, [path.join(stage, 'opt/kurrent/bin/kurrent.js'), '--url', `http://127.0.0.1:${port}`, '--json', 'workers', 'list'], { encoding: 'utf8' });
    expect([cli.status, JSON.parse(cli.stdout)]).toEqual([0, []]);
    // State lands where the settings say: under /var/lib/kurrent (the store's lock, then a first change).
    expect((await fetch(`http://127.0.0.1:${port}/devices`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ mac: '02:00:00:00:40:01' }) })).status).toBe(201);
    expect(fs.readdirSync(path.join(work, 'state'))).toEqual(expect.arrayContaining(['kurrent.lock', 'ledger.wal']));
  }, 60_000);

  it('the readiness check fails when nothing answers (exit 1 within its timeout)', () => {
    const env = envFile(path.join(stage, 'etc/kurrent/control-plane.env'), stage, { IPXE_CP_PORT: '9', IPXE_CP_HOST: '127.0.0.1' });
    const r = spawnSync(NODE, [path.join(stage, 'opt/kurrent/dist/scripts/wait-healthy.js'), '--timeout', '1'], { env, encoding: 'utf8' });
    expect([r.status, r.stderr.trim()]).toEqual([1, 'not healthy within 1 s: http://127.0.0.1:9/healthz']);
  });

  it('the installed agent starts from its settings file and passes its readiness check', async () => {
    const port = await freePort();
    const env = envFile(path.join(stage, 'etc/kurrent/agent.env'), stage, {
      IPXE_AGENT_PORT: String(port),
      IPXE_AGENT_HOST: '127.0.0.1',
      IPXE_AGENT_CONFIGFS_ROOT: path.join(stage, 'configfs'),
      IPXE_AGENT_LIO_SAVECONFIG: path.join(stage, 'etc/target/saveconfig.json'),
    });
    const ready = startUnit('kurrent-agent.service', path.join(stage, 'var/lib/kurrent-agent'), env);
    expect([ready.status, ready.stderr.trim()]).toEqual([0, `healthy: http://127.0.0.1:${port}/healthz`]);
    expect(fs.existsSync(path.join(stage, 'srv/kurrent/images'))).toBe(true);
  }, 60_000);

  it('an upgrade replaces the code and keeps the settings', () => {
    const envPath = path.join(stage, 'etc/kurrent/control-plane.env');
    fs.appendFileSync(envPath, 'IPXE_CP_TOKEN=kept-across-upgrades\n');
    const stale = path.join(stage, 'opt/kurrent/dist/stale-file.js');
    fs.writeFileSync(stale, '');
    install();
    expect(fs.readFileSync(envPath, 'utf8')).toContain('IPXE_CP_TOKEN=kept-across-upgrades');
    expect(fs.existsSync(stale)).toBe(false);
    expect(fs.readdirSync(path.join(stage, 'opt')).sort()).toEqual(['kurrent']);
  });
});
