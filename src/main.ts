import 'reflect-metadata';
import { createApp } from './app.factory';
import { ConfigError, loadConfig } from './config/app-config';
import { LedgerFileError } from './store/ledger-map';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kurrent: configuration error: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  try {
    const app = await createApp(config);
    await app.listen(config.port, config.host);
  } catch (e) {
    if (e instanceof LedgerFileError) {
      process.stderr.write(`kurrent: cannot start: corrupt state file ${e.message}\n`);
      process.exit(3);
    }
    throw e;
  }
}

void main();
