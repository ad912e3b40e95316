import { Global, Module } from '@nestjs/common';
import { AuditController } from './audit.controller';
import { AuditCursors } from './audit-cursors';
import { AuditRetentionService } from './audit-retention.service';
import { AuditService } from './audit.service';

@Global()
@Module({
  controllers: [AuditController],
  providers: [AuditService, AuditCursors, AuditRetentionService],
  exports: [AuditService],
})
export class AuditModule {}
