import { Body, Controller, Delete, Get, HttpCode, Param, Post } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { MaintenanceDto, PromoteMaintenanceDto, PromotedMaintenanceDto, StartMaintenanceDto } from './dto/maintenance.dto';
import { MaintenanceService } from './maintenance.service';

@ApiTags('masters')
@Controller('masters/:name/maintenance')
export class MaintenanceController {
  constructor(private readonly maintenance: MaintenanceService) {}

  /** The master's maintenance writer: its worker and disk. */
  @ApiErrors([400, 'name malformed'], [404, 'the master is not in maintenance'])
  @Get()
  get(@Param('name') name: string): MaintenanceDto {
    return this.maintenance.get(name);
  }

  /**
   * One worker boots a writable clone of the master's latest version (a persistent disk of the
   * given os). Refused while another worker has the master in maintenance.
   */
  @ApiErrors([400, 'invalid input (the message names the field)'], [404, 'worker or master not found'], [409, 'another worker has the master in maintenance, or the worker already has a disk of this os'], 503, 'writes')
  @Post()
  start(@Param('name') name: string, @Body() body: StartMaintenanceDto, @ClientIp() client: string): Promise<MaintenanceDto> {
    return this.maintenance.start(name, body, client);
  }

  /** The maintenance disk becomes the master's next version; then it is deleted. Refused while its worker is logged in to it. */
  @ApiErrors([400, 'invalid input'], [404, 'the master is not in maintenance'], [409, 'the maintenance worker still holds a session on the disk'], 502, [507, 'the agent cannot hold the copy'])
  @HttpCode(200)
  @Post('promote')
  promote(@Param('name') name: string, @Body() body: PromoteMaintenanceDto, @ClientIp() client: string): Promise<PromotedMaintenanceDto> {
    return this.maintenance.promote(name, body, client);
  }

  /** Throws the maintenance disk away; the master is unchanged. */
  @ApiErrors([400, 'name malformed'], [404, 'the master is not in maintenance'], 503)
  @Delete()
  discard(@Param('name') name: string, @ClientIp() client: string): Promise<MaintenanceDto> {
    return this.maintenance.discard(name, client);
  }
}
