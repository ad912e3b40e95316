import { INestApplication } from '@nestjs/common';
import { ConfigError } from '../config-error';
import { LedgerFileError } from '../files/ledger-map';
import { StateInUseError } from '../files/storage-error';
import { tolerateStdioErrors } from './log-destination';

/**
 * Shared entry point of both processes: validated config or exit 2 naming the variable, a
 * corrupt state file is exit 3 naming file and line, a port or state directory in use exit 4
 * naming it (a message, never a stack), a start that stalls exit 5, then listen.
 */
export async function runMain<C extends { port: number; host: string; tls?: unknown; token?: string }>(
  name: string,
  load: () => C,
  create: (config: C) => Promise<INestApplication>,
  tokenVar = 'IPXE_CP_TOKEN',
  hostVar = 'IPXE_CP_HOST',
  portVar = 'IPXE_CP_PORT',
): Promise<void> {
  tolerateStdioErrors();
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
  // A start that waits on something nothing will ever settle (a promise no timer or socket backs)
  // lets the event loop empty, and Node would exit 0 without a word: systemd's Restart=on-failure
  // does not restart a clean exit, so the service would stay down. Fail loudly instead.
  const stalled = () => {
    process.stderr.write(`${name}: cannot start: start-up waited on something that never completes, and nothing is listening (exit 5)\n`);
    process.exit(5);
  };
  process.once('beforeExit', stalled);
  try {
    const app = await create(config);
    await app.listen(config.port, config.host);
    process.removeListener('beforeExit', stalled);
    // What a newcomer needs first: where it listens, where the docs are, whether a token is needed.
    const host = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
    const base = `${config.tls ? 'https' : 'http'}://${host}:${config.port}`;
    process.stdout.write(
      `${name} listening on ${base} (bound to ${config.host}:${config.port})\n` +
        `${'webDir' in config ? `  Web UI:     ${base}/ui/${config.webDir ? '' : ' (not built: npm run build:web)'}\n` : ''}` +
        `  Swagger UI: ${base}/docs\n  OpenAPI:    ${base}/openapi.json\n` +
        `  auth:       ${config.token ? `bearer token required (${tokenVar} is set)` : `OFF: no ${tokenVar}, every route is open`}\n` +
        (!config.token && config.host === '127.0.0.1' ? `  network:    loopback only (no token); set ${tokenVar}, or ${hostVar}=0.0.0.0 to serve other machines without one\n` : ''),
    );
  } catch (e) {
    if (e instanceof LedgerFileError) {
      process.stderr.write(`${name}: cannot start: corrupt state file ${e.message}\n`);
      process.exit(3);
    }
    if (e instanceof StateInUseError) {
      process.stderr.write(`${name}: cannot start: ${e.message}\n`);
      process.exit(4);
    }
    const code = (e as NodeJS.ErrnoException | null)?.code;
    if (code === 'EADDRINUSE' || code === 'EADDRNOTAVAIL' || code === 'EACCES') {
      const why = code === 'EADDRINUSE' ? 'is already in use by another process' : code === 'EACCES' ? 'may not be bound by this user' : 'is not an address of this machine';
      process.stderr.write(`${name}: cannot start: ${config.host}:${config.port} ${why} (${code}); choose another with ${portVar} / ${hostVar}\n`);
      process.exit(4);
    }
    throw e;
  }
}
