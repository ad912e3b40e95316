import { BootsModule } from '../boots/boots.module';
import { BootModule } from '../boot/boot.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { Module } from '@nestjs/common';
import { StorageNodesModule } from '../storage-nodes/storage-nodes.module';
import { DevicesModule } from '../devices/devices.module';
import { MastersModule } from '../masters/masters.module';
import { DisksService } from './disks.service';
import { MaintenanceController } from './maintenance.controller';
import { MaintenanceService } from './maintenance.service';
import { WorkersController } from './workers.controller';
import { WorkersService } from './workers.service';

@Module({
  imports: [DevicesModule, StorageNodesModule, CredentialsModule, BootModule, BootsModule, MastersModule],
  controllers: [WorkersController, MaintenanceController],
  providers: [WorkersService, DisksService, MaintenanceService],
  exports: [WorkersService],
})
export class WorkersModule {}
