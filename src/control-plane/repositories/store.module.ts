import { Global, Module } from '@nestjs/common';
import { FileSystem } from '../../shared/files/file-system';
import { LedgerStore } from './ledger.store';
import { NonceLedger } from './nonce-ledger';
import { StoreSync } from './store-sync';
import { Database } from './pg/database';

@Global()
@Module({
  providers: [FileSystem, Database, LedgerStore, NonceLedger, StoreSync],
  exports: [FileSystem, Database, LedgerStore, NonceLedger, StoreSync],
})
export class StoreModule {}
