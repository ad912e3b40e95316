import { Module } from '@nestjs/common';
import { SettingsModule } from '../settings/settings.module';
import { BindingService } from './binding.service';
import { DevicesController } from './devices.controller';
import { DevicesService } from './devices.service';

@Module({
  imports: [SettingsModule],
  controllers: [DevicesController],
  providers: [DevicesService, BindingService],
  exports: [DevicesService, BindingService],
})
export class DevicesModule {}
