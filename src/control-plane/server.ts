import 'reflect-metadata';
import { createApp } from './app.factory';
import { runMain } from '../shared/http/bootstrap';
import { loadConfig } from './config/app-config';

/** Starts the control plane: the entry of both `dist/src/control-plane/main.js` and the bundle (`src/start.ts`). */
export function start(): Promise<void> {
  return runMain('kurrent', () => loadConfig(process.env), (c) => createApp(c));
}
