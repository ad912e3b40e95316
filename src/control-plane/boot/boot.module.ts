import { BootsModule } from '../boots/boots.module';
import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { SettingsModule } from '../settings/settings.module';
import { MastersModule } from '../masters/masters.module';
import { BootController } from './boot.controller';
import { BootService } from './boot.service';
import { ChallengeService } from './challenge.service';
import { DiskResetService } from './disk-reset.service';
import { DiskVarsResolver } from './disk-vars';
import { IpxeScriptsService } from './ipxe-scripts.service';

@Module({
  imports: [SettingsModule, StorageNodesModule, CredentialsModule, BootsModule, MastersModule],
  controllers: [BootController],
  providers: [BootService, DiskVarsResolver, DiskResetService, ChallengeService, IpxeScriptsService],
  exports: [BootService],
})
export class BootModule {}
