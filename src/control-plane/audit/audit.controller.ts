import { Controller, Get, Query } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { AuditService } from './audit.service';
import { OperationsPageDto, OperationsQueryDto } from './dto/operations.dto';

@ApiTags('operations')
@Controller('operations')
export class AuditController {
  constructor(private readonly audit: AuditService) {}

  /** Reads the audit trail incrementally (id > since), optionally for one device. */
  @ApiErrors(400)
  @Get()
  list(@Query() q: OperationsQueryDto): Promise<OperationsPageDto> {
    return this.audit.query(q);
  }
}
