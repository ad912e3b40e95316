import { Module } from '@nestjs/common';
import { BootsModule } from '../boots/boots.module';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { ChangeFeed } from './change-feed';
import { ChangeSources } from './change-sources';
import { ChangesController } from './changes.controller';

@Module({
  imports: [BootsModule, StorageNodesModule],
  controllers: [ChangesController],
  providers: [ChangeFeed, ChangeSources],
  exports: [ChangeFeed],
})
export class ChangesModule {}
