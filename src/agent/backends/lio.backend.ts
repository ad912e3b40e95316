import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { KernelFeatureError, KernelFeatures, noKernelFeatures, TargetBackend, TargetInfo } from './backend';
import { ConfigFs } from './configfs';
import { KernelInfo } from './kernel-info';

/** TPG attributes: open (any initiator, generate_node_acls) or closed to the listed ACLs. */
function tpgAttrs(open: boolean): Record<string, string> {
  return {
    authentication: '0',
    generate_node_acls: open ? '1' : '0',
    cache_dynamic_acls: open ? '1' : '0',
    demo_mode_write_protect: '0',
  };
}

/**
 * LIO with targetcli-fb semantics, written straight to configfs: a fileio backstore per disk,
 * an iSCSI target with tpg 1, LUN 0, one portal; with allowed initiators a node ACL per
 * initiator IQN mapping LUN 0 (the TPG then admits no one else), without them open ACLs
 * (generate_node_acls). The whole configuration is saved to saveconfig.json (restored at start
 * when configfs is empty).
 */
export class LioBackend implements TargetBackend {
  readonly name = 'lio' as const;
  readonly transport = 'iscsi' as const;
  readonly supportsCd = false;
  readonly persistence = 'saveconfig (auto-load on start)';

  constructor(
    private readonly cfs: ConfigFs,
    private readonly saveconfig: string,
    private readonly portal: { addr: string; port: number },
    private readonly kernel?: KernelInfo,
  ) {}

  /** What this kernel lacks for LIO (found at start). */
  private missing: string[] = [];

  features(): KernelFeatures {
    return noKernelFeatures(this.missing, this.cfs.real && this.kernel ? this.kernel.release() : null);
  }

  async start(): Promise<void> {
    // The iscsi fabric group appears on first use once iscsi_target_mod is loaded.
    if (this.cfs.real && !(await this.cfs.exists('core'))) this.missing = ['LIO: no target_core_mod in this kernel (configfs has no target/core)'];
    if ((await this.cfs.list('iscsi')).some((n) => n.startsWith('iqn.'))) return;
    let saved: SaveConfig | null = null;
    try {
      saved = JSON.parse(await fsp.readFile(this.saveconfig, 'utf8')) as SaveConfig;
    } catch {
      return;
    }
    for (const t of saved.targets ?? []) {
      const lun = t.tpgs?.[0]?.luns?.[0];
      const so = saved.storage_objects?.find((s) => `/backstores/fileio/${s.name}` === lun?.storage_object);
      const acls = (t.tpgs?.[0]?.node_acls ?? []).map((a) => a.node_wwn);
      if (so && fs.existsSync(so.dev)) await this.createDisk(t.wwn, so.dev, { allowedInitiators: acls }, false);
    }
  }

  async list(): Promise<TargetInfo[]> {
    const out: TargetInfo[] = [];
    for (const wwn of await this.cfs.list('iscsi')) {
      if (!wwn.startsWith('iqn.')) continue;
      let backing: string | null = null;
      for (const l of await this.cfs.list('iscsi', wwn, 'tpgt_1', 'lun', 'lun_0')) {
        const so = await this.cfs.readlink('iscsi', wwn, 'tpgt_1', 'lun', 'lun_0', l);
        if (so) backing = (await this.cfs.read(path.relative(this.cfs.root, so), 'udev_path')) ?? null;
      }
      const acls = await this.cfs.list('iscsi', wwn, 'tpgt_1', 'acls');
      out.push({ name: wwn, backing, cd: false, ...(acls.length ? { allowed_initiators: acls.sort() } : {}) });
    }
    return out;
  }

  async createDisk(name: string, backing: string, opts: { allowedInitiators?: string[] } = {}, save = true): Promise<void> {
    if (this.missing.length) throw new KernelFeatureError(`creating an iSCSI disk: ${this.missing.join('; ')}`);
    const initiators = opts.allowedInitiators ?? [];
    if (await this.cfs.exists('iscsi', name)) throw Object.assign(new Error(`iqn exists: ${name}`), { code: 'EEXIST' });
    const so = soName(name);
    const size = (await fsp.stat(backing)).size;
    const bs = ['core', 'fileio_0', so];
    try {
      await this.cfs.mkdir(...bs);
      await this.cfs.write(`fd_dev_name=${backing},fd_dev_size=${size}`, ...bs, 'control');
      await this.cfs.write(backing, ...bs, 'udev_path');
      await this.cfs.write('1', ...bs, 'enable');
      const tpg = ['iscsi', name, 'tpgt_1'];
      await this.cfs.mkdir(...tpg, 'lun', 'lun_0');
      await this.cfs.link(bs, [...tpg, 'lun', 'lun_0', so]);
      for (const [k, v] of Object.entries(tpgAttrs(!initiators.length))) await this.cfs.write(v, ...tpg, 'attrib', k);
      for (const iqn of initiators) {
        // targetcli's mapped LUN: acls/<iqn>/lun_0/<link> -> the TPG's lun_0.
        await this.cfs.mkdir(...tpg, 'acls', iqn, 'lun_0');
        await this.cfs.link([...tpg, 'lun', 'lun_0'], [...tpg, 'acls', iqn, 'lun_0', 'mapped']);
      }
      await this.cfs.mkdir(...tpg, 'np', `${this.portal.addr}:${this.portal.port}`);
      await this.cfs.write('1', ...tpg, 'enable');
    } catch (e) {
      await this.teardown(name).catch(() => undefined);
      throw e;
    }
    if (save) await this.save();
  }

  createCd(): Promise<void> {
    throw new Error('the lio backend has no CD support');
  }

  async remove(name: string): Promise<TargetInfo | null> {
    const t = (await this.list()).find((x) => x.name === name) ?? null;
    if (!t) return null;
    await this.teardown(name);
    await this.save();
    return t;
  }

  /** Reverse order of creation, as the kernel requires (links before directories). */
  private async teardown(name: string): Promise<void> {
    const tpg = ['iscsi', name, 'tpgt_1'];
    const so = soName(name);
    if (await this.cfs.exists(...tpg)) {
      await this.cfs.write('0', ...tpg, 'enable').catch(() => undefined);
      for (const iqn of await this.cfs.list(...tpg, 'acls')) {
        await this.cfs.unlink(...tpg, 'acls', iqn, 'lun_0', 'mapped');
        await this.cfs.rmdir(...tpg, 'acls', iqn, 'lun_0');
        await this.cfs.rmdir(...tpg, 'acls', iqn);
      }
      await this.cfs.rmdirDefaultGroup(...tpg, 'acls');
      await this.cfs.unlink(...tpg, 'lun', 'lun_0', so);
      await this.cfs.rmdir(...tpg, 'lun', 'lun_0');
      await this.cfs.rmdirDefaultGroup(...tpg, 'lun');
      await this.cfs.rmdir(...tpg, 'np', `${this.portal.addr}:${this.portal.port}`);
      await this.cfs.rmdirDefaultGroup(...tpg, 'np');
      await this.cfs.rmdirDefaultGroup(...tpg, 'attrib');
      await this.cfs.rmdir(...tpg);
      await this.cfs.rmdir('iscsi', name);
    }
    await this.cfs.rmdir('core', 'fileio_0', so);
  }

  /** targetcli-fb's saveconfig.json, written atomically. */
  private async save(): Promise<void> {
    const storage_objects: SaveConfig['storage_objects'] = [];
    const targets: SaveConfig['targets'] = [];
    for (const t of await this.list()) {
      if (!t.backing) continue;
      const so = soName(t.name);
      storage_objects.push({ plugin: 'fileio', name: so, dev: t.backing, size: (await fsp.stat(t.backing).catch(() => ({ size: 0 }))).size, write_back: true });
      targets.push({
        wwn: t.name,
        fabric: 'iscsi',
        tpgs: [
          {
            tag: 1,
            enable: true,
            attributes: Object.fromEntries(Object.entries(tpgAttrs(!t.allowed_initiators?.length)).map(([k, v]) => [k, Number(v)])),
            luns: [{ index: 0, storage_object: `/backstores/fileio/${so}` }],
            portals: [{ ip_address: this.portal.addr, port: this.portal.port }],
            node_acls: (t.allowed_initiators ?? []).map((node_wwn) => ({ node_wwn, mapped_luns: [{ index: 0, tpg_lun: 0, write_protect: false }] })),
          },
        ],
      });
    }
    const text = JSON.stringify({ fabric_modules: [], storage_objects, targets }, null, 2) + '\n';
    await fsp.mkdir(path.dirname(this.saveconfig), { recursive: true });
    const tmp = `${this.saveconfig}.tmp`;
    await fsp.writeFile(tmp, text, { mode: 0o600 });
    await fsp.rename(tmp, this.saveconfig);
  }
}

/** Backstore name from the target suffix (configfs names may not contain ':'). */
function soName(iqn: string): string {
  return iqn.slice(iqn.lastIndexOf(':') + 1);
}

interface SaveConfig {
  storage_objects: { plugin: string; name: string; dev: string; size: number; write_back: boolean }[];
  targets: {
    wwn: string;
    fabric: string;
    tpgs: {
      tag: number;
      enable: boolean;
      attributes: Record<string, number>;
      luns: { index: number; storage_object: string }[];
      portals: { ip_address: string; port: number }[];
      node_acls: { node_wwn: string; mapped_luns: { index: number; tpg_lun: number; write_protect: boolean }[] }[];
    }[];
  }[];
}
