import { Global, Module } from '@nestjs/common';
import { FileSystem } from './file-system';
import { LedgerStore } from './ledger.store';
import { NonceLedger } from './nonce-ledger';
import { Database } from './pg/database';

@Global()
@Module({
  providers: [FileSystem, Database, LedgerStore, NonceLedger],
  exports: [FileSystem, Database, LedgerStore, NonceLedger],
})
export class StoreModule {}
