import { Module } from '@nestjs/common';
import { AgentGateway } from './agent-gateway';
import { StorageNodeRegistry } from './storage-node-registry';
import { StorageNodesController } from './storage-nodes.controller';
import { StorageNodesService } from './storage-nodes.service';

@Module({
  controllers: [StorageNodesController],
  providers: [StorageNodeRegistry, AgentGateway, StorageNodesService],
  exports: [StorageNodeRegistry, AgentGateway, StorageNodesService],
})
export class StorageNodesModule {}
