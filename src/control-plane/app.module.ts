import { DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_PIPE } from '@nestjs/core';
import { LoggerModule } from 'nestjs-pino';
import { logDestination } from '../shared/http/log-destination';
import { StorageNodesModule } from './storage-nodes/storage-nodes.module';
import { MastersModule } from './masters/masters.module';
import { AuditModule } from './audit/audit.module';
import { BootModule } from './boot/boot.module';
import { BootsModule } from './boots/boots.module';
import { ChangesModule } from './changes/changes.module';
import { CredentialsModule } from './credentials/credentials.module';
import { ReconcilerModule } from './reconciler/reconciler.module';
import { AuthGuard, BEARER_TOKEN, PUBLIC_HANDLERS } from '../shared/http/auth.guard';
import { MetricsController } from './metrics/metrics.controller';
import { MetricsModule } from './metrics/metrics.module';
import { AllExceptionsFilter } from '../shared/http/exception.filter';
import { createValidationPipe } from '../shared/http/validation';
import { AppConfig } from './config/app-config';
import { ConfigModule } from './config/config.module';
import { DevicesModule } from './devices/devices.module';
import { DnsmasqModule } from './dnsmasq/dnsmasq.module';
import { HealthController } from './health/health.controller';
import { REDACT_PATHS } from '../shared/http/redaction';
import { SettingsModule } from './settings/settings.module';
import { RepositoriesModule } from './repositories/repositories.module';
import { WorkersModule } from './workers/workers.module';


@Module({})
export class AppModule {
  static forRoot(config: AppConfig): DynamicModule {
    return {
      module: AppModule,
      imports: [
        ConfigModule.forRoot(config),
        LoggerModule.forRoot({
          pinoHttp: [
            {
              level: config.logLevel,
              redact: { paths: REDACT_PATHS, censor: '[redacted]' },
            },
            logDestination(),
          ],
          // No per-request middleware: even an excluded route pays for the middleware layer on
          // every boot. Access logs come from one Fastify onResponse hook instead (app.factory).
          forRoutes: [],
        }),
        RepositoriesModule.forEngine(config.store),
        AuditModule,
        DnsmasqModule,
        SettingsModule,
        StorageNodesModule,
        MastersModule,
        DevicesModule,
        CredentialsModule,
        WorkersModule,
        BootModule,
        BootsModule,
        ChangesModule,
        ReconcilerModule,
        MetricsModule,
      ],
      controllers: [HealthController],
      providers: [
        { provide: BEARER_TOKEN, useValue: config.token },
        { provide: PUBLIC_HANDLERS, useValue: config.metricsPublic ? [MetricsController.prototype.scrape] : [] },
        { provide: APP_GUARD, useClass: AuthGuard },
        { provide: APP_FILTER, useClass: AllExceptionsFilter },
        { provide: APP_PIPE, useFactory: createValidationPipe },
      ],
    };
  }
}

export { REDACT_PATHS };
