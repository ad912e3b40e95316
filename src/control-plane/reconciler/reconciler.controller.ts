import { Controller, HttpCode, Post } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ReconcileResultDto } from '../credentials/dto/credential.dto';
import { ReconcilerService } from './reconciler.service';

@ApiTags('reconciler')
@Controller('reconcile')
export class ReconcilerController {
  constructor(private readonly reconciler: ReconcilerService) {}

  /**
   * Runs one reconciler pass now (or joins the running one) and returns what it did: credential
   * pushes retried, hosts pushed again to agents that lost them, removals of revoked credentials
   * and of deleted workers. Audited as credential.push / credential.remove / reconcile.pass.
   */
  @ApiErrors([409, 'Another control plane holds the reconciler lease (PostgreSQL store): ask that one.'])
  @Post()
  @HttpCode(200)
  run(): Promise<ReconcileResultDto> {
    return this.reconciler.pass();
  }
}
