import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describeFiles, freePort, startApp, tempDir, TestApp } from '../helpers/app';

/**
 * What a third party does with the committed spec: generate a client with @hey-api/openapi-ts
 * 0.95 (the last release for Node 20), write code against it under `tsc --strict`, and run it
 * against a real control plane: register a device, create a worker, bind them, create a disk
 * body the spec's oneOf types (a master's name, not a size), read the worker back.
 */

const root = path.join(__dirname, '../..');
const bin = (b: string) => path.join(root, 'node_modules/.bin', b);

const PROGRAM = `
import { createClient } from './client/client';
import { bindDevice, createWorker, createWorkerDisk, getWorker, registerDevice } from './client/sdk.gen';

const client = createClient({ baseUrl: process.argv[2], headers: { authorization: 'Bearer tp-token' } });

async function main(): Promise<void> {
  const d = await registerDevice({ client, body: { mac: '02:00:00:00:50:01' } });
  const w = await createWorker({ client, body: { worker_id: 'tp-1' } });
  const b = await bindDevice({ client, path: { mac: '02:00:00:00:50:01' }, query: { worker_id: 'tp-1' } });
  // A master disk is named, never sized: the generated type says so.
  // @ts-expect-error a master disk takes name, not size
  const typed: Parameters<typeof createWorkerDisk>[0]['body'] = { type: 'master', size: '10G', os: 'ubuntu' };
  const disk = await createWorkerDisk({ client, path: { worker_id: 'tp-1' }, body: { type: 'master', name: '_tpl_missing.img', os: 'ubuntu' } });
  const got = await getWorker({ client, path: { worker_id: 'tp-1' } });
  const out = {
    register: d.response.status,
    worker: w.response.status,
    bind: b.response.status,
    disk: disk.response.status,
    bound_device: got.data?.bound_device ?? null,
    typed: typed !== undefined,
  };
  process.stdout.write(JSON.stringify(out));
}
void main();
`;

describeFiles('a third-party client generated from the spec (@hey-api/openapi-ts 0.95)', () => {
  const dir = tempDir('kurrent-thirdparty-');
  let t: TestApp;
  let url = '';

  beforeAll(async () => {
    t = await startApp({ IPXE_CP_TOKEN: 'tp-token' }, { dir: path.join(dir, 'cp') });
    const port = await freePort();
    await t.app.listen(port, '127.0.0.1');
    url = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await t?.close();
  });

  it('generates, compiles under tsc --strict, and binds a device against a running control plane', async () => {
    const work = path.join(dir, 'tp');
    fs.mkdirSync(work, { recursive: true });
    execFileSync(bin('openapi-ts'), ['-i', path.join(root, 'openapi/control-plane.openapi.json'), '-o', path.join(work, 'client'), '-c', '@hey-api/client-fetch'], { cwd: work, stdio: 'pipe', env: { ...process.env, NO_COLOR: '1' } });
    fs.writeFileSync(path.join(work, 'main.ts'), PROGRAM);
    const tsc = spawnSync(bin('tsc'), ['--strict', '--target', 'es2022', '--module', 'commonjs', '--moduleResolution', 'node', '--skipLibCheck', '--outDir', path.join(work, 'out'), path.join(work, 'main.ts')], { encoding: 'utf8' });
    expect([tsc.status, tsc.stdout]).toEqual([0, '']);
    // Asynchronously: the control plane answers from this very process.
    const run = await promisify(execFile)(process.execPath, [path.join(work, 'out/main.js'), url], { encoding: 'utf8', timeout: 30_000 });
    expect(run.stderr).toBe('');
    // The disk's master does not exist: a documented 4xx, which the client surfaces as a status.
    expect(JSON.parse(run.stdout)).toEqual({ register: 201, worker: 201, bind: 200, disk: expect.any(Number), bound_device: '02:00:00:00:50:01', typed: true });
    expect(JSON.parse(run.stdout).disk).toBeGreaterThanOrEqual(400);
  }, 120_000);
});
