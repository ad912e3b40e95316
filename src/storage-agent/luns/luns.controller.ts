import { Body, Controller, Delete, Get, HttpCode, Post, Put, Query } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { CreateCdDto, CreatedLunDto, CreateLunDiskDto, DeletedLunDto, DeleteLunQueryDto, InitiatorSessionsDto, ScanResultDto, LunTargetDto, ResetLunDto, ResetLunResultDto, SetLunAccessDto } from '../../shared/agent-contract/luns.dto';
import { LunsService } from './luns.service';

@ApiTags('luns')
@Controller()
export class LunsController {
  constructor(private readonly luns: LunsService) {}

  /** Every target with its backing file (tid on stgt, allowed_hosts on nvmet). */
  @ApiErrors()
  @Get('luns')
  list(): Promise<LunTargetDto[]> {
    return this.luns.list();
  }

  /**
   * Initiators logged in now, per target (stgt: tgtadm's I_T nexuses; lio: configfs sessions;
   * nvmet: debugfs controllers). The control plane reads it to see a worker's disk login (boot sessions).
   */
  @ApiErrors()
  @Get('sessions')
  sessions(): Promise<InitiatorSessionsDto> {
    return this.luns.sessions();
  }

  /** Disk target from a master (reflink clone, else sparse copy) or empty (sparse) of `size`. */
  @ApiErrors(
    [400, 'Invalid input (the message names the field), or a size the filesystem of DISK_DIR cannot hold. Nothing was created.'],
    [404, 'master not found'],
    [409, 'iqn exists / file exists'],
    [500, 'The target could not be created (tgtadm or configfs error); the image was removed again.'],
    [503, 'DISK_DIR is not writable. Nothing was created.'],
    [507, 'DISK_DIR is full, or too full for a copy of the master. Nothing was created.'],
  )
  @Post('luns/disk')
  createDisk(@Body() body: CreateLunDiskDto): Promise<CreatedLunDto> {
    return this.luns.createDisk(body);
  }

  /**
   * lio, stgt: sets the initiator ACLs of a disk target and the CHAP credential they require (the
   * control plane's way to follow a renamed worker, a rotated or a revoked credential, and to
   * close stgt disks made open by earlier versions). Sessions already logged in stay; the next
   * login meets the new rule.
   */
  @ApiErrors([400, 'invalid input (the message names the field), or a backend without ACLs'], [404, 'disk target not found'], [409, 'lio: the target was made open to any initiator'])
  @Put('luns/access')
  setAccess(@Body() body: SetLunAccessDto): Promise<LunTargetDto> {
    return this.luns.setAccess(body);
  }

  /**
   * Restores a disk to a master by reflink, in place: the same file (its target keeps serving
   * it), afterwards byte-identical to the master. Refused while any initiator holds a session
   * on the target (the disk is in use), where this backend cannot see sessions, and where
   * DISK_DIR cannot reflink (a full copy would take minutes on a boot's critical path).
   */
  @ApiErrors([400, 'invalid input (the message names the field), or the target is a CD'], [404, 'disk target or master not found'], [409, 'an initiator holds a session on the disk, sessions cannot be seen, or DISK_DIR cannot reflink; nothing changed'])
  @HttpCode(200)
  @Post('luns/reset')
  reset(@Body() body: ResetLunDto): Promise<ResetLunResultDto> {
    return this.luns.reset(body);
  }

  /** Read-only CD target of an ISO in DISK_DIR (backends with CD support only). */
  @ApiErrors([400, 'not an .iso file, or a master (_tpl_)'], [404, 'iso not found'], [409, 'iqn exists, or the file is the disk of a target'])
  @Post('luns/cd')
  createCd(@Body() body: CreateCdDto): Promise<CreatedLunDto> {
    return this.luns.createCd(body);
  }

  /** Deletes a target, and its backing file with delete_file=true (never a master, never a file another target uses). */
  @ApiErrors(400, [404, 'iqn not found'], [409, 'delete_file: the file is a master or used by another target; nothing was deleted'])
  @Delete('luns')
  remove(@Query() q: DeleteLunQueryDto): Promise<DeletedLunDto> {
    return this.luns.remove(q.iqn, q.delete_file ?? false);
  }

  /** Rebuilds missing targets from DISK_DIR (files are the truth). */
  @ApiErrors()
  @Post('luns/scan')
  @HttpCode(200)
  scan(): Promise<ScanResultDto> {
    return this.luns.scan();
  }
}
