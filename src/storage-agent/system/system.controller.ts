import { Controller, Get } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { Public } from '../../shared/http/auth.guard';
import { AgentHealthDto, AgentUsageDto, CapabilitiesDto } from '../../shared/agent-contract/capabilities.dto';
import { SystemService } from './system.service';

@ApiTags('system')
@Controller()
export class SystemController {
  constructor(private readonly system: SystemService) {}

  /** Liveness (no auth). */
  @Public()
  @Get('healthz')
  health(): AgentHealthDto {
    return { status: 'ok' };
  }

  /** Backend, filesystem, clone method and naming of this storage node. */
  @ApiErrors()
  @Get('capabilities')
  capabilities(): CapabilitiesDto {
    return this.system.capabilities();
  }

  /**
   * Disk space of DISK_DIR's filesystem and how many targets, masters and initiator logins this node
   * has now. Separate from /capabilities: those are fixed at start, and the control plane's cached
   * boot answers depend on them; usage changes with every disk.
   */
  @ApiErrors()
  @Get('usage')
  usage(): Promise<AgentUsageDto> {
    return this.system.usage();
  }
}
