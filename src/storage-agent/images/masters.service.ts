import { UNSAFE_NAME_CHARS } from '../../shared/grammars';
import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { AgentConfig } from '../agent-config';
import type { MasterDto } from '../../shared/agent-contract/luns.dto';
import { ImageFs } from './image-fs';

/** Master images (`_tpl_` in the file name), rescanned in the background (IPXE_AGENT_MASTER_SCAN_SECONDS). */
@Injectable()
export class MastersService implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Masters');
  private masters: MasterDto[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly config: AgentConfig,
    private readonly images: ImageFs,
  ) {}

  async onModuleInit(): Promise<void> {
    this.images.mkdirp();
    await this.rescan();
    this.timer = setInterval(() => void this.rescan().catch((err) => this.log.error({ err }, 'master scan failed')), this.config.masterScanMs);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    if (this.timer) clearInterval(this.timer);
  }

  list(): MasterDto[] {
    return this.masters;
  }

  async rescan(): Promise<MasterDto[]> {
    const out: MasterDto[] = [];
    for (const name of (await this.images.list()).sort()) {
      // A name with control or format characters (a bidi override) would show as another one.
      if (!name.includes('_tpl_') || name.startsWith('.') || UNSAFE_NAME_CHARS.test(name)) continue;
      const st = await this.images.statInside(name);
      if (st) out.push({ name, size: st.size, mtime: Math.floor(st.mtimeMs / 1000) });
    }
    this.masters = out;
    return out;
  }
}
