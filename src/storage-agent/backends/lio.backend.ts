import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { Chap, InitiatorSession, KernelFeatureError, KernelFeatures, noKernelFeatures, TargetBackend, TargetInfo } from './backend';
import { ConfigFs } from './configfs';
import { KernelInfo } from './kernel-info';

/** TPG attributes: open (any initiator, generate_node_acls) or closed to the listed ACLs, with or without CHAP. */
function tpgAttrs(open: boolean, chap = false): Record<string, string> {
  return {
    authentication: chap ? '1' : '0',
    generate_node_acls: open ? '1' : '0',
    cache_dynamic_acls: open ? '1' : '0',
    demo_mode_write_protect: '0',
  };
}

/**
 * LIO with targetcli-fb semantics, written straight to configfs: a fileio backstore per disk,
 * an iSCSI target with tpg 1, LUN 0, one portal; with allowed initiators a node ACL per
 * initiator IQN mapping LUN 0 (the TPG then admits no one else), without them open ACLs
 * (generate_node_acls). A closed target may require CHAP of its ACLs (auth/userid, auth/password,
 * TPG authentication=1). The whole configuration is saved to saveconfig.json (0600; restored at
 * start when configfs is empty).
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
      const nodeAcls = t.tpgs?.[0]?.node_acls ?? [];
      const acls = nodeAcls.map((a) => a.node_wwn);
      const first = nodeAcls[0];
      const chap = first?.chap_userid && first.chap_password ? { userid: first.chap_userid, secret: first.chap_password } : undefined;
      if (so && fs.existsSync(so.dev)) await this.createDisk(t.wwn, so.dev, { allowedInitiators: acls, chap }, false);
    }
  }

  /**
   * Sessions from configfs: an open target lists its initiators in tpgt_1/dynamic_sessions; a
   * closed one shows a logged-in initiator in its node ACL's `info` (InitiatorName, and the
   * connection's address).
   */
  async sessions(): Promise<InitiatorSession[]> {
    const out: InitiatorSession[] = [];
    for (const wwn of await this.cfs.list('iscsi')) {
      if (!wwn.startsWith('iqn.')) continue;
      const tpg = ['iscsi', wwn, 'tpgt_1'];
      for (const line of ((await this.cfs.read(...tpg, 'dynamic_sessions')) ?? '').split('\n')) {
        const name = line.trim();
        if (name) out.push({ target: wwn, initiator: name, address: null, id: null });
      }
      for (const acl of await this.cfs.list(...tpg, 'acls')) {
        const info = (await this.cfs.read(...tpg, 'acls', acl, 'info')) ?? '';
        const m = /InitiatorName: (\S+)/.exec(info);
        if (m && !out.some((x) => x.target === wwn && x.initiator === m[1])) out.push({ target: wwn, initiator: m[1], address: /Address (\d+\.\d+\.\d+\.\d+)/.exec(info)?.[1] ?? null, id: /LIO Session ID: (\d+)/.exec(info)?.[1] ?? null });
      }
    }
    return out;
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
      const acls = (await this.cfs.list('iscsi', wwn, 'tpgt_1', 'acls')).sort();
      const chap = acls.length ? await this.chapOf(wwn, acls[0]) : undefined;
      out.push({ name: wwn, backing, cd: false, ...(acls.length ? { allowed_initiators: acls } : {}), ...(chap ? { chap } : {}) });
    }
    return out;
  }

  /** The CHAP credential an ACL requires, when the TPG enforces authentication. */
  private async chapOf(wwn: string, acl: string): Promise<Chap | undefined> {
    const tpg = ['iscsi', wwn, 'tpgt_1'];
    if ((await this.cfs.read(...tpg, 'attrib', 'authentication')) !== '1') return undefined;
    const userid = await this.cfs.read(...tpg, 'acls', acl, 'auth', 'userid');
    const secret = await this.cfs.read(...tpg, 'acls', acl, 'auth', 'password');
    return userid && secret && userid !== 'NULL' && secret !== 'NULL' ? { userid, secret } : undefined;
  }

  /**
   * The ACLs of a closed target and their CHAP credential, changed in place (a renamed worker,
   * a rotated or revoked credential): ACLs not listed go, new ones are mapped to LUN 0, every one
   * gets the credential, and authentication follows. Sessions already logged in stay (LIO checks
   * at login); the next login meets the new rule.
   */
  async setAccess(name: string, initiators: string[], chap: Chap | undefined): Promise<void> {
    const tpg = ['iscsi', name, 'tpgt_1'];
    if (!(await this.cfs.exists(...tpg))) throw Object.assign(new Error(`iqn not found: ${name}`), { code: 'ENOENT' });
    if ((await this.cfs.read(...tpg, 'attrib', 'generate_node_acls')) === '1') {
      throw Object.assign(new Error(`target ${name} is open to any initiator (made without allowed_initiators); its access cannot be narrowed in place`), { code: 'EOPEN' });
    }
    const want = new Set(initiators);
    // Authentication off first while ACLs change, on last: never a moment with CHAP required of an ACL without a credential.
    await this.cfs.write('0', ...tpg, 'attrib', 'authentication');
    for (const iqn of await this.cfs.list(...tpg, 'acls')) if (!want.has(iqn)) await this.removeAcl(tpg, iqn);
    for (const iqn of initiators) {
      if (!(await this.cfs.exists(...tpg, 'acls', iqn))) await this.addAcl(tpg, iqn);
      await this.writeChap(tpg, iqn, chap);
    }
    if (chap) await this.cfs.write('1', ...tpg, 'attrib', 'authentication');
    await this.save();
  }

  private async addAcl(tpg: string[], iqn: string): Promise<void> {
    // targetcli's mapped LUN: acls/<iqn>/lun_0/<link> -> the TPG's lun_0.
    await this.cfs.mkdir(...tpg, 'acls', iqn, 'lun_0');
    await this.cfs.link([...tpg, 'lun', 'lun_0'], [...tpg, 'acls', iqn, 'lun_0', 'mapped']);
  }

  private async removeAcl(tpg: string[], iqn: string): Promise<void> {
    await this.cfs.unlink(...tpg, 'acls', iqn, 'lun_0', 'mapped');
    await this.cfs.rmdir(...tpg, 'acls', iqn, 'lun_0');
    await this.rmAclGroups(tpg, iqn);
    await this.cfs.rmdir(...tpg, 'acls', iqn);
  }

  /** An ACL's default groups (auth, attrib, param) are the kernel's: a test directory needs them gone by hand. */
  private async rmAclGroups(tpg: string[], iqn: string): Promise<void> {
    for (const g of ['auth', 'attrib', 'param', 'fabric_statistics']) await this.cfs.rmdirDefaultGroup(...tpg, 'acls', iqn, g);
  }

  /** userid/password of one ACL; without a credential both are cleared. */
  private async writeChap(tpg: string[], iqn: string, chap: Chap | undefined): Promise<void> {
    // "NULL" is LIO's word for unset; written without a newline, which LIO would keep in the value.
    await this.cfs.writeExact(chap?.userid ?? 'NULL', ...tpg, 'acls', iqn, 'auth', 'userid');
    await this.cfs.writeExact(chap?.secret ?? 'NULL', ...tpg, 'acls', iqn, 'auth', 'password');
  }

  async createDisk(name: string, backing: string, opts: { allowedInitiators?: string[]; chap?: Chap } = {}, save = true): Promise<void> {
    if (this.missing.length) throw new KernelFeatureError(`creating an iSCSI disk: ${this.missing.join('; ')}`);
    const initiators = opts.allowedInitiators ?? [];
    const chap = initiators.length ? opts.chap : undefined;
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
        await this.addAcl(tpg, iqn);
        if (chap) await this.writeChap(tpg, iqn, chap);
      }
      // Enforced only once every ACL holds the credential.
      if (chap) await this.cfs.write('1', ...tpg, 'attrib', 'authentication');
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
      for (const iqn of await this.cfs.list(...tpg, 'acls')) await this.removeAcl(tpg, iqn);
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
            attributes: Object.fromEntries(Object.entries(tpgAttrs(!t.allowed_initiators?.length, !!t.chap)).map(([k, v]) => [k, Number(v)])),
            luns: [{ index: 0, storage_object: `/backstores/fileio/${so}` }],
            portals: [{ ip_address: this.portal.addr, port: this.portal.port }],
            node_acls: (t.allowed_initiators ?? []).map((node_wwn) => ({
              node_wwn,
              ...(t.chap ? { chap_userid: t.chap.userid, chap_password: t.chap.secret } : {}),
              mapped_luns: [{ index: 0, tpg_lun: 0, write_protect: false }],
            })),
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
      node_acls: { node_wwn: string; chap_userid?: string; chap_password?: string; mapped_luns: { index: number; tpg_lun: number; write_protect: boolean }[] }[];
    }[];
  }[];
}
