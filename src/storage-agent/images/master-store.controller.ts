import { Body, Controller, Delete, Get, Param, Post, Put } from '@nestjs/common';
import { LunsService } from '../luns/luns.service';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { DeletedMasterVersionDto, MasterDto, MasterNoteDto, MasterVersionDto, PromoteVersionDto } from '../../shared/agent-contract/luns.dto';
import { MasterStoreService } from './master-store.service';

@ApiTags('masters')
@Controller('masters')
export class MasterStoreController {
  constructor(
    private readonly masters: MasterStoreService,
    private readonly luns: LunsService,
  ) {}

  /** Master images (`_tpl_` files) and their versions, from the background scan. */
  @ApiErrors()
  @Get()
  list(): MasterDto[] {
    return this.masters.list();
  }

  /** A disk of this agent (a maintenance disk) becomes the master's next version (origin promote), read-only and checksummed. */
  @ApiErrors(
    [400, 'name, iqn, version or note malformed'],
    [404, 'disk target not found'],
    [409, 'an initiator holds a session on the disk (or sessions cannot be seen), or the number is not above every version this agent has had'],
    [507, 'DISK_DIR cannot hold the copy (no reflink)'],
  )
  @Post(':name/versions')
  promote(@Param('name') name: string, @Body() body: PromoteVersionDto): Promise<MasterVersionDto> {
    return this.luns.promote(name, body);
  }

  /** Deletes a version's file; its number is never given again. */
  @ApiErrors(
    [400, 'name or version malformed'],
    [404, 'no such version'],
    [409, 'a disk of this agent was cloned from the version, or the `_tpl_` file in DISK_DIR is this version; nothing was deleted'],
  )
  @Delete(':name/versions/:version')
  deleteVersion(@Param('name') name: string, @Param('version') version: string): Promise<DeletedMasterVersionDto> {
    return this.masters.deleteVersion(name, version);
  }

  /** Sets the note of a version (its bytes never change). */
  @ApiErrors([400, 'name, version or note malformed'], [404, 'no such version'])
  @Put(':name/versions/:version/note')
  setNote(@Param('name') name: string, @Param('version') version: string, @Body() body: MasterNoteDto): Promise<MasterVersionDto> {
    return this.masters.setNote(name, version, body.note);
  }
}
