import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { checkResponse } from '../helpers/spec-check';

describe('the spec check every e2e response goes through', () => {
  const ok = JSON.stringify({ status: 'ok' });
  it('passes what the spec documents and names the operation of what it does not', () => {
    expect(() => checkResponse('control-plane.openapi.json', 'GET', '/healthz', 200, 'application/json', ok)).not.toThrow();
    expect(() => checkResponse('control-plane.openapi.json', 'GET', '/healthz', 201, 'application/json', ok)).toThrow(/getHealth .* answered 201/);
    expect(() => checkResponse('control-plane.openapi.json', 'GET', '/workers/w1', 200, 'application/json', '{"worker_id":1}')).toThrow(/getWorker 200 body does not match/);
    expect(() => checkResponse('control-plane.openapi.json', 'GET', '/workers', 200, 'text/plain', '[]')).toThrow(/answered text\/plain/);
    expect(() => checkResponse('control-plane.openapi.json', 'GET', '/devices/report?mac=x', 200, 'text/plain', 'x')).toThrow(/documents no body/);
    expect(() => checkResponse('control-plane.openapi.json', 'PATCH', '/workers', 405, 'application/json', '{}')).not.toThrow();
    expect(() => checkResponse('control-plane.openapi.json', 'GET', '/nope', 200, 'application/json', '{}')).toThrow(/no such path/);
    expect(() => checkResponse('agent.openapi.json', 'DELETE', '/nvme/hosts/x', 200, 'application/json', '{"deleted":"x"}')).not.toThrow();
  });
});

describe('the typed client', () => {
  it('is what openapi-typescript makes of the committed specs (run `npm run openapi` after API changes)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-client-'));
    for (const [spec, file] of [
      ['control-plane.openapi.json', 'control-plane.schema.ts'],
      ['agent.openapi.json', 'agent.schema.ts'],
    ]) {
      execFileSync(path.join(__dirname, '../../node_modules/.bin/openapi-typescript'), [path.join(__dirname, '../../openapi', spec), '-o', path.join(dir, file), '--default-non-nullable', 'false'], { stdio: 'pipe' });
      expect(fs.readFileSync(path.join(dir, file), 'utf8')).toBe(fs.readFileSync(path.join(__dirname, '../../src/client', file), 'utf8'));
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
