import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { ReconcilerController } from './reconciler.controller';
import { ReconcilerService } from './reconciler.service';

@Module({
  imports: [ScheduleModule.forRoot(), StorageNodesModule, CredentialsModule],
  controllers: [ReconcilerController],
  providers: [ReconcilerService],
  exports: [ReconcilerService],
})
export class ReconcilerModule {}
