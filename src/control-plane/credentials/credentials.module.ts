import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { CredentialStore } from './credential-store';
import { CredentialsController } from './credentials.controller';
import { CredentialsService } from './credentials.service';
import { IscsiAccessService } from './iscsi-access.service';

@Module({
  imports: [StorageNodesModule],
  controllers: [CredentialsController],
  providers: [CredentialStore, CredentialsService, IscsiAccessService],
  exports: [CredentialStore, CredentialsService, IscsiAccessService],
})
export class CredentialsModule {}
