import { BootsModule } from '../boots/boots.module';
import { BootModule } from '../boot/boot.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { DevicesModule } from '../devices/devices.module';
import { MastersModule } from '../masters/masters.module';
import { DisksService } from './disks.service';
import { WorkersController } from './workers.controller';
import { WorkersService } from './workers.service';

@Module({
  imports: [DevicesModule, StorageNodesModule, CredentialsModule, BootModule, BootsModule, MastersModule],
  controllers: [WorkersController],
  providers: [WorkersService, DisksService],
  exports: [WorkersService],
})
export class WorkersModule {}
