import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { AgentConfig } from '../agent-config';
import { TARGET_BACKEND, TargetBackend } from '../backends/backend';
import { ImageFs } from '../images/image-fs';
import { MasterStoreService } from '../images/master-store.service';
import type { AgentUsageDto, CapabilitiesDto } from '../../shared/agent-contract/capabilities.dto';

/** Honest capabilities: the reflink probe and the filesystem type are measured at start. */
@Injectable()
export class SystemService implements OnModuleInit {
  /** The parts measured once at start; nvme_tls and kernel depend on the backend's start. */
  private caps!: Omit<CapabilitiesDto, 'kernel' | 'nvme_tls'>;
  private reflink = false;

  constructor(
    private readonly config: AgentConfig,
    @Inject(TARGET_BACKEND) private readonly backend: TargetBackend,
    private readonly images: ImageFs,
    private readonly masters: MasterStoreService,
  ) {}

  async onModuleInit(): Promise<void> {
    this.images.mkdirp();
    const fsType = await this.images.fsType();
    const reflink = (this.reflink = await this.images.probeReflink());
    const nvme = this.backend.transport === 'nvme-tcp';
    this.caps = {
      backend: this.backend.name,
      fs_type: fsType,
      cd: this.backend.supportsCd,
      persistent: this.backend.persistence,
      base_iqn: nvme ? null : this.config.baseIqn,
      base_nqn: nvme ? this.config.baseNqn : null,
      clone: reflink ? 'reflink (FICLONE)' : `sparse copy (no reflink on ${fsType})`,
      empty_disk: 'truncate (sparse)',
      max_file_size: await this.images.maxFileSize(),
      transport: this.backend.transport,
      iscsi_port: nvme ? null : this.config.iscsiPort,
      nvme_port: nvme ? this.config.nvmePort : null,
    };
  }

  /** The kernel part is read at each call: the backend knows it only after its start. */
  capabilities(): CapabilitiesDto {
    const k = this.backend.features();
    const nvme = this.backend.transport === 'nvme-tcp';
    return {
      ...this.caps,
      nvme_tls: nvme ? this.config.nvmeTls && !k.missing.length && k.nvmet_tls !== false : null,
      kernel: { ...k, reflink: this.reflink },
    };
  }

  /** GET /usage: the filesystem's numbers and the targets, masters and logins of this node now. */
  async usage(): Promise<AgentUsageDto> {
    const [space, targets, sessions] = await Promise.all([this.images.space(), this.backend.list(), this.backend.sessions()]);
    const cds = targets.filter((t) => t.cd).length;
    return {
      total_bytes: space.total,
      used_bytes: space.used,
      free_bytes: space.free,
      disk_targets: targets.length - cds,
      cd_targets: cds,
      masters: this.masters.list().length,
      sessions: sessions === null ? null : sessions.length,
    };
  }
}
