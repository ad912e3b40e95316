import { Body, Controller, Delete, Get, HttpCode, Param, Post, Put, Query, StreamableFile } from '@nestjs/common';
import { LunsService } from '../luns/luns.service';
import { ApiOkResponse, ApiProduces, ApiTags } from '@nestjs/swagger';
import { ContentRangeQueryDto, MasterExtentsDto, MasterTransferDto, StartTransferDto } from '../../shared/agent-contract/transfers.dto';
import { MasterTransferService } from './master-transfer.service';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { TransferReadable } from '../../shared/http/auth.guard';
import { DeletedMasterVersionDto, MasterDto, MasterNoteDto, MasterVersionDto, PromoteVersionDto } from '../../shared/agent-contract/luns.dto';
import { MasterStoreService } from './master-store.service';

@ApiTags('masters')
@Controller('masters')
export class MasterStoreController {
  constructor(
    private readonly masters: MasterStoreService,
    private readonly luns: LunsService,
    private readonly transfers: MasterTransferService,
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

  /** Versions being pulled from other agents here, and the last outcomes (interrupted ones since a restart too). */
  @ApiErrors()
  @Get('transfers')
  listTransfers(): MasterTransferDto[] {
    return this.transfers.list();
  }

  /**
   * Pulls a version from another agent (only its data ranges, checkpointed, checksummed before it
   * becomes a version). Idempotent: a transfer under way is answered as it is, an interrupted one
   * resumes, a version already here with the same checksum is `done`.
   */
  @ApiErrors(
    [400, 'name, version or source_url malformed'],
    [404, 'the sender has no such version'],
    [409, 'this agent has (or had) other bytes under that version number'],
    [502, 'the sender could not be asked'],
    [507, 'DISK_DIR cannot hold the data'],
  )
  @HttpCode(202)
  @Post(':name/transfers')
  startTransfer(@Param('name') name: string, @Body() body: StartTransferDto): Promise<MasterTransferDto> {
    return this.transfers.start(name, body);
  }

  /** The sending side of a transfer: a version's data ranges (holes left out) and checksum. With the token, or a transfer ticket for this version. */
  @ApiErrors([400, 'name or version malformed'], [404, 'no such version'])
  @TransferReadable()
  @Get(':name/versions/:version/extents')
  extents(@Param('name') name: string, @Param('version') version: string): Promise<MasterExtentsDto> {
    return this.masters.extentsOf(name, version);
  }

  /** The sending side of a transfer: bytes of a version (holes read as zeros). With the token, or a transfer ticket for this version. */
  @ApiErrors([400, 'name, version, offset or length malformed, or past the end'], [404, 'no such version'])
  @ApiProduces('application/octet-stream')
  @ApiOkResponse({ description: 'The bytes asked for, exactly `length` of them.', schema: { type: 'string', format: 'binary' } })
  @TransferReadable()
  @Get(':name/versions/:version/content')
  async content(@Param('name') name: string, @Param('version') version: string, @Query() q: ContentRangeQueryDto): Promise<StreamableFile> {
    return new StreamableFile(await this.masters.contentOf(name, version, q.offset, q.length), { type: 'application/octet-stream', length: q.length });
  }
}
