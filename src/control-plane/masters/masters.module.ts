import { Module } from '@nestjs/common';
import { BootsModule } from '../boots/boots.module';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { MastersController } from './masters.controller';
import { MastersService } from './masters.service';
import { DistributionService } from './distribution.service';
import { RolloutsController } from './rollouts.controller';
import { RolloutsService } from './rollouts.service';

@Module({
  imports: [StorageNodesModule, BootsModule],
  controllers: [MastersController, RolloutsController],
  providers: [MastersService, RolloutsService, DistributionService],
  exports: [RolloutsService, MastersService],
})
export class MastersModule {}
