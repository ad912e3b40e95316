import { BootsModule } from '../boots/boots.module';
import { ChangesModule } from '../changes/changes.module';
import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { BootModule } from '../boot/boot.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { ReconcilerModule } from '../reconciler/reconciler.module';
import { SettingsModule } from '../settings/settings.module';
import { MetricsController } from './metrics.controller';
import { MetricsService } from './metrics.service';

@Module({
  imports: [SettingsModule, StorageNodesModule, CredentialsModule, ReconcilerModule, BootModule, BootsModule, ChangesModule],
  controllers: [MetricsController],
  providers: [MetricsService],
  exports: [MetricsService],
})
export class MetricsModule {}
