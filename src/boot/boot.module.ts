import { Module } from '@nestjs/common';
import { AgentsModule } from '../agents/agents.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { SettingsModule } from '../settings/settings.module';
import { BootController } from './boot.controller';
import { BootService } from './boot.service';
import { ChallengeService } from './challenge.service';
import { DiskVarsResolver } from './disk-vars';
import { IpxeScriptsService } from './ipxe-scripts.service';

@Module({
  imports: [SettingsModule, AgentsModule, CredentialsModule],
  controllers: [BootController],
  providers: [BootService, DiskVarsResolver, ChallengeService, IpxeScriptsService],
  exports: [BootService],
})
export class BootModule {}
