import { Injectable } from '@nestjs/common';
import { FileSystem } from '../../../shared/files/file-system';
import { AuditedFile, AuditedFiles } from './audited-files';
import { AuditedFileWrite } from './audited-file-write';
import { FileAuditRepository } from './file-audit.repository';

/** The file store: each file's change and its entries are one commit (see AuditedFileWrite). */
@Injectable()
export class FileAuditedFiles extends AuditedFiles {
  constructor(
    private readonly fs: FileSystem,
    private readonly audit: FileAuditRepository,
  ) {
    super();
  }

  open(file: string, logFile: string, mode?: number): AuditedFile {
    return new AuditedFileWrite(file, logFile, this.fs, this.audit, mode);
  }
}
