import { Body, Controller, Get, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../common/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { AutoRegisterDto } from './dto/auto-register.dto';
import { SettingsService } from './settings.service';

@ApiTags('settings')
@Controller('settings')
export class SettingsController {
  constructor(private readonly settings: SettingsService) {}

  /** Effective auto-register switch (state/settings.json over IPXE_CP_AUTO_REGISTER). */
  @ApiErrors()
  @Get('auto-register')
  get(): AutoRegisterDto {
    return this.settings.getAutoRegister();
  }

  /** Switches auto-register; persisted, effective immediately, audited as settings.auto_register. */
  @ApiErrors(400, 'writes')
  @Put('auto-register')
  set(@Body() body: AutoRegisterDto, @ClientIp() client: string): Promise<AutoRegisterDto> {
    return this.settings.setAutoRegister(body.enabled, client);
  }
}
