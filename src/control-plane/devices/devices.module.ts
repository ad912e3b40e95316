import { BootsModule } from '../boots/boots.module';
import { Module } from '@nestjs/common';
import { SettingsModule } from '../settings/settings.module';
import { BindingService } from './binding.service';
import { DevicesController } from './devices.controller';
import { DevicesService } from './devices.service';
import { RegistrationLimiter } from './registration-limiter';

@Module({
  imports: [SettingsModule, BootsModule],
  controllers: [DevicesController],
  providers: [DevicesService, BindingService, RegistrationLimiter],
  exports: [DevicesService, BindingService],
})
export class DevicesModule {}
