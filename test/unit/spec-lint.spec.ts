import { execFileSync } from 'node:child_process';
import * as path from 'node:path';

/**
 * Both committed documents lint clean under Redocly's recommended rules and Spectral's OpenAPI
 * rules, with the rulesets in the repository (redocly.yaml, .spectral.yaml): what a third party
 * runs before generating a client. Telemetry and update checks off: nothing leaves the machine.
 */
const root = path.join(__dirname, '../..');
const docs = ['openapi/control-plane.openapi.json', 'openapi/agent.openapi.json'];
const run = (bin: string, args: string[]) =>
  execFileSync(path.join(root, 'node_modules/.bin', bin), args, {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });

describe('the OpenAPI documents lint clean', () => {
  it('redocly lint (recommended, redocly.yaml): no error, no warning', () => {
    const out = run('redocly', ['lint', '--format=stylish', ...docs]);
    expect(out).not.toMatch(/\b(error|warning)\b/);
  }, 60_000);

  it('spectral lint (spectral:oas, .spectral.yaml): nothing at warn or above', () => {
    expect(run('spectral', ['lint', '--fail-severity=warn', ...docs])).toMatch(/No results with a severity of 'warn' or higher found/);
  }, 60_000);
});
