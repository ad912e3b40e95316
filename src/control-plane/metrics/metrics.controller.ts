import { Controller, Get, Header } from '@nestjs/common';
import { ApiOkResponse, ApiProduces, ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { MetricsService } from './metrics.service';

@ApiTags('metrics')
@Controller()
export class MetricsController {
  constructor(private readonly metrics: MetricsService) {}

  /**
   * Prometheus text format: requests and latency per route, devices and workers by state, the
   * registration window, reconciler passes, credential pushes and their queue, agent health,
   * store commit latency, process metrics. No MAC and no secret in any label. Needs the token
   * unless IPXE_CP_METRICS_PUBLIC=true.
   */
  @ApiErrors()
  @Get('metrics')
  @Header('Cache-Control', 'no-store')
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  @ApiProduces('text/plain')
  @ApiOkResponse({ description: 'Prometheus exposition format 0.0.4.', content: { 'text/plain': { schema: { type: 'string', example: '# HELP kurrent_devices Devices in the ledger, by state.\n...' } } } })
  async scrape(): Promise<string> {
    return (await this.metrics.render()).body;
  }
}
