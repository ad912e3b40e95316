import { CredentialsModule } from '../credentials/credentials.module';
import { Module } from '@nestjs/common';
import { AgentsModule } from '../agents/agents.module';
import { DevicesModule } from '../devices/devices.module';
import { DisksService } from './disks.service';
import { WorkersController } from './workers.controller';
import { WorkersService } from './workers.service';

@Module({
  imports: [DevicesModule, AgentsModule, CredentialsModule],
  controllers: [WorkersController],
  providers: [WorkersService, DisksService],
  exports: [WorkersService],
})
export class WorkersModule {}
