import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { FileSystem, TEMP_FILE } from '../../src/shared/files/file-system';
import { LedgerRepository } from '../../src/control-plane/repositories/ledger/ledger.repository';
import { describeFiles, macOf, startApp, tempDir, TestApp } from '../helpers/app';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Fills a filesystem to the last byte (tmpfs counts pages, so fill page-wise then byte-wise). */
function fill(dir: string): string {
  const filler = path.join(dir, 'filler');
  const fd = fs.openSync(filler, 'w');
  const page = Buffer.alloc(4096, 1);
  try {
    for (;;) fs.writeSync(fd, page);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
  }
  try {
    for (;;) fs.writeSync(fd, Buffer.alloc(1, 1));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
  }
  fs.closeSync(fd);
  return filler;
}

const stateFiles = (t: TestApp) => {
  const snap = t.snapshot();
  delete snap['state/operations.jsonl']; // audit entries of earlier requests may still be queued
  return snap;
};

describeFiles('ledger storage failures', () => {
  let t: TestApp | undefined;
  let mnt: string | undefined;
  afterEach(async () => {
    await t?.close().catch(() => undefined);
    t = undefined;
    if (mnt) execFileSync('umount', ['-l', mnt]);
    mnt = undefined;
  });

  it('a full state disk answers 507 naming the problem, changes nothing, leaves no temp file, and recovers without a restart', async () => {
    const dir = tempDir();
    mnt = path.join(dir, 'state');
    fs.mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mnt]);
    t = await startApp({}, { dir });
    await t.req('POST', '/workers', { worker_id: 'w1' });
    await t.req('POST', '/devices', { mac: macOf(1) });
    const filler = fill(mnt);
    const before = stateFiles(t);

    const created = await t.req('POST', '/devices', { mac: macOf(2) });
    expect(created.status).toBe(507);
    expect(created.body).toMatchObject({ statusCode: 507, error: 'Insufficient Storage' });
    expect(created.body.message).toMatch(/no space left writing .*ledger\.wal \(ENOSPC\); nothing was changed/);
    const bound = await t.req('POST', `/devices/${macOf(1)}/bind?worker_id=w1`);
    expect(bound.status).toBe(507);
    const reported = await t.req('GET', `/devices/report?mac=${macOf(3)}`);
    expect(reported.status).toBe(507);
    const settings = await t.req('PUT', '/settings/auto-register', { enabled: false });
    expect(settings.status).toBe(507);
    // The change's intent record (its audit entry) is the first write it needs.
    expect(settings.body.message).toMatch(/no space left writing .*settings\.wal \(ENOSPC\); nothing was changed/);

    expect(stateFiles(t)).toEqual(before);
    expect(fs.readdirSync(mnt).filter((f) => TEMP_FILE.test(f))).toEqual([]);
    expect((await t.req('GET', '/devices')).body.map((d: any) => d.mac)).toEqual([macOf(1)]);
    expect((await t.req('GET', `/workers/w1`)).body.mac).toBeNull();

    fs.rmSync(filler);
    expect((await t.req('POST', '/devices', { mac: macOf(2) })).status).toBe(201);
    expect((await t.req('POST', `/devices/${macOf(1)}/bind?worker_id=w1`)).status).toBe(200);
    expect((await t.req('PUT', '/settings/auto-register', { enabled: false })).status).toBe(200);
    await sleep(1200); // queued audit entries are retried every second
    const lines = t.read('state/operations.jsonl').split('\n');
    expect(lines.pop()).toBe('');
    const ids = lines.map((l) => JSON.parse(l).id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    expect(lines.map((l) => JSON.parse(l).op)).toEqual(expect.arrayContaining(['device.register', 'device.bind', 'settings.auto_register']));
  });

  it('a full dnsmasq disk after a committed bind: the bind stands (never undone), is audited, and dhcp-hosts.conf is written once space is back', async () => {
    const dir = tempDir();
    mnt = path.join(dir, 'dnsmasq');
    fs.mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt]);
    t = await startApp({}, { dir });
    await t.req('POST', '/workers', { worker_id: 'w1' });
    await t.req('POST', '/devices', { mac: macOf(1) });
    const filler = fill(mnt);
    const r = await t.req('POST', `/devices/${macOf(1)}/bind?worker_id=w1`);
    expect(r.status).toBe(507);
    expect(r.body.message).toMatch(/^the change is committed; .*dhcp-hosts\.conf could not be written \(ENOSPC\), it is written again every 2 s until it can be$/);
    expect((await t.req('GET', `/devices/${macOf(1)}`)).body).toMatchObject({ state: 'bound', bound_worker_id: 'w1' });
    const ops = (await t.req('GET', `/operations?mac=${macOf(1)}`)).body.entries.map((e: any) => [e.op, e.status]);
    expect(ops.slice(-2)).toEqual([['device.bind', 'ok'], ['dnsmasq.write', 'failed']]);
    expect(fs.readdirSync(mnt).filter((f) => TEMP_FILE.test(f))).toEqual([]);
    fs.rmSync(filler);
    // No API call needed: the projection is retried until it is written.
    const file = path.join(mnt, 'dhcp-hosts.conf');
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline && (fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '') !== `${macOf(1)},w1\n`) await sleep(100);
    expect(fs.readFileSync(file, 'utf8')).toBe(`${macOf(1)},w1\n`);
    // An idempotent retry of the same bind by a client that saw the 507 is a plain 200.
    expect((await t.req('POST', `/devices/${macOf(1)}/bind?worker_id=w1`)).status).toBe(200);
  });

  it('a read-only state directory answers 503 and recovers when it is writable again', async () => {
    const dir = tempDir();
    mnt = path.join(dir, 'state');
    fs.mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mnt]);
    t = await startApp({}, { dir });
    await t.req('POST', '/devices', { mac: macOf(1) });
    execFileSync('mount', ['-o', 'remount,ro', mnt]);
    const r = await t.req('POST', '/devices', { mac: macOf(2) });
    expect(r.status).toBe(503);
    expect(r.body.message).toMatch(/state storage not writable: .*ledger\.wal \(EROFS\); nothing was changed/);
    execFileSync('mount', ['-o', 'remount,rw', mnt]);
    expect((await t.req('POST', '/devices', { mac: macOf(2) })).status).toBe(201);
  });

  it('a torn last audit line is cut at start (not a start failure) and ids keep increasing', async () => {
    t = await startApp();
    await t.req('POST', '/devices', { mac: macOf(1) });
    await t.close();
    const file = path.join(t.dir, 'state/operations.jsonl');
    const good = fs.readFileSync(file, 'utf8');
    const lastId = JSON.parse(good.trim().split('\n').pop()!).id;
    fs.appendFileSync(file, `{"id":${lastId + 1},"ts":"2026-12-01T00:00:00+00:00","op":"device.reg`); // killed mid-append
    t = await startApp({}, { dir: t.dir });
    expect(fs.readFileSync(file, 'utf8')).toBe(good);
    await t.req('POST', '/devices', { mac: macOf(2) });
    const lines = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines[lines.length - 1]).toMatchObject({ id: lastId + 1, op: 'device.register', mac: macOf(2) });
  });
});

describeFiles('hand edits with deferred checkpoints', () => {
  let t: TestApp;
  afterEach(() => t?.close());
  const devicesFile = () => path.join(t.dir, 'state/devices.yml');

  it('a broken line blocks writes; a concurrent report neither rewrites the file nor loses its telemetry', async () => {
    t = await startApp({ IPXE_CP_CHECKPOINT_MS: '100' });
    await t.req('POST', '/devices', { mac: macOf(1) });
    await t.req('POST', '/devices', { mac: macOf(2) });
    await sleep(300); // checkpointed
    const good = fs.readFileSync(devicesFile(), 'utf8');
    const broken = good.replace(`"${macOf(2)}": {`, `"${macOf(2)}": {{`) + `  "${macOf(5)}": {"state":"pooled"}\n`;
    fs.writeFileSync(devicesFile(), broken);
    await sleep(250);
    expect((await t.req('GET', `/devices/report?mac=${macOf(1)}&chip=RTL8125`)).status).toBe(200);
    // Run now what the timers would run (no negative assertion after a fixed sleep): the telemetry
    // flush and a checkpoint; neither may touch the broken file.
    const store = t.app.get(LedgerRepository);
    await store.flushTelemetry();
    await store.checkpoint().catch(() => undefined);
    expect(fs.readFileSync(devicesFile(), 'utf8')).toBe(broken);
    const r = await t.req('POST', '/devices', { mac: macOf(3) });
    expect(r.status).toBe(500);
    expect(r.body.message).toMatch(/devices\.yml:\d+/);
    // Fixed by hand (keeping the valid addition): merged, and the report's telemetry is kept.
    fs.writeFileSync(devicesFile(), good + `  "${macOf(5)}": {"state":"pooled"}\n`);
    await sleep(250);
    expect((await t.req('POST', '/devices', { mac: macOf(3) })).status).toBe(201);
    expect((await t.req('GET', `/devices/${macOf(1)}`)).body.fingerprint.chip).toBe('RTL8125');
    expect((await t.req('GET', `/devices/${macOf(5)}`)).status).toBe(200);
    await sleep(300);
    const text = fs.readFileSync(devicesFile(), 'utf8');
    for (const m of [macOf(1), macOf(2), macOf(3), macOf(5)]) expect(text).toContain(`"${m}"`);
    expect(text).toContain('"chip":"RTL8125"');
  });

  it('hand edits of settings.json and nvme-credentials.json are merged into the next API write, never written over; a broken one refuses it', async () => {
    t = await startApp();
    const settingsFile = path.join(t.dir, 'state/settings.json');
    const credFile = path.join(t.dir, 'state/nvme-credentials.json');
    expect((await t.req('PUT', '/settings/auto-register', { enabled: true })).status).toBe(200);
    // settings.json: the operator turns auto-register off by hand; the API then changes another key.
    fs.writeFileSync(settingsFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(settingsFile, 'utf8')), auto_register: false }, null, 2));
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: false, force: true })).status).toBe(200);
    expect(JSON.parse(fs.readFileSync(settingsFile, 'utf8'))).toMatchObject({ auto_register: false, signature_enforcement: false });
    expect((await t.req('GET', '/settings/auto-register')).body).toEqual({ enabled: false });
    const good = fs.readFileSync(settingsFile, 'utf8');
    fs.writeFileSync(settingsFile, good.replace('"auto_register": false', '"auto_register": "no"'));
    const broken = await t.req('PUT', '/settings/auto-register', { enabled: true });
    expect(broken.status).toBe(500);
    expect(broken.body.message).toMatch(/settings\.json:1: auto_register must be true or false; fix the hand edit, nothing was changed$/);
    expect(fs.readFileSync(settingsFile, 'utf8')).toContain('"auto_register": "no"');
    fs.writeFileSync(settingsFile, good);
    // nvme-credentials.json: a credential revoked by hand stays revoked through another worker's change.
    for (const w of ['cw1', 'cw2']) expect((await t.req('POST', '/workers', { worker_id: w })).status).toBe(201);
    expect((await t.req('PUT', '/workers/cw1/credential', { generate: true })).status).toBe(200);
    const creds = JSON.parse(fs.readFileSync(credFile, 'utf8'));
    creds.credentials.cw1.revoked = true;
    fs.writeFileSync(credFile, JSON.stringify(creds, null, 2), { mode: 0o600 });
    expect((await t.req('PUT', '/workers/cw2/credential', { generate: true })).status).toBe(200);
    const after = JSON.parse(fs.readFileSync(credFile, 'utf8'));
    expect([after.credentials.cw1.revoked, Object.keys(after.credentials).sort()]).toEqual([true, ['cw1', 'cw2']]);
    expect((await t.req('GET', '/workers/cw1/credential')).body.revoked).toBe(true);
    fs.writeFileSync(credFile, '{ "credentials": { "cw1": { "dhchap_key": "nope" } } }', { mode: 0o600 });
    const refused = await t.req('PUT', '/workers/cw2/credential', { generate: true });
    expect(refused.status).toBe(500);
    expect(refused.body.message).toMatch(/nvme-credentials\.json:1: credentials\.cw1\.dhchap_key is not a DHHC-1 secret; fix the hand edit, nothing was changed$/);
    expect(refused.text).not.toContain('DHHC-1:');
  });

  it('an edit that lands while a checkpoint is being written is merged and written again, never lost', async () => {
    t = await startApp(); // IPXE_CP_CHECKPOINT_MS=0: every commit is checkpointed at once
    await t.req('POST', '/devices', { mac: macOf(1) });
    const files = t.app.get(FileSystem);
    let edited = 0;
    // Between writing the new devices.yml and renaming it over the old one, an operator saves an edit.
    files.faultHook = (point) => {
      if (point !== 'written:devices.yml' || edited++) return;
      fs.appendFileSync(devicesFile(), `  "${macOf(7)}": {"state":"pooled","fingerprint":{"serial":"HAND-7"}}\n`);
    };
    try {
      expect((await t.req('POST', '/devices', { mac: macOf(2) })).status).toBe(201);
    } finally {
      files.faultHook = null;
    }
    expect(edited).toBeGreaterThanOrEqual(2); // the first write was not renamed; the second was
    const text = fs.readFileSync(devicesFile(), 'utf8');
    for (const m of [macOf(1), macOf(2), macOf(7)]) expect(text).toContain(`"${m}"`);
    expect(text).toContain('"serial":"HAND-7"');
    expect((await t.req('GET', `/devices/${macOf(7)}`)).body.fingerprint.serial).toBe('HAND-7');
  });

  it('a block-style edit is merged with commits the file does not hold yet, and a hand-made binding reaches dhcp-hosts.conf at once', async () => {
    t = await startApp({ IPXE_CP_CHECKPOINT_MS: '60000' });
    await t.req('POST', '/workers', { worker_id: 'w1' });
    await t.req('POST', '/devices', { mac: macOf(1) }); // in the change log only (no checkpoint for a minute)
    expect(t.read('state/devices.yml')).not.toContain(macOf(1));
    fs.writeFileSync(
      devicesFile(),
      ['devices:', `  "${macOf(9)}":`, '    state: bound', '    bound_worker_id: w1', '    fingerprint:', '      serial: HAND-9', ''].join('\n'),
    );
    await sleep(250);
    const devices = (await t.req('GET', '/devices')).body;
    expect(devices.map((d: any) => d.mac).sort()).toEqual([macOf(1), macOf(9)]);
    expect((await t.req('GET', '/workers/w1')).body.mac).toBe(macOf(9));
    await sleep(100);
    expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe(`${macOf(9)},w1\n`);
    // The merge was checkpointed: the file now holds both in the canonical layout.
    const text = fs.readFileSync(devicesFile(), 'utf8');
    expect(text).toContain(`"${macOf(1)}": {`);
    expect(text).toContain('"serial":"HAND-9"');
  });

  it('two devices hand-bound to one worker block writes naming both lines; dhcp-hosts.conf keeps one line', async () => {
    t = await startApp({ IPXE_CP_CHECKPOINT_MS: '50' });
    await t.req('POST', '/workers', { worker_id: 'w1' });
    await t.req('POST', '/devices', { mac: macOf(1) });
    await t.req('POST', '/devices', { mac: macOf(2) });
    await t.req('POST', `/devices/${macOf(1)}/bind?worker_id=w1`);
    await sleep(200);
    const lines = fs.readFileSync(devicesFile(), 'utf8').split('\n');
    const i2 = lines.findIndex((l) => l.includes(`"${macOf(2)}": {`));
    lines[i2] = lines[i2].replace('"state":"pooled","bound_worker_id":null', '"state":"bound","bound_worker_id":"w1"');
    fs.writeFileSync(devicesFile(), lines.join('\n'));
    await sleep(250);
    const r = await t.req('POST', '/workers', { worker_id: 'w2' });
    expect(r.status).toBe(500);
    expect(r.body.message).toContain(`devices.yml:${i2 + 1}: worker "w1" is bound by two devices`);
    expect(t.read('dnsmasq/dhcp-hosts.conf')).toBe(`${macOf(1)},w1\n`);
    expect((await t.req('GET', '/workers/w1')).body.mac).toBe(macOf(1));
    // A restart refuses the same file with the same message.
    await t.close();
    await expect(startApp({}, { dir: t.dir })).rejects.toThrow(/devices\.yml:\d+: worker "w1" is bound by two devices/);
    t = undefined as unknown as TestApp;
  });
});

describe('unauthenticated growth bounds', () => {
  let t: TestApp;
  afterEach(() => t?.close());

  it('caps the pool and the per-source registration rate, auditing once per burst', async () => {
    t = await startApp({ IPXE_CP_POOL_LIMIT: '30', IPXE_CP_REGISTER_RATE: '2' });
    // One source: a burst of 20 (10 s worth of 2/s), then refused.
    const res = await Promise.all(Array.from({ length: 40 }, (_, i) => t.req('GET', `/devices/report?mac=${macOf(100 + i)}`)));
    expect(res.every((r) => r.status === 200)).toBe(true);
    expect((await t.req('GET', '/devices')).body).toHaveLength(20);
    // Another source has its own bucket (in-process injection with another peer address).
    const fastify = t.app.getHttpAdapter().getInstance();
    for (let i = 0; i < 3; i++) {
      const r = await fastify.inject({ method: 'GET', url: `/devices/report?mac=${macOf(200 + i)}`, remoteAddress: '192.0.2.7' });
      expect(r.statusCode).toBe(200);
    }
    expect((await t.req('GET', '/devices')).body).toHaveLength(23);
    const ops = (await t.req('GET', '/operations')).body.entries;
    const limited = ops.filter((e: any) => e.op === 'device.register.limited');
    expect(limited).toHaveLength(1);
    expect(limited[0]).toMatchObject({ status: 'failed', reason: 'rate_limit', limit: 2, client: '127.0.0.1' });
    expect(ops.filter((e: any) => e.op === 'device.register')).toHaveLength(23);
    // Known devices are never limited: their telemetry still lands.
    expect((await t.req('GET', `/devices/report?mac=${macOf(100)}&serial=KNOWN`)).status).toBe(200);
    expect((await t.req('GET', `/devices/${macOf(100)}`)).body.fingerprint.serial).toBe('KNOWN');
  });

  it('stops registering at the pool limit; bound devices do not count', async () => {
    t = await startApp({ IPXE_CP_POOL_LIMIT: '3' });
    await t.req('POST', '/workers', { worker_id: 'w1' });
    for (let i = 0; i < 3; i++) await t.req('GET', `/devices/report?mac=${macOf(i)}`);
    await t.req('GET', `/devices/report?mac=${macOf(3)}`);
    await t.req('GET', `/devices/report?mac=${macOf(4)}`);
    expect((await t.req('GET', '/devices')).body).toHaveLength(3);
    await t.req('POST', `/devices/${macOf(0)}/bind?worker_id=w1`);
    await t.req('GET', `/devices/report?mac=${macOf(3)}`);
    expect((await t.req('GET', '/devices')).body).toHaveLength(4);
    const limited = (await t.req('GET', '/operations')).body.entries.filter((e: any) => e.op === 'device.register.limited');
    expect(limited).toHaveLength(1);
    expect(limited[0]).toMatchObject({ reason: 'pool_limit', limit: 3 });
  });

  it('the pool limit is exact under 600 concurrent new devices (checked inside the group commit)', async () => {
    t = await startApp({ IPXE_CP_POOL_LIMIT: '300', IPXE_CP_REGISTER_RATE: '100000' });
    const fastify = t.app.getHttpAdapter().getInstance();
    const answers = await Promise.all(Array.from({ length: 600 }, (_, i) => fastify.inject({ method: 'GET', url: `/devices/report?mac=${macOf(1000 + i)}` })));
    expect(answers.every((r) => r.statusCode === 200)).toBe(true);
    const pooled = (await t.req('GET', '/devices?state=pooled')).body;
    expect(pooled).toHaveLength(300);
    // One audit entry per registered device, none for the refused ones (they were never in).
    const regs = (await t.req('GET', '/operations?op=device.register&limit=10000')).body.entries;
    expect(new Set(regs.map((e: any) => e.mac))).toEqual(new Set(pooled.map((d: any) => d.mac)));
  });
});
