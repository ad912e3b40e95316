import { HOST_NQN } from '../../shared/grammars';
import { Inject, Injectable } from '@nestjs/common';
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { badRequest, conflict, notFound } from '../../shared/http/api-error';
import { FileSystem } from '../../shared/files/file-system';
import { LedgerFileError } from '../../shared/files/ledger-map';
import { AgentConfig } from '../agent-config';
import { HostCredentials, KernelFeatureError, TARGET_BACKEND, TargetBackend } from '../backends/backend';
import { TargetManifest } from '../luns/manifest';
import type { NvmeHostDto, PutNvmeHostDto } from '../../shared/agent-contract/nvme-host.dto';
import { dhchapKeyError, tlsPskError } from '../../shared/nvme-keys';

const short = (s: string | undefined) => (s ? createHash('sha256').update(s).digest('hex').slice(0, 12) : null);

/**
 * Per-host NVMe credentials pushed by the control plane. Kept in a 0600 state file (so a restart
 * or a rebuilt configfs gets them back) and written to nvmet's hosts/<hostnqn>. Never echoed.
 */
@Injectable()
export class NvmeHostsService {
  private readonly file: string;
  private hosts = new Map<string, HostCredentials>();
  private restored = false;

  constructor(
    config: AgentConfig,
    private readonly fs: FileSystem,
    @Inject(TARGET_BACKEND) private readonly backend: TargetBackend,
    private readonly manifest: TargetManifest,
  ) {
    this.file = path.join(config.stateDir, 'nvme-hosts.json');
  }

  /**
   * Loads the state file and writes every host back to the backend. Called by the LUN service at
   * start, before its scan rebuilds subsystems, whose allowed_hosts links need the hosts.
   */
  async restore(): Promise<void> {
    if (this.restored) return;
    this.restored = true;
    const text = this.fs.readTextSync(this.file);
    if (!text) return;
    try {
      this.hosts = new Map(Object.entries(JSON.parse(text) as Record<string, HostCredentials>));
    } catch (e) {
      throw new LedgerFileError(this.file, 1, `invalid JSON: ${(e as Error).message}`);
    }
    const missing = this.backend.features().missing;
    // A kernel that cannot hold them keeps them in the state file only (capabilities say why).
    if (missing.length) return;
    if (this.backend.putHost) for (const [nqn, c] of this.hosts) await this.backend.putHost(nqn, c);
  }

  has(hostnqn: string): boolean {
    return this.hosts.has(hostnqn);
  }

  async list(): Promise<NvmeHostDto[]> {
    const out: NvmeHostDto[] = [];
    for (const hostnqn of [...this.hosts.keys()].sort()) out.push(await this.view(hostnqn));
    return out;
  }

  private async view(hostnqn: string): Promise<NvmeHostDto> {
    const c = this.hosts.get(hostnqn)!;
    return {
      hostnqn,
      dhchap_hash: c.dhchap_hash,
      dhchap_dhgroup: c.dhchap_dhgroup,
      dhchap_key_sha256: short(c.dhchap_key)!,
      dhchap_ctrl_key_sha256: short(c.dhchap_ctrl_key),
      tls_psk_sha256: short(c.tls_psk),
      subsystems: this.backend.hostSubsystems ? await this.backend.hostSubsystems(hostnqn) : [],
    };
  }

  async put(hostnqn: string, dto: PutNvmeHostDto): Promise<NvmeHostDto> {
    this.checkNvmet();
    this.checkNqn(hostnqn);
    for (const [field, err] of [
      ['dhchap_key', dhchapKeyError(dto.dhchap_key)],
      ['dhchap_ctrl_key', dto.dhchap_ctrl_key === undefined ? null : dhchapKeyError(dto.dhchap_ctrl_key)],
      ['tls_psk', dto.tls_psk === undefined ? null : tlsPskError(dto.tls_psk)],
    ] as const) {
      if (err) throw badRequest(`${field}: ${err}`);
    }
    let wanted: Set<string> | null = null;
    if (dto.subsystems) {
      wanted = new Set(dto.subsystems);
      const existing = new Set((await this.backend.list()).map((t) => t.name));
      for (const nqn of wanted) if (!existing.has(nqn)) throw notFound(`subsystems: subsystem not found: ${nqn}`);
    }
    const creds: HostCredentials = {
      dhchap_key: dto.dhchap_key,
      dhchap_hash: dto.dhchap_hash,
      dhchap_dhgroup: dto.dhchap_dhgroup,
      ...(dto.dhchap_ctrl_key ? { dhchap_ctrl_key: dto.dhchap_ctrl_key } : {}),
      ...(dto.tls_psk ? { tls_psk: dto.tls_psk } : {}),
    };
    try {
      await this.backend.putHost!(hostnqn, creds);
    } catch (e) {
      if (e instanceof KernelFeatureError) throw conflict(e.message);
      throw e;
    }
    this.hosts.set(hostnqn, creds);
    await this.save();
    if (wanted) {
      const linked = new Set(await this.backend.hostSubsystems!(hostnqn));
      for (const nqn of wanted) if (!linked.has(nqn)) await this.allow(nqn, hostnqn, true);
      for (const nqn of linked) if (!wanted.has(nqn)) await this.allow(nqn, hostnqn, false);
    }
    return this.view(hostnqn);
  }

  /** One allowed_hosts link, kept in the target manifest too so a rebuilt subsystem gets it back. */
  private async allow(nqn: string, hostnqn: string, allow: boolean): Promise<void> {
    await this.backend.allowHost!(nqn, hostnqn, allow);
    const e = this.manifest.get(nqn);
    if (!e) return;
    const hosts = new Set(e.allowed_hosts ?? []);
    if (allow) hosts.add(hostnqn);
    else hosts.delete(hostnqn);
    const { allowed_hosts: _old, ...rest } = e;
    await this.manifest.set(nqn, { ...rest, ...(hosts.size ? { allowed_hosts: [...hosts].sort() } : {}) });
  }

  async remove(hostnqn: string): Promise<{ deleted: string }> {
    this.checkNvmet();
    this.checkNqn(hostnqn);
    if (!this.hosts.has(hostnqn)) throw notFound(`host not found: ${hostnqn}`);
    for (const nqn of await this.backend.hostSubsystems!(hostnqn)) await this.allow(nqn, hostnqn, false);
    await this.backend.removeHost!(hostnqn);
    this.hosts.delete(hostnqn);
    await this.save();
    return { deleted: hostnqn };
  }

  private async save(): Promise<void> {
    await this.fs.writeAtomic(this.file, JSON.stringify(Object.fromEntries(this.hosts), null, 2) + '\n', 0o600);
  }

  private checkNvmet(): void {
    if (!this.backend.putHost) throw badRequest(`the ${this.backend.name} backend has no NVMe hosts`);
  }

  private checkNqn(hostnqn: string): void {
    if (!HOST_NQN.test(hostnqn) || hostnqn.length > 223) throw badRequest(`hostnqn: not a host NQN: ${JSON.stringify(hostnqn)}`);
  }
}
