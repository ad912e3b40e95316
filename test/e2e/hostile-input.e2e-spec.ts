import * as fs from 'node:fs';
import * as path from 'node:path';
import { itFiles, startApp, tempDir, TestApp } from '../helpers/app';
import { until } from '../helpers/poll';

/** Regression tests for what fuzzing both specs found (issue 8): every byte from outside is hostile. */

const EVIL = '10.9.9.9\nchain http://127.0.0.1:6899/evil';
const MAC = '02:00:00:00:00:01';

describe('hostile input at every boundary', () => {
  let t: TestApp;
  afterEach(() => t?.close());

  it('an agent iscsi_server that is not an address is a 400 naming the field; nothing is written', async () => {
    t = await startApp();
    const before = t.read('config/agents.yml');
    for (const bad of [EVIL, 'ì', '__main__', '10.0.0.1 ; shell', '10.0.0.1:3260', '0.0.0.0', '255.255.255.255', '224.0.0.1', '::', 'ff02::1', '']) {
      if (bad === '') continue; // empty means "the host of base_url"
      const r = await t.req('POST', '/agents', { id: 'st1', base_url: 'http://127.0.0.1:4840', iscsi_server: bad });
      expect(r.status).toBe(400);
      expect(r.body.message).toMatch(/^iscsi_server: must be an IPv4 address, an IPv6 address or a DNS name/);
    }
    expect(t.read('config/agents.yml')).toBe(before);
    const ok = await t.req('POST', '/agents', { id: 'st1', base_url: 'http://127.0.0.1:4840', iscsi_server: 'FD00::3' });
    expect(ok.status).toBe(201);
    expect(ok.body.iscsi_server).toBe('[fd00::3]'); // bracketed: it goes into an iSCSI URI
  });

  it('agent ids, tags and tokens follow one grammar', async () => {
    t = await startApp();
    const base = { base_url: 'http://127.0.0.1:4840' };
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ id: 't.a6d-', ...base }, /^id: must be 1-63 characters/],
      [{ id: 'wbf.', ...base }, /^id: must be 1-63 characters/],
      [{ id: 'ok', ...base, tags: ['fine', 'bad\u0000tag'] }, /^tags: must be 1-63 characters/],
      [{ id: 'ok', ...base, tags: ['x\u0018'] }, /^tags: must be 1-63/],
      [{ id: 'ok', ...base, token: 'tökén' }, /^token: must be visible ASCII/],
      [{ id: 'ok', ...base, token: 'two words' }, /^token: must be visible ASCII/],
      [{ id: 'ok', base_url: 'http://user:pw@10.0.0.1:4840' }, /base_url/],
      [{ id: 'ok', base_url: 'http://bad_host:4840' }, /base_url/],
      // One grammar for base_url: the agent's API at the root of a unicast host, a real port, ASCII.
      [{ id: 'ok', base_url: 'http://10.0.0.1:4840/api' }, /^base_url: must be http\(s\):\/\/<unicast IPv4, \[IPv6\] or ASCII DNS name>\[:port 1-65535\], without path/],
      [{ id: 'ok', base_url: 'http://10.0.0.1:0' }, /^base_url: must be/],
      [{ id: 'ok', base_url: 'http://0' }, /^base_url: must be/],
      [{ id: 'ok', base_url: 'http://0.0.0.0:4840' }, /^base_url: must be/],
      [{ id: 'ok', base_url: 'http://☃.example:4840' }, /^base_url: must be/],
      [{ id: 'ok', base_url: 'http://10.0.0.1:99999' }, /^base_url: must be/],
    ];
    for (const [body, msg] of cases) {
      const r = await t.req('POST', '/agents', body);
      expect([r.status, r.body.message]).toEqual([400, expect.stringMatching(msg)]);
    }
    expect((await t.req('GET', '/agents?live=false')).body).toEqual([]);
  });

  it('a hand-edited agents.yml with an injected iscsi_server stops the start naming file and line', async () => {
    const dir = tempDir();
    fs.mkdirSync(path.join(dir, 'config'));
    fs.writeFileSync(path.join(dir, 'config/agents.yml'), `agents:\n  st1:\n    base_url: http://10.0.0.11:4840\n    iscsi_server: ${JSON.stringify(EVIL)}\n`);
    await expect(startApp({}, { dir })).rejects.toThrow(/agents\.yml:2: "st1": iscsi_server must be an IPv4 address/);
  });

  itFiles('a stored value that fails its grammar never reaches a boot script: inert script, one audit record', async () => {
    t = await startApp();
    // An agent and a worker disk as a hand edit could leave them (workers.yml is not re-validated
    // field by field): the renderer is the last line of defence.
    fs.writeFileSync(path.join(t.dir, 'config/agents.yml'), 'agents:\n  st1:\n    base_url: http://10.0.0.11:4840\n    iscsi_server: 10.0.0.12\n    tags: [stgt]\n');
    await t.req('POST', '/devices', { mac: MAC });
    await t.req('POST', '/workers', { worker_id: 'w1', mac: MAC });
    const disk = { agent: 'st1', transport: 'iscsi', iqn: 'iqn.2026-07.com.x:w1.ubuntu', filename: 'w1.ubuntu.img', backing: '/d/w1.ubuntu.img', os: 'ubuntu', os_tag: 'abcdefabcdef', source: { type: 'empty', size: '1G' } };
    const writeWorker = (d: object) =>
      fs.writeFileSync(path.join(t.dir, 'state/workers.yml'), `workers:\n  "w1": ${JSON.stringify({ worker_id: 'w1', hostname: 'w1', state: 'ready', disks: [d], default_os: 'ubuntu', boot: {} })}\n`);
    writeWorker(disk);
    // Hand edits are looked for at most every 200/500 ms, off the event loop under load: poll.
    const answer = (want: string) => until(async () => ((await t.req('GET', `/boot-vars?mac=${MAC}&hostname=w1`)).text.includes(want) ? true : null), 5_000);
    await answer('set iscsi-server 10.0.0.12');
    const good = await t.req('GET', `/boot-vars?mac=${MAC}&hostname=w1`);
    expect(good.text).toBe('#!ipxe\n# boot vars for w1\nset base-iqn iqn.2026-07.com.x\nset iscsi-server 10.0.0.12\nset iscsi-sep :::1:\nset menu-default ubuntu\nset menu-timeout 5000\n');

    writeWorker({ ...disk, iqn: `iqn.2026-07.com.x\nchain http://127.0.0.1:6899/evil:w1.ubuntu` });
    await answer('boot vars refused');
    for (let i = 0; i < 3; i++) {
      const r = await t.req('GET', `/boot-vars?mac=${MAC}&hostname=w1`);
      expect(r.status).toBe(200);
      expect(r.text).toBe('#!ipxe\n# boot vars refused: a stored value failed its grammar (see GET /operations)\n');
      expect((await t.req('GET', `/boot-vars?mac=${MAC}&hostname=w1&format=json`)).body).toEqual({});
    }
    const refused = (await t.req('GET', '/operations')).body.entries.filter((e: any) => e.op === 'boot.refused');
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ status: 'failed', worker_id: 'w1', variable: 'base-iqn' });
  });

  it('report fields are stored without control characters, capped; absurd lengths are a 400', async () => {
    t = await startApp();
    const q = new URLSearchParams({
      mac: MAC,
      manufacturer: 'ACME\nINC\r\tLtd',
      product: 'Seat\u0018\u001e One',
      serial: 'SN-\u{1F600}-42\u200b',
      chip: 'x'.repeat(300),
    });
    expect((await t.req('GET', `/devices/report?${q}`)).status).toBe(200);
    const fp = (await t.req('GET', `/devices/${MAC}`)).body.fingerprint;
    expect(fp).toMatchObject({ manufacturer: 'ACME INC Ltd', product: 'Seat One', serial: 'SN- -42' });
    expect(fp.chip).toBe('x'.repeat(128));
    const huge = await t.req('GET', `/devices/report?mac=${MAC}&serial=${'y'.repeat(1025)}`);
    expect([huge.status, huge.body.message]).toEqual([400, 'serial: longer than 1024 characters']);
  });

  it('broadcast, multicast and all-zero MACs are a 400 everywhere', async () => {
    t = await startApp();
    await t.req('POST', '/workers', { worker_id: 'w1' });
    const before = t.snapshot();
    for (const mac of ['ff:ff:ff:ff:ff:ff', '00:00:00:00:00:00', '01:00:5e:00:00:01', '33:33:00:00:00:01']) {
      const rep = await t.req('GET', `/devices/report?mac=${mac}`);
      expect([rep.status, rep.body.message]).toEqual([400, expect.stringMatching(/is not a device MAC/)]);
      const reg = await t.req('POST', '/devices', { mac });
      expect([reg.status, reg.body.message]).toEqual([400, expect.stringMatching(/^mac: must be a unicast device MAC/)]);
      expect((await t.req('POST', `/devices/${mac}/bind?worker_id=w1`)).status).toBe(400);
      expect((await t.req('POST', '/workers', { worker_id: 'w2', mac })).status).toBe(400);
      expect((await t.req('PUT', '/workers/w1/mac', { mac })).status).toBe(400);
      const imp = await t.req('POST', '/devices/import', { entries: [{ mac }] });
      expect(imp.body.failed).toEqual([{ mac, error: expect.stringMatching(/not a device MAC/) }]);
      const batch = await t.req('POST', '/devices/bind/batch', { mode: 'sequential', macs: [mac], worker_ids: ['w1'] });
      expect(batch.body.failed).toEqual([{ mac, worker_id: 'w1', error: expect.stringMatching(/not a device MAC/) }]);
    }
    const after = t.snapshot();
    delete before['state/operations.jsonl'];
    delete after['state/operations.jsonl'];
    expect(after).toEqual(before);
  });

  itFiles('a hand-edited devices.yml with a multicast MAC stops the start naming the line', async () => {
    const dir = tempDir();
    fs.mkdirSync(path.join(dir, 'state'));
    fs.writeFileSync(path.join(dir, 'state/devices.yml'), `devices:\n  "${MAC}": {"state":"pooled"}\n  "01:00:5e:00:00:01": {"state":"pooled"}\n`);
    await expect(startApp({}, { dir })).rejects.toThrow(/devices\.yml:3: "01:00:5e:00:00:01": key is not a device MAC/);
  });
});
