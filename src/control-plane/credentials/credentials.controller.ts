import { Body, Controller, Delete, Get, Param, Put } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { CredentialsService } from './credentials.service';
import { CredentialDto, SetCredentialDto } from './dto/credential.dto';

@ApiTags('credentials')
@Controller('workers/:worker_id/credential')
export class CredentialsController {
  constructor(private readonly credentials: CredentialsService) {}

  /** The worker's NVMe-oF credential: host NQN, key and PSK hash prefixes, push state per agent. Never the secret. */
  @ApiErrors(400, 404)
  @Get()
  get(@Param('worker_id') id: string): CredentialDto {
    return this.credentials.view(id);
  }

  /**
   * Rotates the secret in place (`generate: true`) or sets a given one (`dhchap_key`, DHHC-1 form
   * with CRC-32); issues one when the worker has none, and lifts a revocation. The TLS PSK derives
   * from the secret, so it rotates with it. Pushed to the worker's agents at once; what fails
   * stays pending for the reconciler. The answer never contains the secret.
   */
  @ApiErrors(400, 404, 'writes')
  @Put()
  set(@Param('worker_id') id: string, @Body() body: SetCredentialDto, @ClientIp() client: string): Promise<CredentialDto> {
    return this.credentials.set(id, body, client);
  }

  /** Revokes: /boot-vars stops handing out the PSK at once (the next boot is refused) and the host leaves the agents. */
  @ApiErrors(400, 404, 'writes')
  @Delete()
  revoke(@Param('worker_id') id: string, @ClientIp() client: string): Promise<CredentialDto> {
    return this.credentials.revoke(id, client);
  }
}
