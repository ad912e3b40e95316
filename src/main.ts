import 'reflect-metadata';
import { createApp } from './app.factory';
import { runMain } from './common/bootstrap';
import { loadConfig } from './config/app-config';

void runMain('kurrent', () => loadConfig(process.env), (c) => createApp(c));
