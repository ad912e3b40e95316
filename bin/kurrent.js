#!/usr/bin/env node
// The `kurrent` CLI (src/cli/kurrent.ts). Runs the compiled build; builds it once if it is missing.
const fs = require('node:fs');
const path = require('node:path');
const root = path.join(__dirname, '..');
const main = path.join(root, 'dist/src/cli/kurrent.js');
if (!fs.existsSync(main)) {
  process.stderr.write('kurrent: building the project once (npx nest build)...\n');
  require('node:child_process').execFileSync(process.execPath, [require.resolve('@nestjs/cli/bin/nest.js'), 'build'], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
}
require(main).run(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
