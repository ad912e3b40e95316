// The e2e and boot tests start real storage-agent processes from dist/: build once per run.
const { execFileSync } = require('node:child_process');
const path = require('node:path');

module.exports = async () => {
  execFileSync(process.execPath, [require.resolve('@nestjs/cli/bin/nest.js'), 'build'], {
    cwd: path.join(__dirname, '..'),
    stdio: 'inherit',
  });
};
