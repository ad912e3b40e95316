import { Body, Controller, Delete, Get, Param, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { DeletedNvmeHostDto, NvmeHostDto, PutNvmeHostDto } from '../../shared/agent-contract/nvme-host.dto';
import { NvmeHostsService } from './nvme-hosts.service';

@ApiTags('nvme')
@Controller('nvme/hosts')
export class NvmeHostsController {
  constructor(private readonly hosts: NvmeHostsService) {}

  /** Known hosts, with key hash prefixes only. */
  @ApiErrors()
  @Get()
  list(): Promise<NvmeHostDto[]> {
    return this.hosts.list();
  }

  /** Sets (or rotates) a host's DH-HMAC-CHAP credentials and TLS PSK, and with `subsystems` the subsystems that allow it (nvmet only). */
  @ApiErrors(400, 404)
  @Put(':hostnqn')
  put(@Param('hostnqn') hostnqn: string, @Body() body: PutNvmeHostDto): Promise<NvmeHostDto> {
    return this.hosts.put(hostnqn, body);
  }

  /** Removes a host and its allowed_hosts links. */
  @ApiErrors(400, 404)
  @Delete(':hostnqn')
  remove(@Param('hostnqn') hostnqn: string): Promise<DeletedNvmeHostDto> {
    return this.hosts.remove(hostnqn);
  }
}
