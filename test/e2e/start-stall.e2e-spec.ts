import { spawnSync } from 'node:child_process';
import * as path from 'node:path';

const BOOTSTRAP = path.join(__dirname, '../../dist/src/shared/http/bootstrap.js');

/** runMain in a process of its own, with `create` as given (JavaScript source of an async function of the config). */
function run(create: string) {
  const script = `require(${JSON.stringify(BOOTSTRAP)}).runMain('kurrent', () => ({ port: 0, host: '127.0.0.1' }), ${create});`;
  return spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 });
}

describe('a start that stalls', () => {
  it('waiting on a promise nothing settles: a message and exit 5, never a silent exit 0', () => {
    const r = run('() => new Promise(() => {})');
    expect(r.status).toBe(5);
    expect(r.stderr).toBe('kurrent: cannot start: start-up waited on something that never completes, and nothing is listening (exit 5)\n');
  });

  it('a start that listens and later closes by itself exits 0 (the check ends with the start)', () => {
    const r = run(`async () => {
      const server = require('node:http').createServer();
      return {
        listen: (port, host) => new Promise((ok) => server.listen(port, host, () => { setImmediate(() => server.close()); ok(); })),
      };
    }`);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('kurrent listening on http://127.0.0.1:0');
  });
});
