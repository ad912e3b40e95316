// Stops the PostgreSQL cluster test/global-setup.js started for KURRENT_TEST_STORE=postgres, and
// says which tests the PostgreSQL or socket pass left to the file pass (describeFiles / itFiles), and why.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

module.exports = async () => {
  globalThis.__kurrentPg?.stop();
  const list = path.join(os.tmpdir(), `kurrent-file-only-${process.env.KURRENT_TEST_RUN ?? 'run'}.txt`);
  if (!fs.existsSync(list)) return;
  const names = [...new Set(fs.readFileSync(list, 'utf8').split('\n').filter(Boolean))];
  fs.rmSync(list, { force: true });
  process.stdout.write(
    `\nNot run in this pass, by design (${names.length}): they test the file store itself (YAML hand edits, ledger.wal, a full or read-only state directory, the write-every-commit mode) and run in the file pass:\n` +
      names.map((n) => `  - ${n}\n`).join(''),
  );
};
