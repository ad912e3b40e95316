import { Body, Controller, Delete, Get, Param, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { DeletedMasterVersionDto, MasterDto, MasterNoteDto, MasterVersionDto } from '../../shared/agent-contract/luns.dto';
import { MasterStoreService } from './master-store.service';

@ApiTags('masters')
@Controller('masters')
export class MasterStoreController {
  constructor(private readonly masters: MasterStoreService) {}

  /** Master images (`_tpl_` files) and their versions, from the background scan. */
  @ApiErrors()
  @Get()
  list(): MasterDto[] {
    return this.masters.list();
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
