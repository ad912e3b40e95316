import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import { NODE_BUNDLE } from './bundle-options';
import { freePort } from './free-port';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * The storage-node guest: a Debian kernel under qemu (TCG; KVM cannot run Linux guests on these
 * machines) whose initramfs (kernel-node/build.sh) mounts the host's / read-only over virtio-9p and
 * runs this checkout's storage agent chrooted into it, on the guest's real configfs, with DISK_DIR
 * on a real filesystem (a virtio disk image, btrfs by default, so reflink clones are real), and
 * tlshd for NVMe/TCP TLS. The agent API, 3260 and 4421 are forwarded to host loopback ports. A
 * `client` guest runs no agent: an initiator (nvme-cli, the kernel's nvme-tcp) for the tests.
 *
 * qemu runs under `setpriv --pdeathsig KILL`, so it dies with the process that started it.
 */

const root = path.resolve(__dirname, __dirname.includes(`${path.sep}dist${path.sep}`) ? '../..' : '..');

export interface KernelNodeOptions {
  /** '6.12' (default) or '6.1'. */
  kernel?: string;
  role?: 'agent' | 'client';
  /** Agent environment (IPXE_AGENT_*); DISK_DIR and the state dir default to the data disk. */
  env?: Record<string, string>;
  /**
   * Host loopback ports to forward to the guest's agent API (4840), iSCSI and NVMe/TCP ports
   * (IPXE_AGENT_ISCSI_PORT / IPXE_AGENT_NVME_PORT in env, default 3260 / 4421); 0 or absent = a
   * free port.
   */
  ports?: { agent?: number; iscsi?: number; nvme?: number; shell?: number };
  /** Files copied into DISK_DIR before the agent starts (first boot of a data disk only). */
  seed?: Record<string, string>;
  /** Data disk: an existing image to reuse (a reboot keeps DISK_DIR), else a new one. */
  dataImage?: string;
  fs?: 'btrfs' | 'ext4';
  dataSizeMiB?: number;
  memMiB?: number;
  /** Working directory for the logs and the data image. */
  dir?: string;
}

export const GUEST_DATA = '/mnt';
export const GUEST_DISK_DIR = '/mnt/images';
export const GUEST_STATE_DIR = '/mnt/agent-state';

/** `npm run build:kernel-node`: builds (or finds up to date) the boot files of a kernel. */
export function buildKernelNode(kernel = '6.12'): { vmlinuz: string; initramfs: string; tlshd: string; kernelVersion: string } {
  execFileSync('bash', [path.join(root, 'kernel-node/build.sh'), kernel], { stdio: ['ignore', 'inherit', 'inherit'] });
  const dir = path.join(root, 'build/kernel-node', kernel);
  return {
    vmlinuz: path.join(dir, 'vmlinuz'),
    initramfs: path.join(dir, 'initramfs.gz'),
    tlshd: path.join(root, 'build/kernel-node/tlshd/tlshd'),
    kernelVersion: fs.readFileSync(path.join(dir, 'kernel-version'), 'utf8').trim(),
  };
}

/**
 * The agent of this checkout (dist/, from `nest build`) bundled into one file, as the control
 * plane's start is (scripts/bundle.ts): under TCG, loading node_modules file by file through 9p
 * takes ~35 s, the bundle a few.
 */
export function bundleAgent(): string {
  const entry = path.join(root, 'dist/src/storage-agent/main.js');
  const out = path.join(root, 'build/kernel-node/agent.js');
  if (!fs.existsSync(entry)) throw new Error(`kernel node: ${entry} is missing; run \`npx nest build\` first`);
  const newest = newestMtime(path.join(root, 'dist/src'));
  if (fs.existsSync(out) && fs.statSync(out).mtimeMs >= newest) return out;
  // esbuild is a devDependency: loaded only here, so the module stays importable without it.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { buildSync } = require('esbuild') as typeof import('esbuild');
  buildSync({ ...NODE_BUNDLE, entryPoints: [entry], outfile: out });

  return out;
}

function newestMtime(dir: string): number {
  let t = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newestMtime(p) : fs.statSync(p).mtimeMs);
  }
  return t;
}


const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Commands carry DH-HMAC-CHAP secrets and TLS PSKs (test keys, but keys): an error message never shows them. */
export const withoutSecrets = (text: string): string => text.replace(/\b(DHHC-1|NVMeTLSkey-1):0\d:[A-Za-z0-9+/=]+:/g, '$1:<redacted>');

export class KernelNode {
  readonly dir: string;
  readonly consoleLog: string;
  readonly serviceLog: string;
  readonly dataImage: string;
  ports = { agent: 0, iscsi: 0, nvme: 0, shell: 0 };
  kernelVersion = '';
  private proc: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();

  constructor(readonly opts: KernelNodeOptions = {}) {
    this.dir = opts.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-kernel-node-'));
    fs.mkdirSync(this.dir, { recursive: true });
    this.consoleLog = path.join(this.dir, 'console.log');
    this.serviceLog = path.join(this.dir, 'services.log');
    this.dataImage = opts.dataImage ?? path.join(this.dir, 'data.img');
  }

  get role(): 'agent' | 'client' {
    return this.opts.role ?? 'agent';
  }

  /** Boots the guest; resolves once the agent answers /healthz (agent role) or the shell does. */
  async start(timeoutMs = 90_000): Promise<this> {
    const boot = buildKernelNode(this.opts.kernel ?? '6.12');
    this.kernelVersion = boot.kernelVersion;
    const want = this.opts.ports ?? {};
    // A restart keeps its ports: the control plane knows the agent by its URL.
    for (const k of ['agent', 'iscsi', 'nvme', 'shell'] as const) this.ports[k] = want[k] || this.ports[k] || (await freePort());
    const fsType = this.opts.fs ?? 'btrfs';
    if (!fs.existsSync(this.dataImage)) {
      fs.writeFileSync(this.dataImage, '');
      fs.truncateSync(this.dataImage, (this.opts.dataSizeMiB ?? 1024) * 2 ** 20);
      execFileSync(fsType === 'btrfs' ? 'mkfs.btrfs' : 'mkfs.ext4', ['-q', ...(fsType === 'ext4' ? ['-F'] : []), this.dataImage], { stdio: 'pipe' });
    }
    const seedDir = path.join(this.dir, 'seed');
    fs.rmSync(seedDir, { recursive: true, force: true });
    fs.mkdirSync(seedDir);
    for (const [name, from] of Object.entries(this.opts.seed ?? {})) fs.copyFileSync(from, path.join(seedDir, name));
    const env: Record<string, string> = {
      DISK_DIR: GUEST_DISK_DIR,
      IPXE_AGENT_STATE_DIR: GUEST_STATE_DIR,
      IPXE_AGENT_PORT: '4840',
      IPXE_AGENT_HOST: '0.0.0.0',
      IPXE_AGENT_LIO_SAVECONFIG: `${GUEST_STATE_DIR}/saveconfig.json`,
      ...this.opts.env,
      KN_CHECKOUT: root,
      KN_AGENT: this.role === 'agent' ? bundleAgent() : '',
      KN_NODE: process.execPath,
      KN_TLSHD: boot.tlshd,
      KN_SEED: seedDir,
      HOME: '/tmp',
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    };
    const envFile = path.join(this.dir, 'guest.env');
    // Secrets of a test guest (the agent token) sit in a 0600 file only the guest reads.
    fs.writeFileSync(envFile, Object.entries(env).map(([k, v]) => `export ${k}=${q(v)}\n`).join(''), { mode: 0o600 });
    fs.writeFileSync(this.consoleLog, '');
    fs.writeFileSync(this.serviceLog, '');
    const fwd = [
      `hostfwd=tcp:127.0.0.1:${this.ports.shell}-:7000`,
      ...(this.role === 'agent'
        ? [
            `hostfwd=tcp:127.0.0.1:${this.ports.agent}-:4840`,
            `hostfwd=tcp:127.0.0.1:${this.ports.iscsi}-:${env.IPXE_AGENT_ISCSI_PORT ?? 3260}`,
            `hostfwd=tcp:127.0.0.1:${this.ports.nvme}-:${env.IPXE_AGENT_NVME_PORT ?? 4421}`,
          ]
        : []),
    ];
    const args = [
      '--pdeathsig', 'KILL', 'qemu-system-x86_64',
      '-accel', 'tcg', '-cpu', 'max', '-smp', '1', '-m', String(this.opts.memMiB ?? 1024),
      '-display', 'none', '-monitor', 'none', '-no-reboot',
      '-kernel', boot.vmlinuz, '-initrd', boot.initramfs,
      '-append', `console=ttyS0 loglevel=6 panic=-1 kn.role=${this.role} kn.fs=${fsType} kn.env=${envFile} kn.shell=7000`,
      '-virtfs', 'local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap',
      '-drive', `file=${this.dataImage},if=virtio,format=raw,cache=writeback`,
      '-netdev', `user,id=n0,${fwd.join(',')}`, '-device', 'virtio-net-pci,netdev=n0',
      '-serial', `file:${this.consoleLog}`, '-serial', `file:${this.serviceLog}`,
    ];
    const proc = spawn('setpriv', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.proc = proc;
    let stderr = '';
    proc.stderr!.on('data', (d) => (stderr += d));
    this.exited = new Promise((r) => proc.once('exit', () => r()));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode) throw new Error(`kernel node: qemu exited (${proc.exitCode ?? proc.signalCode}): ${stderr.trim()}\n${this.tail()}`);
      if (/kn: FATAL/.test(this.console())) throw new Error(`kernel node: guest failed\n${this.tail()}`);
      if (/kn: ready/.test(this.console()) && (await this.ready())) return this;
      if (Date.now() > deadline) throw new Error(`kernel node: not up in ${timeoutMs} ms\n${this.tail()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  private async ready(): Promise<boolean> {
    if (this.role === 'client') return (await this.exec('echo up').catch(() => '')).trim() === 'up';
    try {
      const r = await fetch(`http://127.0.0.1:${this.ports.agent}/healthz`, { signal: AbortSignal.timeout(2000) });
      return r.status === 200;
    } catch {
      return false;
    }
  }

  get agentUrl(): string {
    return `http://127.0.0.1:${this.ports.agent}`;
  }

  console(): string {
    return fs.readFileSync(this.consoleLog, 'utf8');
  }

  services(): string {
    return fs.readFileSync(this.serviceLog, 'utf8');
  }

  private tail(): string {
    const last = (s: string) => s.split('\n').slice(-40).join('\n');
    return `--- console ---\n${last(this.console())}\n--- services ---\n${last(this.services())}`;
  }

  /** Runs a shell command in the guest (chrooted into the host's /); resolves with its output. */
  exec(cmd: string, timeoutMs = 60_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const sock = net.connect(this.ports.shell, '127.0.0.1');
      let out = '';
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new Error(`kernel node: ${JSON.stringify(withoutSecrets(cmd))} timed out after ${timeoutMs} ms: ${withoutSecrets(out)}`));
      }, timeoutMs);
      sock.setEncoding('utf8');
      sock.on('data', (d) => (out += d));
      sock.on('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
      sock.on('close', () => {
        clearTimeout(timer);
        resolve(out);
      });
      sock.end(`${cmd}\n`);
    });
  }

  /** The kernel's own log (dmesg) as the guest shows it. */
  dmesg(): Promise<string> {
    return this.exec('dmesg');
  }

  /**
   * Power off: the guest's page cache is written to the data image first (`sync`, bounded), so
   * what the agent acknowledged survives; everything in kernel memory (configfs, keyring) is lost.
   */
  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode) return;
    await this.exec('sync', 10_000).catch(() => undefined);
    this.proc = null;
    p.kill('SIGKILL');
    await this.exited;
  }
}

/** `npm run kernel-node -- [--kernel 6.12] [--backend lio|nvmet] [--agent-port P] [--iscsi-port P] [--nvme-port P]` */
async function main(argv: string[]): Promise<void> {
  const arg = (name: string, dflt: string) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 && argv[i + 1] ? argv[i + 1] : dflt;
  };
  const backend = arg('backend', 'nvmet');
  const token = arg('token', process.env.IPXE_AGENT_TOKEN ?? '');
  const node = new KernelNode({
    kernel: arg('kernel', '6.12'),
    env: { IPXE_AGENT_BACKEND: backend, IPXE_AGENT_TOKEN: token },
    ports: { agent: Number(arg('agent-port', '4840')), iscsi: Number(arg('iscsi-port', '3260')), nvme: Number(arg('nvme-port', '4421')) },
    dir: arg('dir', path.join(root, 'build/kernel-node/run')),
    dataImage: path.join(arg('dir', path.join(root, 'build/kernel-node/run')), 'data.img'),
  });
  const stop = () => void node.stop().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  const t0 = Date.now();
  await node.start();
  console.log(`kernel-node: ${backend} agent on kernel ${node.kernelVersion} up in ${Date.now() - t0} ms`);
  console.log(`  agent API  ${node.agentUrl}${token ? '' : ' (no token: set --token or IPXE_AGENT_TOKEN)'}`);
  console.log(`  iSCSI      127.0.0.1:${node.ports.iscsi}    NVMe/TCP 127.0.0.1:${node.ports.nvme}`);
  console.log(`  logs       ${node.consoleLog} (kernel), ${node.serviceLog} (agent, tlshd)`);
  console.log('  Ctrl-C stops the guest; DISK_DIR persists in the data image beside the logs.');
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((e) => {
    console.error((e as Error).message);
    process.exit(1);
  });
}
