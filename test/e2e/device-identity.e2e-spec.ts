import { generateKeyPairSync, KeyObject, sign } from 'node:crypto';
import { ChallengeService } from '../../src/control-plane/boot/challenge.service';
import { Clock } from '../../src/control-plane/common/clock';
import { macOf, startApp, TestApp } from '../helpers/app';

/** A device as a signing-capable iPXE would be: a P-256 key, report, challenge, sign, boot-vars. */
class SimDevice {
  readonly pubkey: string;
  private readonly key: KeyObject;
  constructor(readonly mac: string) {
    const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    this.pubkey = publicKey.export({ format: 'der', type: 'spki' }).subarray(-65).toString('hex');
    this.key = privateKey;
  }
  /** ECDSA P-256 / SHA-256 over nonce (32 bytes) || mac (6 bytes), raw r || s. */
  sign(nonce: string, mac = this.mac, encoding: 'ieee-p1363' | 'der' = 'ieee-p1363'): string {
    const bytes = Buffer.concat([Buffer.from(nonce, 'hex'), Buffer.from(mac.replace(/:/g, ''), 'hex')]);
    return sign('sha256', bytes, { key: this.key, dsaEncoding: encoding }).toString('hex');
  }
}

const EMPTY = '#!ipxe\n# no per-worker boot vars found\n';

describe('device identity: registration window, keys, challenge-response, enforcement', () => {
  let t: TestApp;
  let now: number;
  afterEach(() => t?.close());

  async function start(dir?: string) {
    t = await startApp({}, dir ? { dir } : {});
    const clock = t.app.get(Clock);
    now = now ?? Date.parse('2026-12-01T10:00:00Z');
    clock.now = () => new Date(now);
  }
  const report = (d: SimDevice, key = d.pubkey) => t.req('GET', `/devices/report?mac=${d.mac}&serial=S-${d.mac}&pubkey=${key}`);
  const challenge = async (mac: string) => (await t.req('GET', `/devices/challenge?mac=${mac}&format=json`)).body.nonce as string;
  const bootVars = (mac: string, nonce?: string, sig?: string) =>
    t.req('GET', `/boot-vars?mac=${mac}&hostname=w-${mac.slice(-2)}${nonce ? `&nonce=${nonce}` : ''}${sig ? `&sig=${sig}` : ''}`);
  const denials = async () => (await t.req('GET', '/operations?limit=1000')).body.entries.filter((e: any) => e.op === 'boot.denied').map((e: any) => e.reason);
  /** devices.yml with the telemetry fields blanked: what a rejection must leave byte-identical. */
  const ledger = async () => t.read('state/devices.yml').replace(/"fingerprint":\{[^}]*\}/g, '').replace(/"last_seen":"[^"]*"/g, '');

  beforeEach(() => {
    now = Date.parse('2026-12-01T10:00:00Z');
  });

  it('happy path, and every way a signature can be wrong', async () => {
    await start();
    const dev = new SimDevice(macOf(1));
    const other = new SimDevice(macOf(2));
    expect((await t.req('POST', '/devices/registration-window', { ttl_minutes: 10 })).status).toBe(201);
    for (const d of [dev, other]) expect((await report(d)).status).toBe(200);
    const view = (await t.req('GET', `/devices/${dev.mac}`)).body;
    expect(view).toMatchObject({ state: 'pooled', source: 'ipxe', key_sha256: expect.stringMatching(/^[0-9a-f]{64}$/), key_claimed_at: '2026-12-01T10:00:00+00:00' });
    expect(view.key_hash).toBe(view.key_sha256);
    expect(JSON.stringify(view)).not.toContain(dev.pubkey); // never the key itself
    for (const d of [dev, other]) await t.req('POST', '/workers', { worker_id: `w-${d.mac.slice(-2)}`, mac: d.mac, boot: { menu_default: 'shell' } });
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true })).body).toEqual({ enabled: true, keyless_bound_devices: [] });

    const script = await t.req('GET', `/devices/challenge?mac=${dev.mac}`);
    expect(script.text).toMatch(/^#!ipxe\n# challenge: sign nonce \|\| mac with the device key\nset nonce [0-9a-f]{64}\n$/);
    let n = /set nonce (\w+)/.exec(script.text)![1];
    const ok = await bootVars(dev.mac, n, dev.sign(n));
    expect(ok.text).toBe('#!ipxe\n# boot vars for w-01\nset menu-default shell\nset menu-timeout 5000\n');
    // The same signed nonce works once for /boot-menu too, and once only.
    const menu = (nonce?: string, sig?: string) => t.req('GET', `/boot-menu?mac=${dev.mac}&hostname=w-01${nonce ? `&nonce=${nonce}&sig=${sig}` : ''}`);
    expect((await menu(n, dev.sign(n))).text).toBe('#!ipxe\n# boot menu for w-01\nset menu-count 0\n');
    expect((await menu(n, dev.sign(n))).text).toBe(EMPTY);
    expect((await menu()).text).toBe(EMPTY);
    const before = await ledger();

    expect((await bootVars(dev.mac, n, dev.sign(n))).text).toBe(EMPTY); // replayed
    expect((await bootVars(dev.mac)).text).toBe(EMPTY); // no nonce
    n = await challenge(dev.mac);
    now += 61_000;
    expect((await bootVars(dev.mac, n, dev.sign(n))).text).toBe(EMPTY); // expired
    const forOther = await challenge(other.mac);
    expect((await bootVars(dev.mac, forOther, dev.sign(forOther))).text).toBe(EMPTY); // nonce of another MAC
    n = await challenge(dev.mac);
    expect((await bootVars(dev.mac, n, other.sign(n, dev.mac))).text).toBe(EMPTY); // another key
    n = await challenge(dev.mac);
    expect((await bootVars(dev.mac, n, dev.sign(n, other.mac))).text).toBe(EMPTY); // other bytes
    n = await challenge(dev.mac);
    expect((await bootVars(dev.mac, n, dev.sign(n, dev.mac, 'der'))).text).toBe(EMPTY); // DER, not r||s
    expect((await t.req('GET', `/boot-vars?mac=${dev.mac}&hostname=w-01&format=json`)).body).toEqual({});
    // One audit record per (MAC, reason) per 10 s: the second "bad signature" is not repeated, the
    // JSON request without a nonce 61 s after the first is.
    expect(await denials()).toEqual(['replayed', 'no nonce', 'expired', 'bad nonce', 'bad signature', 'no nonce']);
    expect(await ledger()).toEqual(before);
    // Enforcement off: nonce and sig are ignored.
    await t.req('PUT', '/settings/signature-enforcement', { enabled: false });
    expect((await bootVars(dev.mac)).text).toContain('set menu-default shell');
  });

  it('the quota is exact under a burst: 200 new devices at once with max_devices 50 pools exactly 50', async () => {
    await start();
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 5, max_devices: 50 });
    const devices = Array.from({ length: 200 }, (_, i) => new SimDevice(macOf(1000 + i)));
    // Many sources: the per-source rate limit is not what is tested here.
    const fastify = t.app.getHttpAdapter().getInstance();
    const res = await Promise.all(
      devices.map((d, i) => fastify.inject({ method: 'GET', url: `/devices/report?mac=${d.mac}&pubkey=${d.pubkey}`, remoteAddress: `192.0.2.${i % 250}` })),
    );
    expect(res.every((r) => r.statusCode === 200)).toBe(true);
    expect((await t.req('GET', '/devices')).body).toHaveLength(50);
    expect((await t.req('GET', '/devices/registration-window')).body).toMatchObject({ open: true, max_devices: 50, admitted: 50, remaining: 0 });
  });

  it('outside a window nothing enters the pool; auto_register works only until the first window', async () => {
    await start();
    const legacy = new SimDevice(macOf(3));
    expect((await t.req('GET', `/devices/report?mac=${legacy.mac}`)).status).toBe(200); // seed 000 open mode
    expect((await t.req('GET', `/devices/${legacy.mac}`)).body).toMatchObject({ state: 'pooled', key_sha256: null });
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 1 });
    await t.req('DELETE', '/devices/registration-window');
    expect((await t.req('GET', '/devices/registration-window')).body).toMatchObject({ open: false });
    const late = new SimDevice(macOf(4));
    await report(late);
    await t.req('GET', `/devices/report?mac=${macOf(5)}`);
    expect((await t.req('GET', `/devices/${late.mac}`)).status).toBe(404);
    expect((await t.req('GET', `/devices/${macOf(5)}`)).status).toBe(404);
    // A known device without a key claims one only inside a window.
    await report(legacy);
    expect((await t.req('GET', `/devices/${legacy.mac}`)).body.key_sha256).toBeNull();
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 1 });
    await report(legacy);
    expect((await t.req('GET', `/devices/${legacy.mac}`)).body.key_sha256).toMatch(/^[0-9a-f]{64}$/);
    // In a window, a new MAC without a key, or with an invalid one, is not pooled (audited, no 500).
    await t.req('GET', `/devices/report?mac=${macOf(6)}`);
    for (const bad of ['zz', '04' + '00'.repeat(64), '05' + 'ab'.repeat(64), 'ab'.repeat(65) + 'c']) {
      expect((await t.req('GET', `/devices/report?mac=${macOf(7)}&pubkey=${bad}`)).status).toBe(200);
    }
    expect((await t.req('GET', '/devices')).body.map((d: any) => d.mac)).toEqual([legacy.mac]);
    const invalid = (await t.req('GET', '/operations')).body.entries.filter((e: any) => e.op === 'device.key.invalid');
    expect(invalid).toHaveLength(1); // once per MAC per minute, not per request
  });

  it('admission is said in one place, and every device turned away is counted and audited by reason', async () => {
    await start();
    const admission = async () => (await t.req('GET', '/settings/admission')).body;
    const refusals = async () =>
      (await t.req('GET', '/operations?op=device.register.refused')).body.entries.map((e: any) => `${e.mac} ${e.reason}`);
    expect(await admission()).toMatchObject({ mode: 'open', auto_register: true, secure_registration: false, refused: { total: 0 } });
    await t.req('PUT', '/settings/auto-register', { enabled: false });
    await t.req('GET', `/devices/report?mac=${macOf(20)}`);
    expect(await admission()).toMatchObject({ mode: 'closed', explanation: expect.stringContaining('auto-register is off'), refused: { total: 1, by_reason: { auto_register_off: 1 } } });
    await t.req('PUT', '/settings/auto-register', { enabled: true });
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 5, max_devices: 1 });
    const opened = await admission();
    // A new window counts afresh from its opening.
    expect(opened).toMatchObject({ mode: 'window', secure_registration: true, window: { open: true, max_devices: 1, admitted: 0 }, refused: { since: opened.window.opened_at, total: 0 } });
    await t.req('GET', `/devices/report?mac=${macOf(21)}`); // no key
    await report(new SimDevice(macOf(22))); // takes the one seat
    await report(new SimDevice(macOf(23))); // the window is full
    expect((await admission()).refused).toMatchObject({ total: 2, by_reason: { no_key: 1, window_full: 1, no_window: 0, auto_register_off: 0 } });
    await t.req('DELETE', '/devices/registration-window');
    await t.req('GET', `/devices/report?mac=${macOf(24)}`);
    // After the first window auto_register still reads true, and the admission says what it means.
    const after = await admission();
    expect(after).toMatchObject({ mode: 'closed', auto_register: true, secure_registration: true, window: { open: false, admitted: 1 } });
    expect(after.explanation).toMatch(/auto-register no longer admits keyless devices/);
    expect(after.refused.by_reason.no_window).toBe(1);
    expect((await refusals()).sort()).toEqual([`${macOf(20)} auto_register_off`, `${macOf(21)} no_key`, `${macOf(23)} window_full`, `${macOf(24)} no_window`]);
    // Reported again within the minute: counted, not audited again.
    await t.req('GET', `/devices/report?mac=${macOf(24)}`);
    expect((await admission()).refused.by_reason.no_window).toBe(2);
    expect(await refusals()).toHaveLength(4);
    expect((await t.req('GET', '/devices')).body.map((d: any) => d.mac)).toEqual([macOf(22)]);
  });

  it('a revocation is undone by restore: back in the pool without a key, audited; anything else is a 409', async () => {
    await start();
    const dev = new SimDevice(macOf(30));
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 10 });
    await report(dev);
    expect((await t.req('POST', `/devices/${dev.mac}/restore`)).status).toBe(409); // pooled: nothing to undo
    expect((await t.req('DELETE', `/devices/${dev.mac}`)).body).toMatchObject({ state: 'revoked' });
    expect((await t.req('POST', '/devices', { mac: dev.mac })).status).toBe(409); // the reference: no re-registration
    const restored = await t.req('POST', `/devices/${dev.mac}/restore`);
    expect([restored.status, restored.body.state, restored.body.key_sha256]).toEqual([200, 'pooled', null]);
    await report(dev); // the window is open: it claims its key again
    expect((await t.req('GET', `/devices/${dev.mac}`)).body.key_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect((await t.req('POST', `/devices/${macOf(31)}/restore`)).status).toBe(404);
    expect((await t.req('POST', '/devices/not-a-mac/restore')).status).toBe(400);
    const ops = (await t.req('GET', '/operations?op=device.restore')).body.entries;
    expect(ops).toEqual([expect.objectContaining({ op: 'device.restore', mac: dev.mac, status: 'ok' })]);
  });

  it('the window survives a restart and still closes on time', async () => {
    await start();
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 1, max_devices: 10 });
    await report(new SimDevice(macOf(8)));
    await t.close();
    await start(t.dir);
    expect((await t.req('GET', '/devices/registration-window')).body).toMatchObject({ open: true, admitted: 1, remaining: 9 });
    now += 61_000;
    expect((await t.req('GET', '/devices/registration-window')).body).toMatchObject({ open: false });
    await report(new SimDevice(macOf(9)));
    expect((await t.req('GET', '/devices')).body).toHaveLength(1);
  });

  it('a key never changes through a report; reset and revoke drop it', async () => {
    await start();
    const dev = new SimDevice(macOf(10));
    const thief = new SimDevice(macOf(10));
    await t.req('POST', '/devices/registration-window', { ttl_minutes: 10 });
    await report(dev);
    const sha = (await t.req('GET', `/devices/${dev.mac}`)).body.key_sha256;
    await report(thief);
    expect((await t.req('GET', `/devices/${dev.mac}`)).body.key_sha256).toBe(sha);
    const ops = (await t.req('GET', '/operations')).body.entries.map((e: any) => e.op);
    expect(ops).toContain('device.key.mismatch');
    expect((await t.req('DELETE', `/devices/${dev.mac}/key`)).body).toMatchObject({ key_sha256: null, key_claimed_at: null });
    await report(thief); // the operator reset it: the next claim inside a window wins
    expect((await t.req('GET', `/devices/${dev.mac}`)).body.key_sha256).not.toBe(sha);
    expect((await t.req('DELETE', `/devices/${dev.mac}`)).body).toMatchObject({ state: 'revoked', key_sha256: null });
    await report(thief);
    expect((await t.req('GET', `/devices/${dev.mac}`)).body).toMatchObject({ state: 'revoked', key_sha256: null });
    // The challenge of a revoked or unknown MAC looks exactly like any other.
    for (const mac of [dev.mac, macOf(99)]) {
      expect((await t.req('GET', `/devices/challenge?mac=${mac}`)).text).toMatch(/^#!ipxe\n# challenge: [^\n]*\nset nonce [0-9a-f]{64}\n$/);
    }
  });

  it('enforcement with keyless bound devices is a 409 listing them, unless forced', async () => {
    await start();
    for (const i of [20, 21]) {
      await t.req('POST', '/devices', { mac: macOf(i) });
      await t.req('POST', '/workers', { worker_id: `w-${i}`, mac: macOf(i) });
    }
    const r = await t.req('PUT', '/settings/signature-enforcement', { enabled: true });
    expect(r.status).toBe(409);
    expect(r.body.devices).toEqual([macOf(20), macOf(21)]);
    expect(r.body.message).toMatch(/2 bound device\(s\) have no key/);
    expect((await t.req('GET', '/settings/signature-enforcement')).body.enabled).toBe(false);
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true, force: true })).status).toBe(200);
    expect((await bootVars(macOf(20))).text).toBe(EMPTY);
    expect(await denials()).toEqual(['no key']);
  });

  it('a flood of 100,000 distinct MACs with bad keys costs a bounded number of audit writes, and the next entry counts what was held back', async () => {
    await start();
    expect((await t.req('PUT', '/settings/auto-register', { enabled: false })).status).toBe(200);
    const fastify = t.app.getHttpAdapter().getInstance();
    const keyInvalid = async () => (await t.req('GET', '/operations?op=device.key.invalid&limit=10000')).body.entries;
    // Entries of no ledger change are written asynchronously (and retried if the database was slow): poll.
    const settled = async (n: number) => {
      let got: any[] = [];
      for (const end = Date.now() + 20_000; Date.now() < end && (got = await keyInvalid()).length < n; ) await new Promise((r) => setTimeout(r, 100));
      return got;
    };
    for (let i = 0; i < 100_000; i++) await fastify.inject({ method: 'GET', url: `/devices/report?mac=${macOf(300_000 + i)}&pubkey=zz` });
    // The clock is frozen: one minute's budget, exactly.
    const first = await settled(120);
    expect(first).toHaveLength(120);
    expect(first.every((e: any) => e.dropped === undefined)).toBe(true);
    now += 60_000;
    await t.req('GET', `/devices/report?mac=${macOf(500_000)}&pubkey=zz`);
    const next = (await settled(121)).slice(120);
    expect(next).toEqual([expect.objectContaining({ mac: macOf(500_000), dropped: 100_000 - 120 })]);
    // boot.denied under enforcement has the same budget.
    expect((await t.req('PUT', '/settings/auto-register', { enabled: true })).status).toBe(200);
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true })).status).toBe(200);
    for (let i = 0; i < 1_000; i++) await fastify.inject({ method: 'GET', url: `/boot-vars?mac=${macOf(600_000 + i)}` });
    let denied: string[] = [];
    for (const end = Date.now() + 20_000; Date.now() < end && (denied = await denials()).length < 120; ) await new Promise((r) => setTimeout(r, 100));
    expect(denied).toHaveLength(120);
  });

  it('a flood of 100,000 challenges stores nothing, and a nonce spent after a verified signature is all that is kept', async () => {
    await start();
    for (let i = 0; i < 200; i++) await t.req('POST', '/devices', { mac: macOf(5000 + i) });
    const challenges = t.app.get(ChallengeService);
    const fastify = t.app.getHttpAdapter().getInstance();
    // Unknown and known MACs alike: answered, nothing stored (the nonce seals its MAC and expiry).
    // Heap figures belong to the benches, not to a test.
    for (let i = 0; i < 50_000; i++) await fastify.inject({ method: 'GET', url: `/devices/challenge?mac=${macOf(200_000 + i)}&format=json` });
    for (let i = 0; i < 50_000; i++) await fastify.inject({ method: 'GET', url: `/devices/challenge?mac=${macOf(5000 + (i % 200))}&format=json` });
    expect(challenges.size).toBe(0);
    // A forged signature does not spend the nonce: the device's own signature still works after it.
    const dev = new SimDevice(macOf(7000));
    expect((await t.req('POST', '/devices/registration-window', { ttl_minutes: 10 })).status).toBe(201);
    expect((await report(dev)).status).toBe(200);
    await t.req('POST', '/workers', { worker_id: 'w-00', mac: dev.mac, boot: { menu_default: 'shell' } });
    expect((await t.req('PUT', '/settings/signature-enforcement', { enabled: true, force: true })).status).toBe(200);
    const n = await challenge(dev.mac);
    const forged = new SimDevice(dev.mac);
    expect((await t.req('GET', `/boot-vars?mac=${dev.mac}&nonce=${n}&sig=${forged.sign(n)}`)).text).toBe(EMPTY);
    expect(challenges.size).toBe(0);
    expect((await t.req('GET', `/boot-vars?mac=${dev.mac}&nonce=${n}&sig=${dev.sign(n)}`)).text).toContain('set menu-default shell');
    expect(challenges.size).toBe(1);
    // A nonce flipped in one bit of its random part no longer carries a valid seal.
    const flipped = (parseInt(n[0], 16) ^ 1).toString(16) + n.slice(1);
    expect((await t.req('GET', `/boot-menu?mac=${dev.mac}&nonce=${flipped}&sig=${dev.sign(flipped)}`)).text).toBe(EMPTY);
    expect(await denials()).toEqual(['bad signature', 'bad nonce']);
  });
});
