import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { makeFile, startAgent, TestAgent, Tgtd } from '../helpers/agent';

const BASE = 'iqn.2026-07.com.controller';
const sha256 = (file: string) => createHash('sha256').update(fs.readFileSync(file)).digest('hex');
const CONTROL = 3000 + (process.pid % 1000);
const PORTAL = 13000 + (process.pid % 1000);

describe('storage agent on a real tgtd (stgt backend)', () => {
  const tgtd = new Tgtd(CONTROL, PORTAL);
  let a: TestAgent;
  const env = { IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(CONTROL), IPXE_AGENT_TOKEN: 'agent-token', IPXE_AGENT_MASTER_SCAN_SECONDS: '1' };
  const masterData = Buffer.from('KURRENT-MASTER-MBR'.padEnd(512, '.'));

  beforeAll(async () => {
    await tgtd.start();
  });
  afterAll(() => tgtd.stop());
  beforeEach(async () => {
    a = await startAgent(env);
    makeFile(path.join(a.diskDir, '_tpl_ubuntu_2204.img'), 64 << 20, [{ offset: 0, bytes: masterData }, { offset: 32 << 20, bytes: masterData }]);
    makeFile(path.join(a.diskDir, 'Win11_24H2.iso'), 8 << 20, [{ offset: 0, bytes: Buffer.from('CD001') }]);
  });
  afterEach(async () => {
    for (const t of (await a.req('GET', '/luns')).body ?? []) await a.req('DELETE', `/luns?iqn=${t.iqn}`);
    await a.close();
  });

  it('reports honest capabilities, needs the token except on healthz', async () => {
    const caps = (await a.req('GET', '/capabilities')).body;
    expect(caps).toMatchObject({ backend: 'stgt', cd: true, base_iqn: BASE, transport: 'iscsi', empty_disk: 'truncate (sparse)' });
    expect(caps.clone).toMatch(caps.fs_type === 'btrfs' || caps.fs_type === 'xfs' ? /reflink/ : /sparse copy/);
    expect((await a.req('GET', '/healthz', undefined, { authorization: '' })).status).toBe(200);
    expect((await a.req('GET', '/luns', undefined, { authorization: 'Bearer nope' })).status).toBe(401);
  });

  it('creates a disk from a master, an empty disk and a CD, visible in tgtd itself', async () => {
    await new Promise((r) => setTimeout(r, 10));
    const d = await a.req('POST', '/luns/disk', { iqn: `${BASE}:worker-01.ubuntu`, master: '_tpl_ubuntu_2204.img' });
    expect(d.status).toBe(201);
    expect(d.body).toEqual({ iqn: `${BASE}:worker-01.ubuntu`, backing: path.join(a.diskDir, 'worker-01.ubuntu.img'), master_version: 1 });
    const clone = fs.readFileSync(d.body.backing);
    expect(clone.equals(fs.readFileSync(path.join(a.diskDir, '_tpl_ubuntu_2204.img')))).toBe(true);
    expect(fs.statSync(d.body.backing).blocks * 512).toBeLessThan(4 << 20); // holes kept

    const e = await a.req('POST', '/luns/disk', { iqn: `${BASE}:worker-02.debian`, filename: 'custom-02.img', size: '40G' });
    expect(e.status).toBe(201);
    const st = fs.statSync(path.join(a.diskDir, 'custom-02.img'));
    expect(st.size).toBe(40 * 2 ** 30);
    expect(st.blocks).toBe(0);

    const cd = await a.req('POST', '/luns/cd', { iso: 'Win11_24H2.iso', iqn: `${BASE}:worker-01.windows.iso` });
    expect(cd.status).toBe(201);
    const auto = await a.req('POST', '/luns/cd', { iso: 'Win11_24H2.iso' });
    expect(auto.body.message).toBeUndefined();
    expect(auto.body.iqn).toBe(`${BASE}:win11-24h2.iso`);

    const show = tgtd.show();
    expect(show).toContain(`${BASE}:worker-01.ubuntu`);
    expect(show).toContain(path.join(a.diskDir, 'custom-02.img'));
    const cdBlock = show.slice(show.indexOf(`${BASE}:worker-01.windows.iso`));
    expect(cdBlock).toMatch(/Type: cd\/dvd[\s\S]*Readonly: Yes[\s\S]*ACL information:\s+ALL/);

    const list = (await a.req('GET', '/luns')).body;
    expect(list.map((t: any) => [t.iqn, t.cd, t.luns[0].backing])).toEqual(
      expect.arrayContaining([
        [`${BASE}:worker-01.ubuntu`, false, path.join(a.diskDir, 'worker-01.ubuntu.img')],
        [`${BASE}:worker-02.debian`, false, path.join(a.diskDir, 'custom-02.img')],
        [`${BASE}:worker-01.windows.iso`, true, path.join(a.diskDir, 'Win11_24H2.iso')],
      ]),
    );
    expect(list.every((t: any) => Number.isInteger(t.tid))).toBe(true);
    // The master appeared after the agent started: the background scan (1 s here) finds it.
    let masters: unknown[] = [];
    for (let i = 0; i < 40 && masters.length === 0; i++) {
      masters = (await a.req('GET', '/masters')).body;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(masters).toEqual([
      {
        name: '_tpl_ubuntu_2204.img',
        size: 64 << 20,
        mtime: expect.any(Number),
        latest: 1,
        versions: [{ version: 1, size: 64 << 20, allocated: expect.any(Number), sha256: sha256(path.join(a.diskDir, '_tpl_ubuntu_2204.img')), created: expect.any(Number), note: '', origin: 'drop' }],
      },
    ]);
  });

  it('409 for an existing iqn or file; concurrent creates of one IQN: exactly one wins', async () => {
    const body = { iqn: `${BASE}:w1.ubuntu`, size: '1G' };
    const results = await Promise.all(Array.from({ length: 5 }, () => a.req('POST', '/luns/disk', body)));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
    expect((await a.req('POST', '/luns/disk', body)).body.message).toMatch(/exists/);
    const other = await a.req('POST', '/luns/disk', { iqn: `${BASE}:w9.ubuntu`, filename: 'w1.ubuntu.img', size: '1G' });
    expect([other.status, other.body.message]).toEqual([409, 'file exists: w1.ubuntu.img']);
    expect(tgtd.show().match(/w1\.ubuntu/g)).toHaveLength(2); // target name + backing path, once
  });

  it('deletes with and without the file; 404 iqn not found', async () => {
    await a.req('POST', '/luns/disk', { iqn: `${BASE}:w1.ubuntu`, size: '1G' });
    await a.req('POST', '/luns/disk', { iqn: `${BASE}:w2.ubuntu`, size: '1G' });
    expect((await a.req('DELETE', `/luns?iqn=${BASE}:w1.ubuntu`)).body).toEqual({ deleted: `${BASE}:w1.ubuntu`, delete_file: false });
    expect(fs.existsSync(path.join(a.diskDir, 'w1.ubuntu.img'))).toBe(true);
    expect((await a.req('DELETE', `/luns?iqn=${BASE}:w2.ubuntu&delete_file=true`)).body.delete_file).toBe(true);
    expect(fs.existsSync(path.join(a.diskDir, 'w2.ubuntu.img'))).toBe(false);
    expect(tgtd.show()).not.toContain('w2.ubuntu');
    const nf = await a.req('DELETE', `/luns?iqn=${BASE}:w2.ubuntu`);
    expect([nf.status, nf.body.message]).toEqual([404, `iqn not found: ${BASE}:w2.ubuntu`]);
  });

  it('a CD is only an ISO that is no disk and no master; a LUN call never deletes a file another target or a master uses', async () => {
    await a.req('POST', '/luns/disk', { iqn: `${BASE}:w1.ubuntu`, master: '_tpl_ubuntu_2204.img' });
    const disk = path.join(a.diskDir, 'w1.ubuntu.img');
    const master = path.join(a.diskDir, '_tpl_ubuntu_2204.img');
    const refused: [unknown, number, RegExp][] = [
      [{ iso: 'w1.ubuntu.img', iqn: `${BASE}:steal.iso` }, 400, /^iso: must be an \.iso file/],
      [{ iso: '_tpl_ubuntu_2204.img', iqn: `${BASE}:steal2.iso` }, 400, /^iso: must be an \.iso file/],
    ];
    fs.copyFileSync(path.join(a.diskDir, 'Win11_24H2.iso'), path.join(a.diskDir, '_tpl_win.iso'));
    refused.push([{ iso: '_tpl_win.iso', iqn: `${BASE}:steal3.iso` }, 400, /is a master image/]);
    // A disk whose file happens to be called .iso is still a disk.
    expect((await a.req('POST', '/luns/disk', { iqn: `${BASE}:w2.windows`, filename: 'w2-disk.iso', size: '1G' })).status).toBe(201);
    refused.push([{ iso: 'w2-disk.iso', iqn: `${BASE}:steal4.iso` }, 409, new RegExp(`^iso: w2-disk\\.iso is the disk of target ${BASE.replace(/\./g, '\\.')}:w2\\.windows`)]);
    for (const [body, status, msg] of refused) {
      const r = await a.req('POST', '/luns/cd', body);
      expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), status]);
      expect(r.body.message).toMatch(msg);
    }
    expect(tgtd.show()).not.toContain('steal');
    // Two CDs of one ISO: deleting one with its file is refused before anything changes.
    expect((await a.req('POST', '/luns/cd', { iso: 'Win11_24H2.iso', iqn: `${BASE}:w1.windows.iso` })).status).toBe(201);
    expect((await a.req('POST', '/luns/cd', { iso: 'Win11_24H2.iso', iqn: `${BASE}:w3.windows.iso` })).status).toBe(201);
    const shared = await a.req('DELETE', `/luns?iqn=${BASE}:w1.windows.iso&delete_file=true`);
    expect([shared.status, shared.body.message]).toEqual([409, `delete_file: Win11_24H2.iso is also used by target ${BASE}:w3.windows.iso; nothing was deleted`]);
    expect(tgtd.show()).toContain(`${BASE}:w1.windows.iso`);
    expect(fs.existsSync(path.join(a.diskDir, 'Win11_24H2.iso'))).toBe(true);
    expect(fs.existsSync(disk) && fs.existsSync(master)).toBe(true);
    expect((await a.req('DELETE', `/luns?iqn=${BASE}:w1.windows.iso`)).status).toBe(200);
  });

  it('rejects traversal, bad sizes and bad IQNs with nothing written', async () => {
    fs.symlinkSync('/etc/hostname', path.join(a.diskDir, '_tpl_escape.img'));
    const before = fs.readdirSync(a.diskDir).sort();
    const showBefore = tgtd.show();
    const bad: [string, unknown, number, RegExp][] = [
      ['/luns/disk', { iqn: `${BASE}:x`, filename: '../x.img', size: '1G' }, 400, /filename/],
      ['/luns/disk', { iqn: `${BASE}:x`, filename: '/etc/x.img', size: '1G' }, 400, /filename/],
      ['/luns/disk', { iqn: `${BASE}:x`, filename: 'a/b.img', size: '1G' }, 400, /filename/],
      ['/luns/disk', { iqn: `${BASE}:x`, filename: '.hidden.img', size: '1G' }, 400, /filename/],
      ['/luns/disk', { iqn: `${BASE}:x`, filename: 'nul\u0000.img', size: '1G' }, 400, /filename/],
      // A writable disk named like a master would become one at the next scan; names that display as others.
      ['/luns/disk', { iqn: `${BASE}:x`, filename: 'x_tpl_ubuntu.img', size: '1G' }, 400, /^filename: must be a plain file name without _tpl_/],
      ...['gmi.\u202eexe.img', 'a\u0085b.img', 'zero\u200bwidth.img', 'bom\ufeff.img'].map((filename) => ['/luns/disk', { iqn: `${BASE}:x`, filename, size: '1G' }, 400, /^filename: /] as [string, unknown, number, RegExp]),
      ['/luns/cd', { iso: 'Win11\u202eosi.iso' }, 400, /^iso: must be a plain file name/],
      // NQNs and IQNs carry a real month.
      ['/luns/disk', { iqn: `${BASE}:x`, size: '1G', allowed_hosts: ['nqn.2026-13.com.example:h'] }, 400, /^allowed_hosts: /],
      ['/luns/disk', { iqn: `${BASE}:x`, size: '1G', allowed_initiators: ['iqn.2026-00.com.example:h'] }, 400, /^allowed_initiators: /],
      ['/luns/disk', { iqn: `${BASE}:x`, master: '../../etc/passwd' }, 400, /master/],
      ['/luns/disk', { iqn: `${BASE}:x`, master: '_tpl_escape.img' }, 404, /master not found/],
      ['/luns/disk', { iqn: `${BASE}:x`, master: '_tpl_missing.img' }, 404, /master not found/],
      ['/luns/disk', { iqn: `${BASE}:x`, master: '_tpl_ubuntu_2204.img', size: '1G' }, 400, /exactly one/],
      ['/luns/disk', { iqn: `${BASE}:x` }, 400, /exactly one/],
      ...['40X', '-1G', '0', '1', '100T', 'abc', '1.5G', ''].map((size) => ['/luns/disk', { iqn: `${BASE}:x`, size }, 400, /size/] as [string, unknown, number, RegExp]),
      ['/luns/disk', { iqn: 'iqn.2026-07.com.other:x', size: '1G' }, 400, /^iqn base mismatch: /],
      ['/luns/disk', { iqn: `${BASE}:Upper`, size: '1G' }, 400, /iqn/],
      ['/luns/disk', { iqn: `${BASE}:a..b`, size: '1G' }, 400, /iqn/],
      ['/luns/disk', { iqn: `${BASE}:lab_pc.ubuntu`, size: '1G' }, 400, /iqn/],
      ['/luns/disk', { iqn: `${BASE}:x/../y`, size: '1G' }, 400, /iqn/],
      ['/luns/disk', { iqn: `${BASE}:x`, size: '1G', allowed_hosts: ['nqn.2014-08.org.nvmexpress:uuid:1'] }, 400, /allowed_hosts/],
      ['/luns/disk', { iqn: 42, size: '1G' }, 400, /iqn/],
      ['/luns/cd', { iso: '../Win11_24H2.iso' }, 400, /iso/],
      ['/luns/cd', { iso: 'missing.iso' }, 404, /iso not found/],
    ];
    for (const [url, body, status, msg] of bad) {
      const r = await a.req('POST', url, body);
      expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), status]);
      expect(r.body.message).toMatch(msg);
    }
    expect((await a.req('DELETE', `/luns?iqn=iqn.2026-07.com.other:x`)).status).toBe(400);
    expect((await a.req('PUT', '/nvme/hosts/nqn.2026-13.com.example:h', {})).status).toBe(400);
    expect(fs.readdirSync(a.diskDir).sort()).toEqual(before);
    expect(tgtd.show()).toBe(showBefore);
  });

  it('closes a disk to its initiator name and CHAP account: real logins refused and let in, through changes and restarts', async () => {
    const A = 'iqn.2026-07.com.controller:seat-a';
    const B = 'iqn.2026-07.com.controller:seat-b';
    const s1 = { userid: 'w1', secret: 'FirstSecret0123456789abc' };
    const s2 = { userid: 'w1', secret: 'SecondSecret0123456789ab' };
    const d1 = `${BASE}:w1.ubuntu`;
    const d2 = `${BASE}:w1.debian`;
    expect((await a.req('POST', '/luns/disk', { iqn: d1, master: '_tpl_ubuntu_2204.img', allowed_initiators: [A], chap: s1 })).status).toBe(201);
    expect((await a.req('POST', '/luns/disk', { iqn: d2, size: '1G', allowed_initiators: [A], chap: s1 })).status).toBe(201);
    const listed = (await a.req('GET', '/luns')).body.find((t: any) => t.iqn === d1);
    expect(listed).toMatchObject({ allowed_initiators: [A], chap_userid: 'w1', chap_secret_sha256: expect.stringMatching(/^[0-9a-f]{12}$/) });
    expect(JSON.stringify((await a.req('GET', '/luns')).body)).not.toContain(s1.secret);

    expect((await tgtd.login(d1, A, s1)).ok).toBe(true);
    expect((await tgtd.login(d1, B, s1)).ok).toBe(false); // another seat's name, the right secret
    expect((await tgtd.login(d1, A, { userid: 'w1', secret: 'WrongSecret0123456789abc' })).ok).toBe(false);
    expect((await tgtd.login(d1, A)).ok).toBe(false); // no CHAP at all

    // A rotation through one target reaches the user's other target (tgtd's accounts are global).
    const put = await a.req('PUT', '/luns/access', { iqn: d1, allowed_initiators: [A], chap: s2 });
    expect(put.status).toBe(200);
    expect(put.body.chap_secret_sha256).not.toBe(listed.chap_secret_sha256);
    expect((await tgtd.login(d1, A, s1)).ok).toBe(false); // the old secret
    expect((await tgtd.login(d1, A, s2)).ok).toBe(true);
    expect((await tgtd.login(d2, A, s2)).ok).toBe(true);
    expect(tgtd.accounts()).toEqual(['w1']); // the lock account of the swap is gone

    // A renamed seat: the old name is refused, the new one let in.
    expect((await a.req('PUT', '/luns/access', { iqn: d2, allowed_initiators: [B], chap: s2 })).status).toBe(200);
    expect((await tgtd.login(d2, A, s2)).ok).toBe(false);
    expect((await tgtd.login(d2, B, s2)).ok).toBe(true);

    // An agent restarted beside a running tgtd does not know the secrets it set: it sets them again from its manifest.
    await a.close();
    a = await startAgent(env, a.dir);
    expect((await a.req('GET', '/luns')).body.find((t: any) => t.iqn === d1)).toMatchObject({ chap_secret_sha256: put.body.chap_secret_sha256 });
    expect((await tgtd.login(d1, A, s2)).ok).toBe(true);

    // tgtd restarted: the scan rebuilds both targets closed, with their names and the secret.
    await tgtd.stop();
    await tgtd.start();
    expect((await a.req('POST', '/luns/scan')).status).toBe(200);
    expect((await tgtd.login(d1, B, s2)).ok).toBe(false);
    expect((await tgtd.login(d1, A, s2)).ok).toBe(true);
    expect((await tgtd.login(d2, B, s2)).ok).toBe(true);

    // A disk made open (as earlier versions made every stgt disk) is closed in place.
    const open = `${BASE}:w2.ubuntu`;
    expect((await a.req('POST', '/luns/disk', { iqn: open, size: '1G' })).status).toBe(201);
    expect((await tgtd.login(open, B)).ok).toBe(true);
    expect((await a.req('PUT', '/luns/access', { iqn: open, allowed_initiators: [A], chap: { userid: 'w2', secret: 'ThirdSecret0123456789abc' } })).status).toBe(200);
    expect((await tgtd.login(open, B)).ok).toBe(false);
    expect((await tgtd.login(open, A, { userid: 'w2', secret: 'ThirdSecret0123456789abc' })).ok).toBe(true);

    // Two disks of one user made at once: one account, both let in (tgtd's accounts change one at a time).
    const w3 = { userid: 'w3', secret: 'FourthSecret0123456789ab' };
    const both = await Promise.all([`${BASE}:w3.ubuntu`, `${BASE}:w3.debian`].map((iqn) => a.req('POST', '/luns/disk', { iqn, size: '1G', allowed_initiators: [A], chap: w3 })));
    expect(both.map((r) => r.status)).toEqual([201, 201]);
    expect((await tgtd.login(`${BASE}:w3.ubuntu`, A, w3)).ok).toBe(true);
    expect((await tgtd.login(`${BASE}:w3.debian`, A, w3)).ok).toBe(true);
    for (const iqn of [`${BASE}:w3.ubuntu`, `${BASE}:w3.debian`]) expect((await a.req('DELETE', `/luns?iqn=${iqn}`)).status).toBe(200);

    // Deleting a user's last target deletes its account: no secret stays in tgtd.
    expect((await a.req('DELETE', `/luns?iqn=${d1}`)).status).toBe(200);
    expect(tgtd.accounts().sort()).toEqual(['w1', 'w2']);
    expect((await a.req('DELETE', `/luns?iqn=${d2}`)).status).toBe(200);
    expect(tgtd.accounts()).toEqual(['w2']);
    expect((await a.req('PUT', '/luns/access', { iqn: `${BASE}:w1.windows.iso`, allowed_initiators: [A] })).status).toBe(404);
  });

  it('rebuilds targets after a tgtd restart (scan), and loses nothing over an agent restart', async () => {
    await a.req('POST', '/luns/disk', { iqn: `${BASE}:w1.ubuntu`, master: '_tpl_ubuntu_2204.img' });
    await a.req('POST', '/luns/disk', { iqn: `${BASE}:w2.debian`, filename: 'odd-name.img', size: '1G' });
    await a.req('POST', '/luns/cd', { iso: 'Win11_24H2.iso', iqn: `${BASE}:w1.windows.iso` });
    makeFile(path.join(a.diskDir, 'dropped-in.img'), 1 << 20); // a file someone copied in by hand
    const before = (await a.req('GET', '/luns')).body.map((t: any) => [t.iqn, t.cd, t.luns[0].backing]);

    // Agent restart: tgtd still has everything; the start-up scan only adds the dropped-in file.
    await a.close();
    a = await startAgent(env, a.dir);
    const afterRestart = (await a.req('GET', '/luns')).body.map((t: any) => [t.iqn, t.cd, t.luns[0].backing]);
    expect(afterRestart).toEqual(expect.arrayContaining(before));
    expect(afterRestart.map((t: string[]) => t[0])).toContain(`${BASE}:dropped-in`);

    // tgtd restart: every target is gone until the scan.
    await tgtd.stop();
    await tgtd.start();
    expect((await a.req('GET', '/luns')).body).toEqual([]);
    const scan = await a.req('POST', '/luns/scan');
    expect(scan.status).toBe(200);
    expect(scan.body.created).toEqual(
      expect.arrayContaining([
        { iqn: `${BASE}:w1.ubuntu`, cd: false },
        { iqn: `${BASE}:w2.debian`, cd: false },
        { iqn: `${BASE}:w1.windows.iso`, cd: true },
        { iqn: `${BASE}:dropped-in`, cd: false },
      ]),
    );
    expect(scan.body.created.map((c: any) => c.iqn)).not.toContain(`${BASE}:_tpl_ubuntu_2204`);
    const rebuilt = (await a.req('GET', '/luns')).body.map((t: any) => [t.iqn, t.cd, t.luns[0].backing]);
    expect(rebuilt.sort()).toEqual(afterRestart.sort());
    expect((await a.req('POST', '/luns/scan')).body.created).toEqual([]);
  });
});
