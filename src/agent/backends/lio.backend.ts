import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { TargetBackend, TargetInfo } from './backend';
import { ConfigFs } from './configfs';

const TPG_ATTRS: Record<string, string> = {
  authentication: '0',
  generate_node_acls: '1',
  cache_dynamic_acls: '1',
  demo_mode_write_protect: '0',
};

/**
 * LIO with targetcli-fb semantics, written straight to configfs: a fileio backstore per disk,
 * an iSCSI target with tpg 1, LUN 0, open ACLs (generate_node_acls), one portal, and the
 * whole configuration saved to saveconfig.json (restored at start when configfs is empty).
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
  ) {}

  async start(): Promise<void> {
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
      if (so && fs.existsSync(so.dev)) await this.createDisk(t.wwn, so.dev, {}, false);
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
      out.push({ name: wwn, backing, cd: false });
    }
    return out;
  }

  async createDisk(name: string, backing: string, _opts: object = {}, save = true): Promise<void> {
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
      for (const [k, v] of Object.entries(TPG_ATTRS)) await this.cfs.write(v, ...tpg, 'attrib', k);
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
            attributes: Object.fromEntries(Object.entries(TPG_ATTRS).map(([k, v]) => [k, Number(v)])),
            luns: [{ index: 0, storage_object: `/backstores/fileio/${so}` }],
            portals: [{ ip_address: this.portal.addr, port: this.portal.port }],
            node_acls: [],
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
    tpgs: { tag: number; enable: boolean; attributes: Record<string, number>; luns: { index: number; storage_object: string }[]; portals: { ip_address: string; port: number }[]; node_acls: unknown[] }[];
  }[];
}
