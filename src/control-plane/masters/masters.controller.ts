import { Body, Controller, Delete, Get, HttpCode, Param, Post, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { MasterNoteDto, MasterVersionDto } from '../../shared/agent-contract/luns.dto';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { DeletedMasterVersionOutDto, MastersDto, VersionDistributionDto } from './dto/masters.dto';
import { DistributionService } from './distribution.service';
import { MastersService } from './masters.service';

@ApiTags('masters')
@Controller('masters')
export class MastersController {
  constructor(
    private readonly masters: MastersService,
    private readonly distributions: DistributionService,
  ) {}

  /** Master images of every enabled disk-role agent, with their versions; `catalog` gathers each master's versions over the agents. */
  @ApiErrors(502)
  @Get()
  list(@ClientIp() client: string): Promise<MastersDto> {
    return this.masters.list(client);
  }

  /** Deletes a version on every agent holding it; refused while any disk holds it. Its number is never given again. */
  @ApiErrors([400, 'name or version malformed'], [404, 'no enabled disk agent holds the version'], [409, 'a disk holds the version, or an agent refused (the message says where it was deleted and where not)'], 502)
  @Delete(':name/versions/:version')
  deleteVersion(@Param('name') name: string, @Param('version') version: string, @ClientIp() client: string): Promise<DeletedMasterVersionOutDto> {
    return this.masters.deleteVersion(name, version, client);
  }

  /** Sets a version's note on every agent holding it. */
  @ApiErrors([400, 'name, version or note malformed'], [404, 'no enabled disk agent holds the version'], 502)
  @Put(':name/versions/:version/note')
  setNote(@Param('name') name: string, @Param('version') version: string, @Body() body: MasterNoteDto, @ClientIp() client: string): Promise<MasterVersionDto> {
    return this.masters.setNote(name, version, body.note, client);
  }

  /** Where a version is: per agent holding the master, present, its transfer's progress, or missing. */
  @ApiErrors([400, 'name or version malformed'], [404, 'no enabled disk agent holds the version'])
  @Get(':name/versions/:version/distribution')
  distribution(@Param('name') name: string, @Param('version') version: string): Promise<VersionDistributionDto> {
    return this.distributions.distribution(name, version);
  }

  /**
   * Copies a version to every agent that holds its master without it, agent to agent (data ranges
   * only, resumable, checksummed before it becomes a version there). Asking again resumes
   * interrupted transfers and retries failed ones. Progress: GET .../distribution.
   */
  @ApiErrors([400, 'name or version malformed'], [404, 'no enabled disk agent holds the version'])
  @HttpCode(202)
  @Post(':name/versions/:version/distribute')
  distribute(@Param('name') name: string, @Param('version') version: string, @ClientIp() client: string): Promise<VersionDistributionDto> {
    return this.distributions.distribute(name, version, client);
  }
}
