import { Global, Module } from '@nestjs/common';
import { FileSystem } from './file-system';
import { LedgerStore } from './ledger.store';
import { Database } from './pg/database';

@Global()
@Module({
  providers: [FileSystem, Database, LedgerStore],
  exports: [FileSystem, Database, LedgerStore],
})
export class StoreModule {}
