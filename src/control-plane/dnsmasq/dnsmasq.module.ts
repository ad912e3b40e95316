import { Global, Module } from '@nestjs/common';
import { ProcessRunner } from '../../shared/process-runner';
import { DnsmasqService } from './dnsmasq.service';

@Global()
@Module({
  providers: [DnsmasqService, ProcessRunner],
  exports: [DnsmasqService, ProcessRunner],
})
export class DnsmasqModule {}
