import { Body, Controller, Delete, Get, HttpCode, Param, Post, Put, Query } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { CreateCdDto, CreatedLunDto, CreateLunDiskDto, ScanResultDto, LunTargetDto } from '../../shared/agent-contract/luns.dto';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { StorageNodesService } from './storage-nodes.service';
import {
  AgentDeletedDto,
  AgentDto,
  DeleteAgentQueryDto,
  CreateAgentDto,
  ListAgentsQueryDto,
  PassthroughDeletedDto,
  PassthroughDeleteQueryDto,
  ProbeAgentDto,
  ProbeResultDto,
  UpdateAgentDto,
} from './dto/storage-node.dto';

@ApiTags('agents')
@Controller()
export class StorageNodesController {
  constructor(private readonly storageNodes: StorageNodesService) {}

  /** Agents of config/agents.yml; live=true (default) probes each enabled one in parallel. */
  @ApiErrors(400)
  @Get('agents')
  list(@Query() q: ListAgentsQueryDto): Promise<AgentDto[]> {
    return this.storageNodes.list(q.live ?? true);
  }

  /** Registers an agent (written to agents.yml, effective at once); an id or base_url already registered is a 409. */
  @ApiErrors(400, 409, 'writes')
  @Post('agents')
  create(@Body() body: CreateAgentDto, @ClientIp() client: string): Promise<AgentDto> {
    return this.storageNodes.create(body, client);
  }

  /** Derives registration parameters from a live agent; writes nothing. */
  @ApiErrors(400, 502)
  @Post('agents/probe')
  @HttpCode(200)
  probe(@Body() body: ProbeAgentDto): Promise<ProbeResultDto> {
    return this.storageNodes.probe(body);
  }

  /** Replaces an agent's settings; token "" keeps the current token; another agent's base_url is a 409. */
  @ApiErrors(400, 404, 409, 'writes')
  @Put('agents/:agent_id')
  update(@Param('agent_id') id: string, @Body() body: UpdateAgentDto, @ClientIp() client: string): Promise<AgentDto> {
    return this.storageNodes.update(id, body, client);
  }

  /**
   * Removes an agent from config/agents.yml. Refused (409, naming them) while disks or CDs of
   * workers live on it, unless force=true; nothing on the agent itself is touched.
   */
  @ApiErrors(400, 404, 409, 'writes')
  @Delete('agents/:agent_id')
  remove(@Param('agent_id') id: string, @Query() q: DeleteAgentQueryDto, @ClientIp() client: string): Promise<AgentDeletedDto> {
    return this.storageNodes.remove(id, q.force ?? false, client);
  }

  /** Targets on that agent, as the agent reports them. */
  @ApiErrors(404, 503)
  @Get('agents/:agent_id/luns')
  luns(@Param('agent_id') id: string): Promise<LunTargetDto[]> {
    return this.storageNodes.luns(id);
  }

  /** Creates a disk target on that agent (no ledger write). */
  @ApiErrors(400, 404, 409, 503, 'writes')
  @Post('agents/:agent_id/luns/disk')
  createDisk(@Param('agent_id') id: string, @Body() body: CreateLunDiskDto, @ClientIp() client: string): Promise<CreatedLunDto> {
    return this.storageNodes.createDisk(id, body, client);
  }

  /** Creates a CD (ISO) target on that agent (no ledger write). */
  @ApiErrors(400, 404, 409, 503, 'writes')
  @Post('agents/:agent_id/luns/cd')
  createCd(@Param('agent_id') id: string, @Body() body: CreateCdDto, @ClientIp() client: string): Promise<CreatedLunDto> {
    return this.storageNodes.createCd(id, body, client);
  }

  /** Deletes a target on that agent (ignore_missing turns its 404 into success); the agent never deletes a master or a file another target uses (409). */
  @ApiErrors(400, 404, 409, 503, 'writes')
  @Delete('agents/:agent_id/luns')
  deleteLun(@Param('agent_id') id: string, @Query() q: PassthroughDeleteQueryDto, @ClientIp() client: string): Promise<PassthroughDeletedDto> {
    return this.storageNodes.deleteLun(id, q.iqn, q.delete_file ?? false, q.ignore_missing ?? false, client);
  }

  /** Asks that agent to rebuild missing targets from its image directory. */
  @ApiErrors(404, 503)
  @Post('agents/:agent_id/luns/scan')
  @HttpCode(200)
  scan(@Param('agent_id') id: string, @ClientIp() client: string): Promise<ScanResultDto> {
    return this.storageNodes.scan(id, client);
  }
}
