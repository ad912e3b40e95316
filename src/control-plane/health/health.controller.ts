import { Controller, Get } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { Public } from '../../shared/http/auth.guard';
import { CacheFreshness } from '../repositories/cache-freshness';
import { HealthDto } from './dto/health.dto';

@ApiTags('health')
@Controller()
export class HealthController {
  constructor(private readonly freshness: CacheFreshness) {}

  /**
   * Health check (no auth, changes nothing): `{"status":"ok"}` while this process serves
   * requests from a current view of the store. On PostgreSQL it answers 503 once this control
   * plane has not caught up with the database for longer than IPXE_CP_STALENESS_MAX_MS, so a
   * load balancer stops sending it boots whose bindings it may no longer know.
   */
  @Public()
  @ApiErrors('public', [503, 'Stale: this control plane has not caught up with the database within IPXE_CP_STALENESS_MAX_MS (PostgreSQL store).'])
  @Get('healthz')
  health(): HealthDto {
    return this.freshness.health();
  }
}
