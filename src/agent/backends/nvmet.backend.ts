import { HostCredentials, TargetBackend, TargetInfo } from './backend';
import { ConfigFs } from './configfs';

const PORT_ID = '1';

/**
 * NVMe/TCP through nvmet configfs: one subsystem per disk NQN with namespace 1 -> backing file,
 * one TCP port (4421, TLS 1.3 required when enabled), per-host DH-HMAC-CHAP credentials and
 * allowed_hosts links. Kernel ordering rules are kept: addr_* only while no subsystem is linked
 * to the port; never allowed_hosts together with attr_allow_any_host=1.
 */
export class NvmetBackend implements TargetBackend {
  readonly name = 'nvmet' as const;
  readonly transport = 'nvme-tcp' as const;
  readonly supportsCd = false;
  readonly persistence = 'configfs (kernel keeps targets while the host runs; rebuilt from DISK_DIR at start)';

  constructor(
    private readonly cfs: ConfigFs,
    private readonly port: { addr: string; port: number; tls: boolean },
  ) {}

  async start(): Promise<void> {
    const p = ['ports', PORT_ID];
    const want: Record<string, string> = {
      addr_trtype: 'tcp',
      addr_adrfam: 'ipv4',
      addr_traddr: this.port.addr,
      addr_trsvcid: String(this.port.port),
      ...(this.port.tls ? { addr_tsas: 'tls1.3', addr_treq: 'required' } : {}),
    };
    await this.cfs.mkdir(...p);
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
      for (const h of hosts) await this.cfs.link(['hosts', h], [...s, 'allowed_hosts', h]);
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
    for (const h of await this.cfs.list(...s, 'allowed_hosts')) await this.cfs.unlink(...s, 'allowed_hosts', h);
    await this.cfs.rmdirDefaultGroup(...s, 'allowed_hosts');
    if (await this.cfs.exists(...s, 'namespaces', '1')) {
      await this.cfs.write('0', ...s, 'namespaces', '1', 'enable');
      await this.cfs.rmdir(...s, 'namespaces', '1');
    }
    await this.cfs.rmdirDefaultGroup(...s, 'namespaces');
    await this.cfs.rmdir(...s);
  }

  async putHost(hostnqn: string, c: HostCredentials): Promise<void> {
    const h = ['hosts', hostnqn];
    await this.cfs.mkdir(...h);
    await this.cfs.write(c.dhchap_hash, ...h, 'dhchap_hash');
    await this.cfs.write(c.dhchap_dhgroup, ...h, 'dhchap_dhgroup');
    await this.cfs.write(c.dhchap_key, ...h, 'dhchap_key');
    await this.cfs.write(c.dhchap_ctrl_key ?? '', ...h, 'dhchap_ctrl_key');
  }

  async hostSubsystems(hostnqn: string): Promise<string[]> {
    const out: string[] = [];
    for (const nqn of await this.cfs.list('subsystems')) if (await this.cfs.exists('subsystems', nqn, 'allowed_hosts', hostnqn)) out.push(nqn);
    return out.sort();
  }

  async allowHost(nqn: string, hostnqn: string, allow: boolean): Promise<void> {
    const link = ['subsystems', nqn, 'allowed_hosts', hostnqn];
    if (!allow) return this.cfs.unlink(...link);
    if (await this.cfs.exists(...link)) return;
    await this.cfs.mkdir('subsystems', nqn, 'allowed_hosts');
    await this.cfs.link(['hosts', hostnqn], link);
  }

  async removeHost(hostnqn: string): Promise<void> {
    for (const nqn of await this.cfs.list('subsystems')) await this.cfs.unlink('subsystems', nqn, 'allowed_hosts', hostnqn);
    await this.cfs.rmdir('hosts', hostnqn);
  }
}
