// Preloaded into a production control plane by the crash test (`node --require` this file):
// KURRENT_TEST_FAULT=`<point>@<n>[,...]` SIGKILLs the process the n-th time the store passes
// `point` (FileSystem's fault-injection seam), so kills land between the files of one commit.
// Nothing of this is in the production modules.
const path = require('node:path');
const { FileSystem } = require(path.join(__dirname, '../../dist/src/shared/files/file-system'));

const spec = (process.env.KURRENT_TEST_FAULT || '').trim();
if (spec) {
  const want = new Map();
  for (const part of spec.split(',')) {
    const m = /^(.+)@(\d+)$/.exec(part.trim());
    if (m) want.set(m[1], Number(m[2]));
  }
  const seen = new Map();
  FileSystem.testFaultHook = (point) => {
    if (!want.has(point)) return;
    const n = (seen.get(point) || 0) + 1;
    seen.set(point, n);
    if (n === want.get(point)) process.kill(process.pid, 'SIGKILL');
  };
}
