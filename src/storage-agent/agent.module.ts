import { DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_PIPE } from '@nestjs/core';
import { LoggerModule } from 'nestjs-pino';
import { logDestination } from '../shared/http/log-destination';
import { REDACT_PATHS } from '../shared/http/redaction';
import { AuthGuard, BEARER_TOKEN } from '../shared/http/auth.guard';
import { AllExceptionsFilter } from '../shared/http/exception.filter';
import { ProcessRunner } from '../shared/process-runner';
import { createValidationPipe } from '../shared/http/validation';
import { FileSystem } from '../shared/files/file-system';
import { AgentConfig } from './agent-config';
import { TARGET_BACKEND, TargetBackend } from './backends/backend';
import { ConfigFs } from './backends/configfs';
import { LioBackend } from './backends/lio.backend';
import { NvmetBackend } from './backends/nvmet.backend';
import { KernelInfo } from './backends/kernel-info';
import { KernelNvmeKeyring, NoNvmeKeyring } from './backends/nvme-keyring';
import { StgtBackend } from './backends/stgt.backend';
import { ImageFs } from './images/image-fs';
import { MasterStoreController } from './images/master-store.controller';
import { MasterStoreService } from './images/master-store.service';
import { MasterTransferService } from './images/master-transfer.service';
import { PeerAgentClient } from './images/peer-agent-client';
import { AgentClock } from './agent-clock';
import { LunsController } from './luns/luns.controller';
import { LunsService } from './luns/luns.service';
import { TargetManifest } from './luns/manifest';
import { NvmeHostsController } from './nvme/nvme-hosts.controller';
import { NvmeHostsService } from './nvme/nvme-hosts.service';
import { SystemController } from './system/system.controller';
import { SystemService } from './system/system.service';

/** IPXE_AGENT_BACKEND picks the one implementation of TargetBackend. */
export function createBackend(c: AgentConfig, proc: ProcessRunner, files: FileSystem): TargetBackend {
  switch (c.backend) {
    case 'stgt':
      return new StgtBackend(proc, c.tgtControlPort);
    case 'lio':
      return new LioBackend(new ConfigFs(c.configfsRoot), c.lioSaveconfig, { addr: c.portalAddr, port: c.iscsiPort }, new KernelInfo());
    case 'nvmet': {
      const cfs = new ConfigFs(c.configfsRoot);
      // The kernel keyring only behind a real configfs; a test directory has no kernel behind it.
      const keyring = cfs.real ? new KernelNvmeKeyring(proc, files) : new NoNvmeKeyring();
      // Connections are visible only in debugfs (when the kernel has CONFIG_NVME_TARGET_DEBUGFS).
      return new NvmetBackend(cfs, { addr: c.portalAddr, port: c.nvmePort, tls: c.nvmeTls }, keyring, new KernelInfo(), cfs.real ? '/sys/kernel/debug/nvmet' : null);
    }
  }
}

@Module({})
export class AgentModule {
  static forRoot(config: AgentConfig): DynamicModule {
    return {
      module: AgentModule,
      imports: [
        LoggerModule.forRoot({
          pinoHttp: [{ level: config.logLevel, redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, logDestination()],
          forRoutes: [],
        }),
      ],
      controllers: [SystemController, LunsController, MasterStoreController, NvmeHostsController],
      providers: [
        { provide: AgentConfig, useValue: config },
        { provide: BEARER_TOKEN, useValue: config.token },
        ProcessRunner,
        FileSystem,
        { provide: ImageFs, useFactory: () => new ImageFs(config.diskDir) },
        { provide: TARGET_BACKEND, useFactory: (proc: ProcessRunner, files: FileSystem) => createBackend(config, proc, files), inject: [ProcessRunner, FileSystem] },
        TargetManifest,
        SystemService,
        MasterStoreService,
        AgentClock,
        PeerAgentClient,
        MasterTransferService,
        LunsService,
        NvmeHostsService,
        { provide: APP_GUARD, useClass: AuthGuard },
        { provide: APP_FILTER, useClass: AllExceptionsFilter },
        { provide: APP_PIPE, useFactory: createValidationPipe },
      ],
    };
  }
}
