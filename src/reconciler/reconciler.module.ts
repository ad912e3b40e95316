import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { AgentsModule } from '../agents/agents.module';
import { CredentialsModule } from '../credentials/credentials.module';
import { ReconcilerController } from './reconciler.controller';
import { ReconcilerService } from './reconciler.service';

@Module({
  imports: [ScheduleModule.forRoot(), AgentsModule, CredentialsModule],
  controllers: [ReconcilerController],
  providers: [ReconcilerService],
  exports: [ReconcilerService],
})
export class ReconcilerModule {}
