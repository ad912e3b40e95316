import { Controller, Get } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { Public } from '../../shared/http/auth.guard';
import { AgentHealthDto, CapabilitiesDto } from '../../shared/agent-contract/capabilities.dto';
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
}
