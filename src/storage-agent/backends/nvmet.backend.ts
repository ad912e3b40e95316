import { isTlsPskIdentityOf, tlsPskEntries } from '../../shared/nvme-keys';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { HostCredentials, InitiatorSession, KernelFeatureError, KernelFeatures, noKernelFeatures, TargetBackend, TargetInfo } from './backend';
import { ConfigFs } from './configfs';
import { NvmeKeyring } from './nvme-keyring';
import { KernelInfo } from './kernel-info';

const PORT_ID = '1';
/** A host that exists only while the DH-HMAC-CHAP attributes are probed at start. */
const PROBE_HOST = 'nqn.2014-08.org.nvmexpress:kurrent-feature-probe';

/**
 * NVMe/TCP through nvmet configfs: one subsystem per disk NQN with namespace 1 -> backing file,
 * one TCP port (4421, TLS 1.3 required when enabled), per-host DH-HMAC-CHAP credentials and
 * allowed_hosts links, and for each (host, subsystem) link the host's retained TLS PSK in the
 * kernel `.nvme` keyring. Kernel ordering rules are kept: addr_* only while no subsystem is
 * linked to the port; never allowed_hosts together with attr_allow_any_host=1.
 * On a kernel without what the configuration asks for (TLS, DH-HMAC-CHAP) the port is not made at
 * all and every create names the missing feature: never a plaintext or unauthenticated fallback.
 */
export class NvmetBackend implements TargetBackend {
  readonly name = 'nvmet' as const;
  readonly transport = 'nvme-tcp' as const;
  readonly supportsCd = false;
  readonly persistence = 'configfs (kernel keeps targets while the host runs; rebuilt from DISK_DIR at start)';
  private feats: KernelFeatures = noKernelFeatures();
  /** The TLS PSK of each known host (from putHost), for the keyring entries of its links. */
  private readonly psks = new Map<string, string>();

  constructor(
    private readonly cfs: ConfigFs,
    private readonly port: { addr: string; port: number; tls: boolean },
    private readonly keyring: NvmeKeyring,
    private readonly kernel: KernelInfo,
    /** nvmet's debugfs directory (null: not looked at). */
    private readonly debugfs: string | null = null,
  ) {}

  features(): KernelFeatures {
    return this.feats;
  }

  async start(): Promise<void> {
    const p = ['ports', PORT_ID];
    await this.cfs.mkdir(...p);
    await this.detect();
    if (this.feats.missing.length) return;
    const want: Record<string, string> = {
      addr_trtype: 'tcp',
      addr_adrfam: 'ipv4',
      addr_traddr: this.port.addr,
      addr_trsvcid: String(this.port.port),
      ...(this.port.tls ? { addr_tsas: 'tls1.3', addr_treq: 'required' } : {}),
    };
    const linked = await this.cfs.list(...p, 'subsystems');
    let same = true;
    for (const [k, v] of Object.entries(want)) if ((await this.cfs.read(...p, k)) !== v) same = false;
    if (same) return;
    // addr_* may only change while the port is unlinked: unlink, set, relink.
    for (const nqn of linked) await this.cfs.unlink(...p, 'subsystems', nqn);
    for (const [k, v] of Object.entries(want)) await this.cfs.write(v, ...p, k);
    await this.cfs.mkdir(...p, 'subsystems');
    for (const nqn of linked) await this.cfs.link(['subsystems', nqn], [...p, 'subsystems', nqn]);
  }

  /** What the running kernel offers, read from configfs (a test directory has no kernel to ask). */
  private async detect(): Promise<void> {
    if (!this.cfs.real) return;
    let dhchap = false;
    const existed = await this.cfs.exists('hosts', PROBE_HOST);
    try {
      await this.cfs.mkdir('hosts', PROBE_HOST);
      dhchap = await this.cfs.exists('hosts', PROBE_HOST, 'dhchap_key');
    } finally {
      if (!existed) await this.cfs.rmdir('hosts', PROBE_HOST).catch(() => undefined);
    }
    const tls = await this.cfs.exists('ports', PORT_ID, 'addr_tsas');
    const keyring = await this.keyring.available();
    const tlshd = this.kernel.processRunning('tlshd');
    const release = this.kernel.release();
    const missing: string[] = [];
    if (!dhchap) missing.push(`nvmet DH-HMAC-CHAP: kernel ${release} has no dhchap_key in nvmet/hosts/<nqn>/ (CONFIG_NVME_TARGET_AUTH)`);
    if (this.port.tls && !tls) missing.push(`nvmet TLS: kernel ${release} has no addr_tsas in nvmet/ports/<id>/ (CONFIG_NVME_TARGET_TCP_TLS)`);
    if (this.port.tls && tls && !keyring) missing.push(`the .nvme keyring: kernel ${release} has none (nvme-keyring module)`);
    if (this.port.tls && tls && !tlshd) missing.push('tlshd: no TLS handshake daemon runs on this node (ktls-utils)');
    this.feats = { release, nvmet_dhchap: dhchap, nvmet_tls: tls, nvme_keyring: keyring, tlshd, missing };
  }

  private requireFeatures(what: string): void {
    if (this.feats.missing.length) throw new KernelFeatureError(`${what}: this storage node cannot serve NVMe/TCP as configured; missing ${this.feats.missing.join('; ')}`);
  }

  /**
   * Connected controllers from nvmet's debugfs (<debugfs>/<subsystem nqn>/ctrl<id>/hostnqn and
   * host_traddr); null on a kernel built without CONFIG_NVME_TARGET_DEBUGFS (Debian's 6.12):
   * configfs shows no connections.
   */
  async sessions(): Promise<InitiatorSession[] | null> {
    if (!this.debugfs) return null;
    let subsystems: string[];
    try {
      subsystems = await fsp.readdir(this.debugfs);
    } catch {
      return null;
    }
    const out: InitiatorSession[] = [];
    for (const nqn of subsystems) {
      let ctrls: string[] = [];
      try {
        ctrls = (await fsp.readdir(path.join(this.debugfs, nqn))).filter((c) => /^ctrl\d+$/.test(c));
      } catch {
        continue;
      }
      for (const c of ctrls) {
        const read = (f: string) => fsp.readFile(path.join(this.debugfs!, nqn, c, f), 'utf8').then((x) => x.trim(), () => '');
        const host = await read('hostnqn');
        if (host) out.push({ target: nqn, initiator: host, address: (await read('host_traddr')) || null, id: c });
      }
    }
    return out;
  }

  async list(): Promise<TargetInfo[]> {
    const out: TargetInfo[] = [];
    for (const nqn of await this.cfs.list('subsystems')) {
      out.push({
        name: nqn,
        backing: await this.cfs.read('subsystems', nqn, 'namespaces', '1', 'device_path'),
        cd: false,
        allowed_hosts: await this.cfs.list('subsystems', nqn, 'allowed_hosts'),
      });
    }
    return out;
  }

  async createDisk(nqn: string, backing: string, opts: { allowedHosts?: string[] }): Promise<void> {
    this.requireFeatures('creating an NVMe/TCP disk');
    if (await this.cfs.exists('subsystems', nqn)) throw Object.assign(new Error(`nqn exists: ${nqn}`), { code: 'EEXIST' });
    const hosts = opts.allowedHosts ?? [];
    for (const h of hosts) {
      if (!(await this.cfs.exists('hosts', h))) throw Object.assign(new Error(`host not found: ${h} (PUT /nvme/hosts first)`), { code: 'ENOHOST' });
    }
    const s = ['subsystems', nqn];
    try {
      await this.cfs.mkdir(...s);
      // Closed by default: only the listed hosts (with their DH-HMAC-CHAP keys) may connect.
      await this.cfs.write('0', ...s, 'attr_allow_any_host');
      await this.cfs.mkdir(...s, 'namespaces', '1');
      await this.cfs.write(backing, ...s, 'namespaces', '1', 'device_path');
      await this.cfs.write('1', ...s, 'namespaces', '1', 'enable');
      await this.cfs.mkdir(...s, 'allowed_hosts');
      for (const h of hosts) {
        await this.cfs.link(['hosts', h], [...s, 'allowed_hosts', h]);
        await this.syncPsk(nqn, h, true);
      }
      await this.cfs.mkdir('ports', PORT_ID, 'subsystems');
      await this.cfs.link(s, ['ports', PORT_ID, 'subsystems', nqn]);
    } catch (e) {
      await this.teardown(nqn).catch(() => undefined);
      throw e;
    }
  }

  createCd(): Promise<void> {
    throw new Error('the nvmet backend has no CD support');
  }

  async remove(nqn: string): Promise<TargetInfo | null> {
    if (!(await this.cfs.exists('subsystems', nqn))) return null;
    const t: TargetInfo = { name: nqn, backing: await this.cfs.read('subsystems', nqn, 'namespaces', '1', 'device_path'), cd: false };
    await this.teardown(nqn);
    return t;
  }

  private async teardown(nqn: string): Promise<void> {
    const s = ['subsystems', nqn];
    await this.cfs.unlink('ports', PORT_ID, 'subsystems', nqn);
    for (const h of await this.cfs.list(...s, 'allowed_hosts')) {
      await this.cfs.unlink(...s, 'allowed_hosts', h);
      await this.syncPsk(nqn, h, false);
    }
    await this.cfs.rmdirDefaultGroup(...s, 'allowed_hosts');
    if (await this.cfs.exists(...s, 'namespaces', '1')) {
      await this.cfs.write('0', ...s, 'namespaces', '1', 'enable');
      await this.cfs.rmdir(...s, 'namespaces', '1');
    }
    await this.cfs.rmdirDefaultGroup(...s, 'namespaces');
    await this.cfs.rmdir(...s);
  }

  async putHost(hostnqn: string, c: HostCredentials): Promise<void> {
    this.requireFeatures('adding an NVMe host');
    const h = ['hosts', hostnqn];
    await this.cfs.mkdir(...h);
    await this.cfs.write(c.dhchap_hash, ...h, 'dhchap_hash');
    await this.cfs.write(c.dhchap_dhgroup, ...h, 'dhchap_dhgroup');
    await this.cfs.write(c.dhchap_key, ...h, 'dhchap_key');
    // The kernel refuses an empty key: without a controller key authentication is one-way.
    if (c.dhchap_ctrl_key) await this.cfs.write(c.dhchap_ctrl_key, ...h, 'dhchap_ctrl_key');
    if (c.tls_psk) this.psks.set(hostnqn, c.tls_psk);
    else this.psks.delete(hostnqn);
    for (const nqn of await this.hostSubsystems(hostnqn)) await this.syncPsk(nqn, hostnqn, !!c.tls_psk);
  }

  async hostSubsystems(hostnqn: string): Promise<string[]> {
    const out: string[] = [];
    for (const nqn of await this.cfs.list('subsystems')) if (await this.cfs.exists('subsystems', nqn, 'allowed_hosts', hostnqn)) out.push(nqn);
    return out.sort();
  }

  async allowHost(nqn: string, hostnqn: string, allow: boolean): Promise<void> {
    const link = ['subsystems', nqn, 'allowed_hosts', hostnqn];
    if (!allow) {
      await this.cfs.unlink(...link);
      return this.syncPsk(nqn, hostnqn, false);
    }
    if (!(await this.cfs.exists(...link))) {
      await this.cfs.mkdir('subsystems', nqn, 'allowed_hosts');
      await this.cfs.link(['hosts', hostnqn], link);
    }
    await this.syncPsk(nqn, hostnqn, true);
  }

  async removeHost(hostnqn: string): Promise<void> {
    for (const nqn of await this.cfs.list('subsystems')) {
      await this.cfs.unlink('subsystems', nqn, 'allowed_hosts', hostnqn);
      await this.syncPsk(nqn, hostnqn, false);
    }
    this.psks.delete(hostnqn);
    await this.cfs.rmdir('hosts', hostnqn);
  }

  /**
   * The keyring entries of one (host, subsystem), both identity versions: present exactly while
   * the host is allowed there with a PSK. Every other entry of the pair goes (another hash, a
   * version-1 identity of a previous PSK, whose digest differs), so no stale key survives a change.
   */
  private async syncPsk(nqn: string, hostnqn: string, on: boolean): Promise<void> {
    if (!this.port.tls) return;
    const psk = this.psks.get(hostnqn);
    const keep = on && psk ? tlsPskEntries(psk, hostnqn, nqn) : [];
    for (const identity of await this.keyring.list()) {
      if (isTlsPskIdentityOf(identity, hostnqn, nqn) && !keep.some((k) => k.identity === identity)) await this.keyring.remove(identity);
    }
    for (const k of keep) await this.keyring.put(k.identity, k.key);
  }
}
