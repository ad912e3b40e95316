import { Module } from '@nestjs/common';
import { SettingsModule } from '../settings/settings.module';
import { BootController } from './boot.controller';
import { BootService } from './boot.service';
import { DiskVarsResolver } from './disk-vars';

@Module({
  imports: [SettingsModule],
  controllers: [BootController],
  providers: [BootService, DiskVarsResolver],
})
export class BootModule {}
