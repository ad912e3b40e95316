import { Body, Controller, Delete, Get, Header, HttpCode, Param, Post, Query, StreamableFile } from '@nestjs/common';
import { ApiOkResponse, ApiProduces, ApiQuery, ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { Public } from '../../shared/http/auth.guard';
import { ClientIp } from '../common/client-ip.decorator';
import { BatchBindDto, BatchBindResultDto, BatchPreviewDto, BindQueryDto } from './dto/bind.dto';
import { DeviceDto } from './dto/device.dto';
import { ImportDevicesDto, ImportResultDto } from './dto/import-devices.dto';
import { DevicePageDto, DevicePageQueryDto, ListDevicesQueryDto } from './dto/list-devices.dto';
import { RegisterDeviceDto } from './dto/register-device.dto';
import { ReportQuery } from './dto/report.dto';
import { DevicesService } from './devices.service';
import { OpenWindowDto, RegistrationWindowDto } from './dto/registration-window.dto';
import { SettingsService } from '../settings/settings.service';

@ApiTags('devices')
@Controller('devices')
export class DevicesController {
  constructor(
    private readonly devices: DevicesService,
    private readonly settings: SettingsService,
  ) {}

  /**
   * iPXE device report (no auth): updates fingerprint and last_seen; an unknown MAC enters the
   * pool when auto-register is on (on disk before the answer; bounded by IPXE_CP_POOL_LIMIT and a
   * per-source rate, IPXE_CP_REGISTER_RATE); revoked devices are ignored. Answers an empty body.
   */
  @ApiErrors('public', 400, 'writes')
  @Public()
  @Get('report')
  @Header('Content-Type', 'text/plain; charset=utf-8')
  @Header('Cache-Control', 'no-store')
  @ApiProduces('text/plain')
  @ApiOkResponse({ description: 'Empty body.', content: { 'text/plain': { schema: { type: 'string', example: '' } } } })
  @ApiQuery({ name: 'mac', required: true, type: String, description: 'MAC, `${mac}` or `${netX/mac}` hex form' })
  @ApiQuery({ name: 'uuid', required: false, type: String })
  @ApiQuery({ name: 'manufacturer', required: false, type: String })
  @ApiQuery({ name: 'product', required: false, type: String })
  @ApiQuery({ name: 'serial', required: false, type: String })
  @ApiQuery({ name: 'cpumodel', required: false, type: String })
  @ApiQuery({ name: 'mem-total', required: false, type: String, description: 'Decimal or 0x hex (MiB)' })
  @ApiQuery({ name: 'mem-type', required: false, type: String })
  @ApiQuery({ name: 'mem-speed', required: false, type: String, description: 'Decimal or 0x hex' })
  @ApiQuery({ name: 'chip', required: false, type: String })
  @ApiQuery({ name: 'busid', required: false, type: String })
  @ApiQuery({
    name: 'pubkey',
    required: false,
    type: String,
    description: 'Device P-256 public key: the 65-byte uncompressed SEC1 point 04||X||Y as 130 hex digits (`${x:hexraw}`). Taken only inside a registration window.',
  })
  report(@Query() q: ReportQuery, @ClientIp() client: string): Promise<string> {
    return this.devices.report(q, client);
  }

  /**
   * One page of the device pool, filtered and searched here (state, claimed key, free text over
   * MAC in any spelling, serial, product, manufacturer, bound worker), in MAC order, with the
   * pool's counts per state: what the web UI reads instead of the whole list.
   */
  @ApiErrors(400)
  @Get('page')
  page(@Query() q: DevicePageQueryDto): DevicePageDto {
    return this.devices.page(q);
  }

  /** Device pool, optionally filtered by state. */
  @ApiErrors(400)
  @ApiOkResponse({ type: DeviceDto, isArray: true })
  @Get()
  list(@Query() q: ListDevicesQueryDto): StreamableFile {
    return this.devices.list(q.state);
  }

  /** Manual registration into the pool (state=pooled, source=manual). 409 if it exists (revoked included). */
  @ApiErrors(400, 409, 413, 'writes')
  @Post()
  register(@Body() body: RegisterDeviceDto, @ClientIp() client: string): Promise<DeviceDto> {
    return this.devices.register(body, client);
  }

  /** Bulk pre-registration: each entry on its own; duplicates skipped, bad or revoked ones failed. */
  @ApiErrors(400, 413, 'writes')
  @Post('import')
  @HttpCode(200)
  import(@Body() body: ImportDevicesDto, @ClientIp() client: string): Promise<ImportResultDto> {
    return this.devices.import(body.entries, client);
  }

  /** Batch bind preview (read-only): matched / conflicts / not_found. */
  @ApiErrors(400, 413, 'writes')
  @Post('bind/batch/preview')
  @HttpCode(200)
  preview(@Body() body: BatchBindDto): BatchPreviewDto {
    return this.devices.batchPreview(body);
  }

  /** Batch bind execute: idempotent, item by item; succeeded / skipped / failed. */
  @ApiErrors(400, 413, 500, 'writes')
  @Post('bind/batch')
  @HttpCode(200)
  batch(@Body() body: BatchBindDto, @ClientIp() client: string): Promise<BatchBindResultDto> {
    return this.devices.batchBind(body, client);
  }

  /**
   * Opens the registration window (secure mode, seed 004): while it is open and under quota, a
   * report from an unknown MAC with a valid P-256 `pubkey` pools it, and a known device without a
   * key claims one. From the first window on, new devices enter the pool only this way. A window
   * already open is replaced. Survives restarts (state/settings.json); audited.
   */
  @ApiErrors(400, 'writes')
  @Post('registration-window')
  openWindow(@Body() body: OpenWindowDto, @ClientIp() client: string): Promise<RegistrationWindowDto> {
    return this.settings.openWindow(body.ttl_minutes, body.max_devices ?? null, client);
  }

  /** The registration window: open, times, quota, admitted, remaining. */
  @ApiErrors()
  @Get('registration-window')
  window(): RegistrationWindowDto {
    return this.settings.getWindow();
  }

  /** Closes the registration window now (no-op when none is open); audited. */
  @ApiErrors('writes')
  @Delete('registration-window')
  closeWindow(@ClientIp() client: string): Promise<RegistrationWindowDto> {
    return this.settings.closeWindow(client);
  }

  /** One device. */
  @ApiErrors(400, 404)
  @Get(':mac')
  get(@Param('mac') mac: string): DeviceDto {
    return this.devices.get(mac);
  }

  /** Revoke: pooled -> revoked (kept in the ledger; cannot be registered again until restored); the key is dropped. */
  @ApiErrors(400, 404, 409, 'writes')
  @Delete(':mac')
  revoke(@Param('mac') mac: string, @ClientIp() client: string): Promise<DeviceDto> {
    return this.devices.revoke(mac, client);
  }

  /** Undoes a revocation: revoked -> pooled, keyless (it claims a key again inside a registration window); audited. */
  @ApiErrors(400, 404, [409, 'The device is not revoked.'], 'writes')
  @Post(':mac/restore')
  @HttpCode(200)
  restore(@Param('mac') mac: string, @ClientIp() client: string): Promise<DeviceDto> {
    return this.devices.restore(mac, client);
  }

  /** Resets the device key: the device may claim a key again inside a registration window; audited. */
  @ApiErrors(400, 404, 409, 'writes')
  @Delete(':mac/key')
  resetKey(@Param('mac') mac: string, @ClientIp() client: string): Promise<DeviceDto> {
    return this.devices.resetKey(mac, client);
  }

  /** Bind to a worker (one-to-one). force=true swaps atomically; rebinding the same pair is a no-op. */
  @ApiErrors(400, 404, 409, 500, 'writes')
  @Post(':mac/bind')
  @HttpCode(200)
  bind(@Param('mac') mac: string, @Query() q: BindQueryDto, @ClientIp() client: string): Promise<DeviceDto> {
    return this.devices.bind(mac, q.worker_id, q.force ?? false, client);
  }

  /** Unbind: the device returns to the pool; the worker keeps its disks. */
  @ApiErrors(400, 404, 409, 500, 'writes')
  @Delete(':mac/bind')
  unbind(@Param('mac') mac: string, @ClientIp() client: string): Promise<DeviceDto> {
    return this.devices.unbind(mac, client);
  }
}
