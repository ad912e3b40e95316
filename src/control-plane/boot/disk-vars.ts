import { Injectable } from '@nestjs/common';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import { CredentialsService } from '../credentials/credentials.service';
import { IscsiAccessService } from '../credentials/iscsi-access.service';
import { DiskRecord, targetName, WorkerRecord } from '../repositories/ledger/records';
import { BootBlockerCode } from './dto/boot-readiness.dto';

export interface DiskVars {
  base_iqn: string;
  iscsi_server?: string;
  iscsi_sep?: string;
}

/** What a worker whose default disk is NVMe/TCP needs to connect to it (seed 004 section 5). */
export interface NvmeVars {
  disk_nqn: string;
  storager_ip: string;
  nvme_port: number;
  hostnqn: string;
  tls_psk: string;
  dhchap_secret: string;
  dhchap_ctrl_secret: string;
}

/** One item of the worker's boot menu: a disk it can boot. */
export interface MenuItem {
  id: string;
  label: string;
  root: string;
  os: string;
  os_version: string | null;
  os_tag: string | null;
  transport: 'iscsi' | 'nvme-tcp';
}

const isNvme = (d: DiskRecord) => d.transport === 'nvme-tcp';

/**
 * The boot projection of a worker's disks, for /boot-vars and /boot-menu. No network here (this
 * runs on every boot): agent backends and NVMe ports come from the cached capabilities, NVMe
 * credentials from the credential store.
 */
@Injectable()
export class DiskVarsResolver {
  constructor(
    private readonly registry: StorageNodeRegistry,
    private readonly storageNodes: StorageNodesService,
    private readonly credentials: CredentialsService,
    private readonly iscsiAccess: IscsiAccessService,
  ) {}

  /**
   * Changes whenever anything this class reads changes: the agent registry (hand edits included),
   * the cached capabilities, the credentials and their push states. Part of BootService's cache key.
   */
  revision(): number {
    return this.registry.revision() + this.storageNodes.capsRevision + this.credentials.revision;
  }

  /**
   * The default boot disk: default_disk (os_tag), else the disk of default_os (`explicit`), else
   * the first iSCSI disk (seed 000: base_iqn is handed out before a default is set). An NVMe disk
   * is never an implicit default: its secrets go out only for the disk the operator chose.
   */
  defaultDisk(w: WorkerRecord): { disk: DiskRecord; explicit: boolean } | undefined {
    const chosen =
      (w.default_disk && w.disks.find((d) => d.os_tag === w.default_disk)) || (w.default_os && w.disks.find((d) => d.os === w.default_os)) || undefined;
    if (chosen) return { disk: chosen, explicit: true };
    const first = w.disks.find((d) => !isNvme(d));
    return first ? { disk: first, explicit: false } : undefined;
  }

  /** Menu item id of a disk: its os, or `<os>-<os_tag>` when it has an os_version (several per os). */
  itemId(d: DiskRecord): string {
    return d.os_version && d.os_tag ? `${d.os}-${d.os_tag}` : d.os;
  }

  /** iSCSI variables of an iSCSI disk: base_iqn from its IQN, server and separator from its agent. */
  iscsi(disk: DiskRecord): DiskVars {
    const name = targetName(disk);
    const base_iqn = name.slice(0, name.lastIndexOf(':'));
    return { base_iqn, ...this.agentVars(disk) };
  }

  /**
   * The CHAP credential of a worker with iSCSI disks on LIO or stgt (one per worker, for every menu item):
   * undefined when it has none there or no credential (targets made before CHAP), null when the
   * credential is revoked (its targets are locked).
   */
  iscsiChap(w: WorkerRecord): { userid: string; secret: string } | null | undefined {
    if (!w.disks.some((d) => this.iscsiAccess.hasInitiatorAcl(d))) return undefined;
    return this.iscsiAccess.chapOf(w.worker_id);
  }

  hasInitiatorAcl(disk: DiskRecord): boolean {
    return this.iscsiAccess.hasInitiatorAcl(disk);
  }

  /**
   * NVMe/TCP variables of a disk, or null when it must not boot: no credential, revoked, not
   * (yet) on the disk's agent, or the agent's port unknown or without TLS (never plaintext).
   */
  nvme(w: WorkerRecord, disk: DiskRecord): NvmeVars | null {
    const v = this.nvmeOrBlocker(w, disk);
    return typeof v === 'string' ? null : v;
  }

  /** What nvme() gives, or why it gives null (a worker's boot readiness says it). */
  nvmeOrBlocker(w: WorkerRecord, disk: DiskRecord): NvmeVars | BootBlockerCode {
    const a = this.registry.get(disk.agent);
    if (!a) return 'agent-unknown';
    const caps = this.storageNodes.cachedCapabilities(a.id);
    if (!caps?.nvme_port) return 'nvme-port-unknown';
    if (caps.nvme_tls !== true) return 'nvme-port-without-tls';
    const cred = this.credentials.bootCredentialOrBlocker(w.worker_id, disk);
    if (typeof cred === 'string') return cred;
    return { disk_nqn: disk.nqn!, storager_ip: this.storageNodes.dataAddress(a), nvme_port: caps.nvme_port, ...cred };
  }

  /** The agent that serves a disk, as the control plane last saw it: null when it is fine. */
  agentBlocker(disk: DiskRecord): BootBlockerCode | null {
    const a = this.registry.get(disk.agent);
    if (!a) return 'agent-unknown';
    if (!a.enabled) return 'agent-draining';
    if (this.storageNodes.lastProbe.get(a.id)?.up === false) return 'agent-down';
    return null;
  }

  /** Every disk the worker can boot now, in a stable order (os, os_version, os_tag). */
  menu(w: WorkerRecord): { items: MenuItem[]; install_root: string | null } {
    const items: MenuItem[] = [];
    const sorted = [...w.disks].sort(
      (a, b) => a.os.localeCompare(b.os) || (a.os_version ?? '').localeCompare(b.os_version ?? '') || (a.os_tag ?? '').localeCompare(b.os_tag ?? ''),
    );
    for (const d of sorted) {
      let root: string;
      if (isNvme(d)) {
        const v = this.nvme(w, d);
        if (!v) continue; // not bootable now: left out rather than offered and failing
        root = `nvme://${v.storager_ip}:${v.nvme_port}/${v.disk_nqn}`;
      } else {
        const v = this.iscsi(d);
        if (!v.iscsi_server || !v.iscsi_sep) continue;
        // A revoked credential locked the target: offered, it could only fail.
        if (this.iscsiAccess.hasInitiatorAcl(d) && this.iscsiAccess.chapOf(w.worker_id) === null) continue;
        root = `iscsi:${v.iscsi_server}${v.iscsi_sep}${targetName(d)}`;
      }
      const label = `${d.os}${d.os_version ? ` ${d.os_version}` : ''} (${isNvme(d) ? 'nvme' : 'iscsi'}${d.os_tag ? ` ${d.os_tag}` : ''})`;
      items.push({ id: this.itemId(d), label, root, os: d.os, os_version: d.os_version ?? null, os_tag: d.os_tag ?? null, transport: isNvme(d) ? 'nvme-tcp' : 'iscsi' });
    }
    let install_root: string | null = null;
    if (w.cd) {
      const v = this.agentVars(w.cd);
      if (v.iscsi_server && v.iscsi_sep) install_root = `iscsi:${v.iscsi_server}${v.iscsi_sep}${w.cd.iqn}`;
    }
    return { items, install_root };
  }

  /**
   * iscsi_server: the agent's iscsi_server, else the host of its base_url. iscsi_sep: the
   * agent's lio/stgt tag, else its cached capabilities.backend, else stgt; the iSCSI port the
   * agent reports (capabilities.iscsi_port) goes into it when it is not 3260.
   */
  private agentVars(disk: { agent: string }): Omit<DiskVars, 'base_iqn'> {
    const a = this.registry.get(disk.agent);
    if (!a) return {};
    const caps = this.storageNodes.cachedCapabilities(a.id);
    const backend = this.storageNodes.backendOf(a);
    const port = caps?.iscsi_port && caps.iscsi_port !== 3260 ? String(caps.iscsi_port) : '';
    return { iscsi_server: this.storageNodes.dataAddress(a), iscsi_sep: `::${port}:${backend === 'lio' ? '' : '1'}:` };
  }
}
