import { INestApplication } from '@nestjs/common';
import { ConfigError } from '../config/app-config';
import { LedgerFileError } from '../store/ledger-map';

/**
 * Shared entry point of both processes: validated config or exit 2 naming the variable, a
 * corrupt state file is exit 3 naming file and line, then listen.
 */
export async function runMain<C extends { port: number; host: string }>(
  name: string,
  load: () => C,
  create: (config: C) => Promise<INestApplication>,
): Promise<void> {
  let config: C;
  try {
    config = load();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${name}: configuration error: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  try {
    const app = await create(config);
    await app.listen(config.port, config.host);
  } catch (e) {
    if (e instanceof LedgerFileError) {
      process.stderr.write(`${name}: cannot start: corrupt state file ${e.message}\n`);
      process.exit(3);
    }
    throw e;
  }
}
