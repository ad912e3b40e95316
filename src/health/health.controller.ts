import { Controller, Get } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { Public } from '../common/auth.guard';
import { HealthDto } from './dto/health.dto';

@ApiTags('health')
@Controller()
export class HealthController {
  /** Liveness (no auth). */
  @Public()
  @Get('healthz')
  health(): HealthDto {
    return { status: 'ok' };
  }
}
