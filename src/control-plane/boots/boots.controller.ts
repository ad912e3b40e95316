import { Controller, Get, HttpCode, Param, Post, Query } from '@nestjs/common';
import { ApiNoContentResponse, ApiQuery, ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { Public } from '../../shared/http/auth.guard';
import { ClientIp } from '../common/client-ip.decorator';
import { BootsService } from './boots.service';
import { BootHoldDto, BootsPageDto, BootsQueryDto } from './dto/boot-session.dto';

@ApiTags('boots')
@Controller('boots')
export class BootsController {
  constructor(private readonly boots: BootsService) {}

  /** Boots of the fleet, newest first, each with its stages and times (kept: the last 10 per device, for 7 days). */
  @ApiErrors(400)
  @Get()
  list(@Query() q: BootsQueryDto): BootsPageDto {
    return this.boots.list(q);
  }

  /**
   * The booted operating system says it is up (no auth, like /devices/report; telemetry only:
   * it ends the device's boot with the `os` stage and changes nothing else). The kernel stage's
   * initramfs calls it once root is mounted: `curl -fsS -X POST '<controller>/boots/os-up?mac=<mac>'`.
   */
  @ApiErrors('public', 400)
  @Public()
  @Post('os-up')
  @HttpCode(204)
  @ApiQuery({ name: 'mac', required: true, type: String, description: 'MAC of the booted device' })
  @ApiNoContentResponse({ description: 'Recorded (or ignored: an unknown or revoked device).' })
  osUp(@Query('mac') mac: unknown): void {
    this.boots.osUp(mac);
  }

  /** Releases a looping device: its earlier boots no longer count and /boot-vars answers it as before. Written to the boot event store before it is answered; audited. */
  @ApiErrors(400, 404, 'writes')
  @Post(':mac/release')
  @HttpCode(200)
  release(@Param('mac') mac: string, @ClientIp() client: string): Promise<BootHoldDto> {
    return this.boots.release(mac, client);
  }
}
