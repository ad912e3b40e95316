import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { MastersController } from './masters.controller';
import { MastersService } from './masters.service';

@Module({
  imports: [StorageNodesModule],
  controllers: [MastersController],
  providers: [MastersService],
})
export class MastersModule {}
