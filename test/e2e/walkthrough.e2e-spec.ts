import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnAgent, SpawnedAgent, Tgtd } from '../helpers/agent';
import { freePort, tempDir } from '../helpers/app';

/**
 * The newcomer path: `npm start` exactly as the README says (it prints where it listens, the
 * docs, the spec and the token state), the README walk-through block run by bash top to bottom
 * against it and a real stgt agent on a real tgtd, then killing `npm start` stops the server.
 */

const ROOT = path.join(__dirname, '../..');

/** The ```sh block under "## Walk-through" in README.md. */
function walkthrough(): string {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Walk-through'));
  const m = /```sh\n([\s\S]*?)```/.exec(section);
  if (!m) throw new Error('no sh block in the README walk-through');
  return m[1];
}

describe('README: npm start and the walk-through', () => {
  const dir = tempDir('kurrent-readme-');
  let tgtd: Tgtd;
  let agent: SpawnedAgent;
  let npm: ChildProcess | null = null;

  afterAll(async () => {
    // Whatever happened, nothing of npm start outlives the test (its own process group).
    if (npm?.pid && npm.exitCode === null) {
      try {
        process.kill(-npm.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await agent?.stop();
    await tgtd?.stop();
  });

  it('npm start says where it is, the walk-through runs as written, and killing npm start frees the port', async () => {
    const control = 8000 + (process.pid % 500);
    tgtd = new Tgtd(control, await freePort());
    await tgtd.start();
    const agentPort = await freePort();
    agent = await spawnAgent({
      IPXE_AGENT_PORT: String(agentPort),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(control),
      DISK_DIR: path.join(dir, 'images'),
      IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state'),
    });

    const port = await freePort();
    npm = spawn('npm', ['start'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        IPXE_CP_PORT: String(port),
        IPXE_CP_HOST: '127.0.0.1',
        IPXE_CP_TOKEN: 'walk-token',
        IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
        IPXE_CP_STATE_DIR: path.join(dir, 'state'),
        IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
        IPXE_CP_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    npm.stdout!.on('data', (b) => (out += b));
    npm.stderr!.on('data', (b) => (out += b));
    for (let i = 0; !out.includes('auth:'); i++) {
      if (npm.exitCode !== null || i > 1800) throw new Error(`npm start did not come up: ${out.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(out).toContain(`kurrent listening on http://127.0.0.1:${port}`);
    expect(out).toContain(`Swagger UI: http://127.0.0.1:${port}/docs`);
    expect(out).toContain(`OpenAPI:    http://127.0.0.1:${port}/openapi.json`);
    expect(out).toContain('auth:       bearer token required (IPXE_CP_TOKEN is set)');

    const run = spawnSync('bash', ['-c', walkthrough()], {
      env: { PATH: process.env.PATH, BASE_URL: `http://127.0.0.1:${port}`, AGENT_URL: agent.url, TOKEN: 'walk-token' },
      encoding: 'utf8',
      timeout: 120_000,
    });
    if (run.status !== 0) throw new Error(`walk-through failed (${run.status}): ${run.stderr}\n${run.stdout.slice(-3000)}`);
    // What the walk-through promises along the way.
    expect(run.stdout).toContain('# boot vars for a pooled device (waiting to be bound to a worker)\nset menu-default reboot\nset menu-timeout 1\n');
    expect(run.stdout).toMatch(/set base-iqn iqn\.2026-07\.com\.controller\nset iscsi-server 192\.168\.80\.3\nset iscsi-sep :::1:\nset username worker-00\nset password [A-Za-z0-9_-]{24}\nset menu-default ubuntu\nset menu-timeout 5000\n/);
    expect(run.stdout).toMatch(/"dnsmasq":\{"hostname":"worker-00","mac":"00:0c:29:b9:8b:00"\}/);
    expect(run.stdout).toContain('{"deleted":"worker-00","delete_disk":false,"dnsmasq_removed":true}');

    // Killing npm start (as a supervisor or a terminal would) stops the server: nothing keeps the port.
    const exited = new Promise((r) => npm!.once('exit', r));
    npm.kill('SIGTERM');
    await exited;
    let refused = false;
    for (let i = 0; i < 50 && !refused; i++) {
      try {
        await fetch(`http://127.0.0.1:${port}/healthz`);
        await new Promise((r) => setTimeout(r, 100));
      } catch {
        refused = true;
      }
    }
    expect(refused).toBe(true);
  }, 300_000);
});
