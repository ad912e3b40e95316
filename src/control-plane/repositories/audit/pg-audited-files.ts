import { Injectable } from '@nestjs/common';
import type { TxAudit } from './audit.repository';
import { AuditedFile, AuditedFiles } from './audited-files';
import { PgAuditRepository } from './pg-audit.repository';

/**
 * PostgreSQL: the file is this node's and the trail a table, so there is no one commit for both;
 * the entries are inserted right after the file is written (a kill in between loses them).
 */
@Injectable()
export class PgAuditedFiles extends AuditedFiles {
  constructor(private readonly audit: PgAuditRepository) {
    super();
  }

  open(): AuditedFile {
    return {
      load: () => undefined,
      write: async (_text: string, audits: TxAudit[], replace: () => Promise<void>) => {
        await replace();
        await Promise.all(audits.map((a) => this.audit.record(a.op, a.fields)));
      },
    };
  }
}
