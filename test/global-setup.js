// The e2e and boot tests start real storage-agent processes from dist/, the UI tests load the
// built web UI (web/dist): build both once per run.
const { execFileSync } = require('node:child_process');
const path = require('node:path');

module.exports = async () => {
  execFileSync(process.execPath, [require.resolve('@nestjs/cli/bin/nest.js'), 'build'], {
    cwd: path.join(__dirname, '..'),
    stdio: 'inherit',
  });
  execFileSync(process.execPath, [path.join(__dirname, '../node_modules/vite/bin/vite.js'), 'build', '--config', 'web/vite.config.mts', '--logLevel', 'warn'], {
    cwd: path.join(__dirname, '..'),
    stdio: 'inherit',
  });
  // KURRENT_TEST_STORE=postgres: one cluster for the run (test/helpers/app.ts makes a database per app).
  // The PostgreSQL pass writes the file-store-only tests it leaves out here; teardown prints them.
  process.env.KURRENT_TEST_RUN = String(process.pid);
  require('node:fs').rmSync(require('node:path').join(require('node:os').tmpdir(), `kurrent-file-only-${process.pid}.txt`), { force: true });
  if (process.env.KURRENT_TEST_STORE === 'postgres') {
    const { startPostgres } = require('../dist/scripts/pg-cluster.js');
    const pg = await startPostgres();
    process.env.KURRENT_TEST_PG_URL = pg.url;
    globalThis.__kurrentPg = pg;
  }
};
