import 'reflect-metadata';
import { ConfigError } from '../config/app-config';
import { LedgerFileError } from '../store/ledger-map';
import { loadAgentConfig } from './agent-config';
import { createAgentApp } from './agent.factory';

async function main(): Promise<void> {
  let config;
  try {
    config = loadAgentConfig(process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kurrent-agent: configuration error: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  try {
    const app = await createAgentApp(config);
    await app.listen(config.port, config.host);
  } catch (e) {
    if (e instanceof LedgerFileError) {
      process.stderr.write(`kurrent-agent: cannot start: corrupt state file ${e.message}\n`);
      process.exit(3);
    }
    throw e;
  }
}

void main();
