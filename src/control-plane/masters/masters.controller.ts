import { Body, Controller, Delete, Get, Param, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { MasterNoteDto, MasterVersionDto } from '../../shared/agent-contract/luns.dto';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { DeletedMasterVersionOutDto, MastersDto } from './dto/masters.dto';
import { MastersService } from './masters.service';

@ApiTags('masters')
@Controller('masters')
export class MastersController {
  constructor(private readonly masters: MastersService) {}

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
}
