import { Body, Controller, Get, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { AdmissionDto } from './dto/admission.dto';
import { AutoRegisterDto } from './dto/auto-register.dto';
import { BootPolicyDto, SetBootPolicyDto } from './dto/boot-policy.dto';
import { EnforcementDto, SetEnforcementDto } from './dto/signature-enforcement.dto';
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

  /**
   * How a device that reports for the first time is treated now (open auto-register, window only,
   * closed), why, the registration window with its admitted count, and the unknown devices this
   * control plane turned away, by reason (each is also audited as device.register.refused).
   */
  @ApiErrors()
  @Get('admission')
  admission(): AdmissionDto {
    return this.settings.getAdmission();
  }

  /** Signature enforcement and the bound devices that would be locked out (no key yet). */
  @ApiErrors()
  @Get('signature-enforcement')
  getEnforcement(): EnforcementDto {
    return this.settings.getEnforcement();
  }

  /**
   * Turns signature enforcement on or off. On: /boot-vars releases per-worker variables only to a
   * bound device that signed a fresh challenge. Refused (409, listing them) while bound devices
   * have no key, unless force is true. Audited.
   */
  @ApiErrors(400, [409, 'Bound devices have no key (listed in `devices`); pass force: true to lock them out.'], 'writes')
  @Put('signature-enforcement')
  setEnforcement(@Body() body: SetEnforcementDto, @ClientIp() client: string): Promise<EnforcementDto> {
    return this.settings.setEnforcement(body.enabled, body.force ?? false, client);
  }

  /** Switches auto-register; persisted, effective immediately, audited as settings.auto_register. */
  @ApiErrors(400, 'writes')
  @Put('auto-register')
  set(@Body() body: AutoRegisterDto, @ClientIp() client: string): Promise<AutoRegisterDto> {
    return this.settings.setAutoRegister(body.enabled, client);
  }

  /** When a boot counts as stuck, when a device counts as looping, and what a looping device is answered. */
  @ApiErrors()
  @Get('boot-policy')
  getBootPolicy(): BootPolicyDto {
    return this.settings.bootPolicy;
  }

  /** Changes the given fields of the boot policy; persisted, effective at once, audited as settings.boot_policy. */
  @ApiErrors(400, 'writes')
  @Put('boot-policy')
  setBootPolicy(@Body() body: SetBootPolicyDto, @ClientIp() client: string): Promise<BootPolicyDto> {
    return this.settings.setBootPolicy(body, client);
  }
}
