import { DynamicModule, Global, Module } from '@nestjs/common';
import { Clock } from '../common/clock';
import { AppConfig } from './app-config';

/** Provides the AppConfig validated once in main.ts (or built by a test). */
@Global()
@Module({})
export class ConfigModule {
  static forRoot(config: AppConfig): DynamicModule {
    return {
      module: ConfigModule,
      providers: [{ provide: AppConfig, useValue: config }, Clock],
      exports: [AppConfig, Clock],
    };
  }
}
