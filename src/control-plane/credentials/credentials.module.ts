import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { CredentialsController } from './credentials.controller';
import { CredentialsService } from './credentials.service';
import { IscsiAccessService } from './iscsi-access.service';

@Module({
  imports: [StorageNodesModule],
  controllers: [CredentialsController],
  providers: [CredentialsService, IscsiAccessService],
  exports: [CredentialsService, IscsiAccessService],
})
export class CredentialsModule {}
