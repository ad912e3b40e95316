import { Controller, Get, Query } from '@nestjs/common';
import { ApiBearerAuth, ApiTags } from '@nestjs/swagger';
import { AuditService } from './audit.service';
import { OperationsPageDto, OperationsQueryDto } from './dto/operations.dto';

@ApiTags('operations')
@ApiBearerAuth()
@Controller('operations')
export class AuditController {
  constructor(private readonly audit: AuditService) {}

  /** Reads the audit trail incrementally (id > since), optionally for one device. */
  @Get()
  list(@Query() q: OperationsQueryDto): Promise<OperationsPageDto> {
    return this.audit.query(q);
  }
}
