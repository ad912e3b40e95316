import { Module } from '@nestjs/common';
import { AgentGateway } from './agent-gateway';
import { AgentRegistry } from './agent-registry';
import { AgentsController } from './agents.controller';
import { AgentsService } from './agents.service';

@Module({
  controllers: [AgentsController],
  providers: [AgentRegistry, AgentGateway, AgentsService],
  exports: [AgentRegistry, AgentGateway, AgentsService],
})
export class AgentsModule {}
