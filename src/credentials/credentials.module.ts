import { Module } from '@nestjs/common';
import { AgentsModule } from '../agents/agents.module';
import { CredentialStore } from './credential-store';
import { CredentialsController } from './credentials.controller';
import { CredentialsService } from './credentials.service';
import { IscsiAccessService } from './iscsi-access.service';

@Module({
  imports: [AgentsModule],
  controllers: [CredentialsController],
  providers: [CredentialStore, CredentialsService, IscsiAccessService],
  exports: [CredentialStore, CredentialsService, IscsiAccessService],
})
export class CredentialsModule {}
