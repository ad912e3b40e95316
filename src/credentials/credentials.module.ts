import { Module } from '@nestjs/common';
import { AgentsModule } from '../agents/agents.module';
import { CredentialStore } from './credential-store';
import { CredentialsController } from './credentials.controller';
import { CredentialsService } from './credentials.service';

@Module({
  imports: [AgentsModule],
  controllers: [CredentialsController],
  providers: [CredentialStore, CredentialsService],
  exports: [CredentialStore, CredentialsService],
})
export class CredentialsModule {}
