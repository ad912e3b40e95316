import { Global, Module } from '@nestjs/common';
import { FileSystem } from './file-system';
import { LedgerStore } from './ledger.store';

@Global()
@Module({
  providers: [FileSystem, LedgerStore],
  exports: [FileSystem, LedgerStore],
})
export class StoreModule {}
