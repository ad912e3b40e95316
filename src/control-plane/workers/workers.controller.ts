import { Body, Controller, Delete, Get, HttpCode, Param, Post, Put, Query, StreamableFile } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { BatchCreateWorkersDto, BatchCreateWorkersResultDto } from './dto/batch-workers.dto';
import { CreateWorkerDto } from './dto/create-worker.dto';
import {
  DefaultDiskDto,
  DefaultOsDto,
  DeleteWorkerQueryDto,
  DeleteWorkersBatchDto,
  DeleteWorkersBatchResultDto,
  SetMacDto,
} from './dto/update-worker.dto';
import { DeleteWorkerResultDto, WorkerDto, WorkerMacDto, WorkerStatusDto } from './dto/worker.dto';
import { DisksService } from './disks.service';
import { BatchDiskDto, BatchDiskResultDto, CreateDiskDto, DeleteDiskQueryDto, DiskModeDto, RebaseDiskDto } from './dto/disk.dto';
import { WorkersService } from './workers.service';

@ApiTags('workers')
@Controller('workers')
export class WorkersController {
  constructor(
    private readonly workers: WorkersService,
    private readonly disks: DisksService,
  ) {}

  /** Registers a worker identity (no disk); binds `mac` when given (the device must be pooled; 404 when it is not registered). */
  @ApiErrors(400, 404, 409, 413, 500, 'writes')
  @Post()
  create(@Body() body: CreateWorkerDto, @ClientIp() client: string): Promise<WorkerDto> {
    return this.workers.create(body, client);
  }

  /** Creates count workers named prefix + zero-padded index; idempotent, item by item. */
  @ApiErrors(400, 413, 422, 500, 'writes')
  @Post('batch')
  @HttpCode(200)
  createBatch(@Body() body: BatchCreateWorkersDto, @ClientIp() client: string): Promise<BatchCreateWorkersResultDto> {
    return this.workers.createBatch(body, client);
  }

  /** System disks for many workers with one spec; dry_run returns the plan. Succeeded ones get default_os. */
  @ApiErrors(400, 413, 'writes')
  @Post('luns/disk/batch')
  @HttpCode(200)
  createDisks(@Body() body: BatchDiskDto, @ClientIp() client: string): Promise<BatchDiskResultDto> {
    return this.disks.batch(body, client);
  }

  /** Creates a system disk (clone of a master or empty) on an agent and records it. */
  @ApiErrors(400, 404, 409, 500, 502, 503, 'writes')
  @Post(':worker_id/luns/disk')
  createDisk(@Param('worker_id') id: string, @Body() body: CreateDiskDto, @ClientIp() client: string): Promise<WorkerDto> {
    return this.workers.createDisk(id, body, client);
  }

  /**
   * A disk's mode by its os_tag: persistent (keeps what the worker writes) or reset (restored to
   * its master by reflink at the start of every boot of its worker, before /boot-vars answers;
   * never while an initiator holds a session on it). Audited `worker.disk.mode`.
   */
  @ApiErrors([400, 'invalid mode, or reset for a disk not cloned from a master'], [404, 'worker or disk not found'], [409, "reset on an agent whose DISK_DIR cannot reflink"], 'writes')
  @Put(':worker_id/luns/disk/:os_tag/mode')
  setDiskMode(@Param('worker_id') id: string, @Param('os_tag') osTag: string, @Body() body: DiskModeDto, @ClientIp() client: string): Promise<WorkerDto> {
    return this.workers.setDiskMode(id, osTag, body.mode, client);
  }

  /**
   * Rebases a disk onto a master version (its rollout's target by default): everything on the
   * disk is replaced, so `discard_data: true` is required. How a persistent disk follows a
   * rollout. Refused while an initiator holds a session on the disk. Audited `worker.disk.rebase`.
   */
  @ApiErrors([400, 'discard_data not true, a bad version, or a disk made empty'], [404, 'worker, disk or version not found'], [409, 'an initiator holds a session on the disk, or DISK_DIR cannot reflink'], 502, 'writes')
  @HttpCode(200)
  @Post(':worker_id/luns/disk/:os_tag/rebase')
  rebaseDisk(@Param('worker_id') id: string, @Param('os_tag') osTag: string, @Body() body: RebaseDiskDto, @ClientIp() client: string): Promise<WorkerDto> {
    return this.workers.rebaseDisk(id, osTag, body.version, client);
  }

  /** Deletes one system disk (target, and the .img with delete_file=true); clears default_os if it was this os. */
  @ApiErrors(400, 404, 503, 'writes')
  @Delete(':worker_id/luns/disk/:os')
  deleteDisk(
    @Param('worker_id') id: string,
    @Param('os') os: string,
    @Query() q: DeleteDiskQueryDto,
    @ClientIp() client: string,
  ): Promise<WorkerDto> {
    return this.workers.deleteDisk(id, os, q, client);
  }

  /** Deletes several workers item by item (device unbind cascade), one dnsmasq reload. */
  @ApiErrors(400, 413, 500, 'writes')
  @Post('delete/batch')
  @HttpCode(200)
  removeBatch(@Body() body: DeleteWorkersBatchDto, @ClientIp() client: string): Promise<DeleteWorkersBatchResultDto> {
    return this.workers.removeBatch(body, client);
  }

  /** All workers, with the bound device projected as mac / bound_device. */
  @ApiErrors()
  @ApiOkResponse({ type: WorkerDto, isArray: true })
  @Get()
  list(): StreamableFile {
    return this.workers.list();
  }

  /** One worker. */
  @ApiErrors(400, 404)
  @Get(':worker_id')
  get(@Param('worker_id') id: string): WorkerDto {
    return this.workers.get(id);
  }

  /** The ledger entry plus what dnsmasq and the agents actually have. */
  @ApiErrors(400, 404)
  @Get(':worker_id/status')
  status(@Param('worker_id') id: string): Promise<WorkerStatusDto> {
    return this.workers.status(id);
  }

  /** Rebinds the worker to another pooled device; the old one returns to the pool. */
  @ApiErrors(400, 404, 409, 500, 'writes')
  @Put(':worker_id/mac')
  setMac(@Param('worker_id') id: string, @Body() body: SetMacDto, @ClientIp() client: string): Promise<WorkerMacDto> {
    return this.workers.setMac(id, body.mac, client);
  }

  /** Default boot: os (a disk of the worker), menu_default, menu_timeout; null clears. */
  @ApiErrors(400, 404, 409, 'writes')
  @Put(':worker_id/default-os')
  setDefaultOs(@Param('worker_id') id: string, @Body() body: DefaultOsDto, @ClientIp() client: string): Promise<WorkerDto> {
    return this.workers.setDefaultOs(id, body, client);
  }

  /** Default boot disk by os_tag (seed 004); sets default_os to that disk's os. null clears. */
  @ApiErrors(400, 404, 'writes')
  @Put(':worker_id/default-disk')
  setDefaultDisk(@Param('worker_id') id: string, @Body() body: DefaultDiskDto, @ClientIp() client: string): Promise<WorkerDto> {
    return this.workers.setDefaultDisk(id, body.os_tag, client);
  }

  /** Deletes the worker; its device returns to the pool, its dhcp-hosts line and NVMe credential go. */
  @ApiErrors(400, 404, 500, 'writes')
  @Delete(':worker_id')
  remove(
    @Param('worker_id') id: string,
    @Query() q: DeleteWorkerQueryDto,
    @ClientIp() client: string,
  ): Promise<DeleteWorkerResultDto> {
    return this.workers.remove(id, q.delete_disk ?? false, q.ignore_missing_target ?? false, client);
  }
}
