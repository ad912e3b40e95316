import { Module } from '@nestjs/common';
import { AgentGateway } from './agent-gateway';
import { AgentHealthWatcher } from './agent-health-watcher';
import { StorageNodeRegistry } from './storage-node-registry';
import { StorageNodesController } from './storage-nodes.controller';
import { StorageNodesService } from './storage-nodes.service';

@Module({
  controllers: [StorageNodesController],
  providers: [StorageNodeRegistry, AgentGateway, StorageNodesService, AgentHealthWatcher],
  exports: [StorageNodeRegistry, AgentGateway, StorageNodesService, AgentHealthWatcher],
})
export class StorageNodesModule {}
