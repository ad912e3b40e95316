import { Module } from '@nestjs/common';
import { SettingsModule } from '../settings/settings.module';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { DiskLoginWatcher } from './disk-login-watcher';
import { BootSessionsService } from './boot-sessions.service';
import { BootsController } from './boots.controller';
import { BootsService } from './boots.service';

@Module({
  imports: [SettingsModule, StorageNodesModule],
  controllers: [BootsController],
  providers: [BootSessionsService, BootsService, DiskLoginWatcher],
  exports: [BootSessionsService, BootsService],
})
export class BootsModule {}
