import { Global, Module } from '@nestjs/common';
import { ProcessRunner } from '../../shared/process-runner';
import { Serving } from '../common/serving';
import { DnsmasqService } from './dnsmasq.service';

@Global()
@Module({
  providers: [DnsmasqService, ProcessRunner, Serving],
  exports: [DnsmasqService, ProcessRunner],
})
export class DnsmasqModule {}
