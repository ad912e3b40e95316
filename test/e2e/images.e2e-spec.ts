import { ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describeFiles, freePort } from '../helpers/app';

/**
 * Both Dockerfiles really build (podman, `--isolation=chroot`, the base made from Debian packages
 * and this machine's node by scripts/image-check.sh: no registry pull), and each image's root
 * filesystem runs its own CMD, with its own environment and working directory, far enough to answer
 * /healthz; the image's own HEALTHCHECK command passes there. Containers cannot run on this
 * machine, so the filesystem is entered with chroot (sharing the host's loopback).
 */

const root = path.join(__dirname, '../..');

interface ImageConfig {
  Env: string[];
  Cmd: string[];
  WorkingDir: string;
  Healthcheck?: { Test: string[] };
  ExposedPorts?: Record<string, unknown>;
}

/** A writable root filesystem of the image (a podman container that never runs), with /proc and /dev. */
class Rootfs {
  readonly ctr: string;
  readonly dir: string;
  private procs: ChildProcess[] = [];
  constructor(readonly image: string) {
    this.ctr = execFileSync('podman', ['create', image], { encoding: 'utf8' }).trim();
    this.dir = execFileSync('podman', ['mount', this.ctr], { encoding: 'utf8' }).trim();
    for (const d of ['proc', 'dev']) execFileSync('mount', ['--bind', `/${d}`, path.join(this.dir, d)]);
  }
  config(): ImageConfig {
    const [img] = JSON.parse(execFileSync('podman', ['image', 'inspect', this.image], { encoding: 'utf8' }));
    return { ...img.Config, Healthcheck: img.Healthcheck ?? img.Config.Healthcheck };
  }
  /** argv inside the root, with the image's environment (plus overrides) and working directory. */
  private argv(cmd: string[], env: Record<string, string>): string[] {
    const c = this.config();
    const vars = [...c.Env, ...Object.entries(env).map(([k, v]) => `${k}=${v}`)];
    return [this.dir, '/usr/bin/env', '-i', ...vars, '/bin/sh', '-c', `cd '${c.WorkingDir}' && exec "$@"`, 'sh', ...cmd];
  }
  start(cmd: string[], env: Record<string, string>): ChildProcess {
    const p = spawn('chroot', this.argv(cmd, env), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout!.on('data', (b) => (out += b));
    p.stderr!.on('data', (b) => (out += b));
    Object.assign(p, { output: () => out });
    this.procs.push(p);
    return p;
  }
  run(cmd: string[], env: Record<string, string>): { status: number | null; output: string } {
    const r = spawnSync('chroot', this.argv(cmd, env), { encoding: 'utf8', timeout: 60_000 });
    return { status: r.status, output: `${r.stdout}${r.stderr}` };
  }
  async close(): Promise<void> {
    for (const p of this.procs) {
      if (p.exitCode === null && p.signalCode === null) {
        p.kill('SIGKILL');
        await new Promise((r) => p.once('exit', r));
      }
    }
    for (const d of ['dev', 'proc']) spawnSync('umount', ['-l', path.join(this.dir, d)]);
    spawnSync('podman', ['umount', this.ctr]);
    spawnSync('podman', ['rm', '-f', this.ctr]);
  }
}

async function healthy(url: string, ms: number): Promise<number> {
  const end = Date.now() + ms;
  for (;;) {
    const status = await fetch(url, { signal: AbortSignal.timeout(2000) }).then((r) => r.status, () => 0);
    if (status === 200 || Date.now() > end) return status;
    await new Promise((r) => setTimeout(r, 250));
  }
}

describeFiles('container images: built with podman, their filesystems answer /healthz', () => {
  const built: Record<string, string> = {};
  beforeAll(() => {
    const out = spawnSync('bash', [path.join(root, 'scripts/image-check.sh')], { cwd: root, encoding: 'utf8', timeout: 900_000 });
    // eslint-disable-next-line no-console
    console.log(out.stderr.trim());
    if (out.status !== 0) throw new Error(`image-check failed (${out.status}): ${out.stderr.slice(-3000)}`);
    for (const name of ['control-plane', 'agent']) built[name] = `localhost/kurrent/${name}:check`;
  }, 900_000);

  it('the control plane image: its CMD answers /healthz and the spec, on the port its settings give; its HEALTHCHECK passes', async () => {
    const fsys = new Rootfs(built['control-plane']);
    try {
      const c = fsys.config();
      expect(c.Cmd).toEqual(['node', '--max-semi-space-size=16', '--single-threaded-gc', 'dist/src/control-plane/start.js']);
      const port = await freePort();
      const env = { IPXE_CP_PORT: String(port), IPXE_CP_HOST: '127.0.0.1' };
      const p = fsys.start(c.Cmd, env);
      const status = await healthy(`http://127.0.0.1:${port}/healthz`, 60_000);
      expect([status, status === 200 ? '' : (p as unknown as { output: () => string }).output().slice(-2000)]).toEqual([200, '']);
      expect(await (await fetch(`http://127.0.0.1:${port}/openapi.json`)).json()).toEqual(JSON.parse(fs.readFileSync(path.join(root, 'openapi/control-plane.openapi.json'), 'utf8')));
      expect((await fetch(`http://127.0.0.1:${port}/ui/`)).status).toBe(200);
      // The image's own HEALTHCHECK, run where Docker would run it: follows IPXE_CP_PORT.
      expect(c.Healthcheck?.Test[0]).toBe('CMD');
      const hc = fsys.run(c.Healthcheck!.Test.slice(1), env);
      expect([hc.status, hc.output.trim()]).toEqual([0, `healthy: http://127.0.0.1:${port}/healthz`]);
      // The state went where the image's settings say (its volumes).
      expect(fs.existsSync(path.join(fsys.dir, 'app/state/kurrent.lock'))).toBe(true);
    } finally {
      await fsys.close();
    }
  }, 120_000);

  it('the agent image: its CMD answers /healthz (lio backend on a configfs-shaped directory); its HEALTHCHECK passes', async () => {
    const fsys = new Rootfs(built.agent);
    try {
      const c = fsys.config();
      const port = await freePort();
      // lio: no tgtd is started (the CMD starts one for stgt only), nothing outside the root is touched.
      const env = { IPXE_AGENT_PORT: String(port), IPXE_AGENT_HOST: '127.0.0.1', IPXE_AGENT_BACKEND: 'lio', IPXE_AGENT_CONFIGFS_ROOT: '/tmp/configfs', IPXE_AGENT_LIO_SAVECONFIG: '/tmp/saveconfig.json' };
      const p = fsys.start(c.Cmd, env);
      const status = await healthy(`http://127.0.0.1:${port}/healthz`, 60_000);
      expect([status, status === 200 ? '' : (p as unknown as { output: () => string }).output().slice(-2000)]).toEqual([200, '']);
      expect(await (await fetch(`http://127.0.0.1:${port}/capabilities`)).json()).toMatchObject({ backend: 'lio', transport: 'iscsi' });
      // tgt and nvme-cli are in the image, as the stgt and nvmet backends need them.
      expect(fs.existsSync(path.join(fsys.dir, 'usr/sbin/tgtd')) && fs.existsSync(path.join(fsys.dir, 'usr/sbin/nvme'))).toBe(true);
      const hc = fsys.run(c.Healthcheck!.Test.slice(1), env);
      expect([hc.status, hc.output.trim()]).toEqual([0, `healthy: http://127.0.0.1:${port}/healthz`]);
    } finally {
      await fsys.close();
    }
  }, 120_000);
});
