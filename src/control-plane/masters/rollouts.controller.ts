import { Body, Controller, Get, HttpCode, Param, Post } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ClientIp } from '../common/client-ip.decorator';
import { RolloutCanaryDto, RolloutDto, StartRolloutDto } from './dto/rollout.dto';
import { RolloutsService } from './rollouts.service';

@ApiTags('masters')
@Controller('masters/:name/rollout')
export class RolloutsController {
  constructor(private readonly rollouts: RolloutsService) {}

  /** The master's rollout: every disk of the master with the version it holds, its target and its worker's boot since. */
  @ApiErrors([400, 'name malformed'], [404, 'no rollout of this master'])
  @Get()
  get(@Param('name') name: string): RolloutDto {
    return this.rollouts.get(name);
  }

  /**
   * Starts a rollout of a version (replacing the master's rollout, if any): the canary workers'
   * disks first (`canary_workers` or `canary_percent`), or every disk at once. `reset` disks take
   * it at their worker's next boot; `persistent` ones when rebased.
   */
  @ApiErrors(
    [400, 'invalid input (the message names the field)'],
    [404, 'no enabled disk agent holds the version'],
    [409, 'no disk of the master; the version is missing or other bytes on an agent with disks of it; every disk is already to hold it'],
    502,
  )
  @HttpCode(200)
  @Post()
  start(@Param('name') name: string, @Body() body: StartRolloutDto, @ClientIp() client: string): Promise<RolloutDto> {
    return this.rollouts.start(name, body, client);
  }

  /** From the canary workers to every disk of the master. */
  @ApiErrors([400, 'name malformed'], [404, 'no rollout of this master'], [409, 'the rollout already covers every disk'])
  @HttpCode(200)
  @Post('promote')
  promote(@Param('name') name: string, @ClientIp() client: string): Promise<RolloutDto> {
    return this.rollouts.promote(name, client);
  }

  /** A rollout back to the version before the current one, with the same stages (a canary first if given). */
  @ApiErrors([400, 'invalid input'], [404, 'no rollout of this master'], [409, 'no version before the current rollout'], 502)
  @HttpCode(200)
  @Post('rollback')
  rollback(@Param('name') name: string, @Body() body: RolloutCanaryDto, @ClientIp() client: string): Promise<RolloutDto> {
    return this.rollouts.rollback(name, body, client);
  }
}
