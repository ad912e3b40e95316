import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { makeFile, spawnAgent, SpawnedAgent, Tgtd } from '../helpers/agent';
import { launchChromium, SCREENSHOT_DIR } from '../helpers/browser';
import { freePort, macOf, startApp, TestApp, tempDir } from '../helpers/app';
import { createApp } from '../../src/control-plane/app.factory';
import { loadConfig } from '../../src/control-plane/config/app-config';

/**
 * The web UI in headless Chromium against a real control plane (HTTP on loopback) and a real
 * stgt agent on a real tgtd: every action goes through the pages as an operator would click it,
 * and the effects are checked through the API (and /boot-vars) afterwards.
 */

const TOKEN = 'ui-token';

const MASTER = '_tpl_win10.img';

/** Polls fn until it returns a value (15 s at most): for states the page reaches asynchronously. */
async function until<T>(fn: () => Promise<T | null>): Promise<T> {
  const end = Date.now() + 15_000;
  for (;;) {
    const v = await fn();
    if (v !== null) return v;
    if (Date.now() > end) throw new Error('condition not reached in 15 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('web UI (Chromium)', () => {
  const dir = tempDir('kurrent-ui-');
  let t: TestApp;
  let base: string;
  let tgtd: Tgtd;
  let agent: SpawnedAgent;
  let browser: Browser;
  let page: Page;
  const api = async (method: string, url: string, body?: unknown) => {
    const r = await fetch(base + url, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    return { status: r.status, text, body: text.startsWith('{') || text.startsWith('[') ? JSON.parse(text) : undefined, headers: r.headers };
  };
  const shot = (name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}.png`), fullPage: false });
  const go = async (hash: string) => {
    await page.goto(`${base}/ui/#/${hash}`);
    await page.locator('main.content h1').first().waitFor();
  };

  beforeAll(async () => {
    const control = 9000 + (process.pid % 500);
    tgtd = new Tgtd(control, await freePort());
    await tgtd.start();
    const images = path.join(dir, 'images');
    fs.mkdirSync(images, { recursive: true });
    makeFile(path.join(images, MASTER), 8 << 20);
    agent = await spawnAgent({
      IPXE_AGENT_PORT: String(await freePort()),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(control),
      DISK_DIR: images,
      IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state'),
      IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
      IPXE_AGENT_MASTER_SETTLE_SECONDS: '1',
    });
    t = await startApp({ IPXE_CP_TOKEN: TOKEN, IPXE_CP_RECONCILE_SECONDS: '0', IPXE_CP_AGENT_WATCH_MS: '1000' }, { dir: path.join(dir, 'cp') });
    const port = await freePort();
    await t.app.listen(port, '127.0.0.1');
    base = `http://127.0.0.1:${port}`;
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  });

  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await agent?.stop();
    await tgtd?.stop();
  });

  it('/ and /ui redirect to /ui/, which is served with a same-origin CSP', async () => {
    for (const p of ['/', '/ui']) {
      const r = await fetch(base + p, { redirect: 'manual' });
      expect(r.status).toBe(302);
      expect(r.headers.get('location')).toBe('/ui/');
    }
    const r = await fetch(`${base}/ui/`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-security-policy')).toContain("default-src 'self'");
    expect(await r.text()).toContain('<div id="app">');
    // Hashed assets are immutable, index.html is revalidated.
    const asset = /src="(\/ui\/assets\/[^"]+\.js)"/.exec(await (await fetch(`${base}/ui/`)).text())![1];
    expect((await fetch(base + asset)).headers.get('cache-control')).toContain('immutable');
    expect(r.headers.get('cache-control')).toBe('no-cache');
  });

  it('without a build, /ui/ says how to build it and the API is unaffected', async () => {
    const d = tempDir('kurrent-noweb-');
    const cfg = loadConfig({ IPXE_CP_CONFIG_DIR: `${d}/config`, IPXE_CP_STATE_DIR: `${d}/state`, IPXE_CP_DNSMASQ_DIR: `${d}/dnsmasq`, IPXE_CP_LOG_LEVEL: 'silent' }, d);
    expect(cfg.webDir).toBeNull();
    const app = await createApp(cfg, { quiet: true });
    await app.init();
    const f = app.getHttpAdapter().getInstance();
    const ui = await f.inject({ method: 'GET', url: '/ui/' });
    expect([ui.statusCode, ui.json().message]).toEqual([404, expect.stringContaining('npm run build:web')]);
    expect((await f.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    await app.close();
  });

  it('asks for the token, says clearly when it is refused, and signs in with the right one', async () => {
    await page.goto(`${base}/ui/`);
    await page.getByLabel('API token').fill('wrong-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('The control plane refused this token (401)').waitFor();
    await shot('login-refused');
    await page.getByLabel('API token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    // The overview opens first.
    await page.getByRole('heading', { name: 'Overview', exact: true }).waitFor();
    // Kept for this tab only: sessionStorage, not a cookie or localStorage.
    expect(await page.evaluate(() => [(globalThis as any).sessionStorage.getItem('kurrent.token'), (globalThis as any).localStorage.length, (globalThis as any).document.cookie])).toEqual([TOKEN, 0, '']);
  });

  it('Agents: add an agent through probe then confirm; it shows healthy with its capabilities and masters', async () => {
    await go('agents');
    await page.getByRole('button', { name: 'Add agent' }).click();
    await page.getByLabel('base_url').fill(agent.url);
    await page.getByRole('button', { name: 'Probe' }).click();
    await page.getByLabel('probe result').getByText('stgt').waitFor();
    await page.getByLabel('agent id').fill('stgt-01');
    await page.getByRole('button', { name: 'Confirm and add' }).click();
    const row = page.getByRole('row', { name: /stgt-01/ });
    await row.getByText('ok', { exact: true }).waitFor();
    const agents = (await api('GET', '/agents?live=false')).body;
    expect(agents.map((a: { id: string }) => a.id)).toEqual(['stgt-01']);
    await row.getByRole('button', { name: 'LUNs & masters' }).click();
    await page.getByText(MASTER).first().waitFor();
    await shot('agents');
  });

  it('Devices: register (with the API message on bad input), the registration window countdown, revoke asks first', async () => {
    await go('devices');
    await page.getByRole('button', { name: 'Register' }).click();
    await page.getByLabel('mac', { exact: true }).fill('not-a-mac');
    await page.getByRole('button', { name: 'Register', exact: true }).last().click();
    await page.getByText('mac must be a MAC address').first().waitFor();
    expect((await api('GET', '/devices')).body).toEqual([]);
    await page.getByLabel('mac', { exact: true }).fill('52-54-00-AA-00-01');
    await page.getByLabel('serial').fill('SN-UI-1');
    await page.getByRole('button', { name: 'Register', exact: true }).last().click();
    await page.getByRole('row', { name: /52:54:00:aa:00:01/ }).waitFor();

    // The window: TTL and quota in, a ticking countdown and the seats out.
    await page.getByLabel('TTL (min)').fill('5');
    await page.getByLabel('Max devices').fill('3');
    await page.getByRole('button', { name: 'Open', exact: true }).click();
    const countdown = page.locator('.countdown');
    await countdown.waitFor();
    const first = await countdown.textContent();
    expect(first).toMatch(/^[45]:\d\d$/);
    await page.getByText('3 seat(s) left', { exact: false }).waitFor();
    // How new devices get in, said in one place.
    const now = page.getByLabel('admission now');
    await now.getByText('window', { exact: true }).waitFor();
    expect((await api('GET', '/devices/registration-window')).body).toMatchObject({ open: true, max_devices: 3 });
    await page.waitForFunction((f) => (globalThis as any).document.querySelector('.countdown')?.textContent !== f, first);
    await shot('devices');
    await page.getByRole('button', { name: 'Close', exact: true }).click();
    await page.getByText('closed', { exact: true }).first().waitFor();
    expect((await api('GET', '/devices/registration-window')).body.open).toBe(false);
    // After the first window, auto-register still reads on: both cards say what that means now.
    await now.getByText(/auto-register no longer admits keyless devices/).waitFor();
    await page.getByText('since the first registration window it no longer admits keyless devices', { exact: false }).waitFor();

    // Revoke: cancel leaves the device alone, confirm revokes it.
    await api('POST', '/devices', { mac: '52:54:00:aa:00:09' });
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByRole('row', { name: /52:54:00:aa:00:09/ }).click();
    await page.getByRole('button', { name: 'Revoke' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Cancel' }).click();
    expect((await api('GET', '/devices/52:54:00:aa:00:09')).body.state).toBe('pooled');
    await page.getByRole('button', { name: 'Revoke' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Revoke' }).click();
    await page.getByText('52:54:00:aa:00:09 revoked').waitFor();
    expect((await api('GET', '/devices/52:54:00:aa:00:09')).body.state).toBe('revoked');
    // And the way back.
    await page.getByRole('row', { name: /52:54:00:aa:00:09/ }).click();
    await page.getByRole('button', { name: 'Restore' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Restore' }).click();
    await page.getByText('52:54:00:aa:00:09 restored to the pool').waitFor();
    expect((await api('GET', '/devices/52:54:00:aa:00:09')).body.state).toBe('pooled');
  });

  it('create a worker, bind the device, create a disk from a master, set it default: /boot-vars changes', async () => {
    await go('workers');
    await page.getByRole('button', { name: 'Create worker' }).click();
    await page.getByLabel('worker_id').fill('ui-w1');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.getByRole('heading', { name: 'ui-w1' }).waitFor();

    await go('devices');
    await page.getByRole('row', { name: /52:54:00:aa:00:01/ }).click();
    await page.getByLabel('Bind to worker').fill('ui-w1');
    await page.getByRole('button', { name: 'Bind', exact: true }).click();
    await page.getByText('52:54:00:aa:00:01 bound to ui-w1').waitFor();
    expect((await api('GET', '/devices/52:54:00:aa:00:01')).body).toMatchObject({ state: 'bound', bound_worker_id: 'ui-w1' });
    const before = (await api('GET', '/boot-vars?mac=52:54:00:aa:00:01')).text;

    await go('workers/ui-w1');
    const create = page.getByLabel('create disk');
    await create.getByLabel('Master', { exact: true }).selectOption(MASTER);
    await create.getByLabel('OS', { exact: true }).selectOption('windows');
    // Ticked while the worker has no default; untick it to see what the API alone does.
    const makeDefault = create.getByLabel('Make it the default boot disk');
    expect(await makeDefault.isChecked()).toBe(true);
    await makeDefault.uncheck();
    await create.getByRole('button', { name: 'Create disk' }).click();
    const disks = page.getByLabel('disks', { exact: true });
    await disks.getByText(`master ${MASTER}`).waitFor();
    // Which hand-over keeps the disk once the OS runs (docs/KERNEL-STAGE.md).
    await disks.getByText('kernel stage: iBFT from iPXE').waitFor();
    // The live status reads again by itself on changes; Check now asks the agents at once.
    const status = page.getByLabel('live status');
    await status.getByRole('button', { name: 'Check now' }).click();
    await status.getByText('in sync').waitFor();
    // A disk and no default: the page says it will not boot, and why (what /boot-vars answers).
    await page.getByText('will not boot').waitFor();
    await page.getByText('no-default-disk').waitFor();
    await disks.getByRole('button', { name: 'Set default' }).click();
    await disks.getByText('default', { exact: true }).waitFor();
    await page.getByText('Boots its default disk now.').waitFor();
    const w = (await api('GET', '/workers/ui-w1')).body;
    expect(w.disks).toHaveLength(1);
    expect(w.default_disk).toBe(w.disks[0].os_tag);
    const after = (await api('GET', '/boot-vars?mac=52:54:00:aa:00:01')).text;
    // Before: bound, no disk to boot. After: the iSCSI variables of the new default disk.
    expect(before).not.toContain('set iscsi-server');
    expect(after).not.toBe(before);
    expect(after).toContain('set iscsi-server 127.0.0.1');
    expect(after).toContain('set menu-default windows');
    expect(w.disks[0].iqn).toBe(`${after.match(/set base-iqn (\S+)/)![1]}:ui-w1.windows`);
    // Live status: the ledger beside tgtd's real target, in sync.
    await page.getByLabel('live status').getByText('in sync').waitFor();
    await shot('worker-detail');
  });

  it('Overview and boot timelines: a boot seen stage by stage, a boot loop caught and held, released with one click', async () => {
    const pub = async (u: string) => (await fetch(base + u)).text();
    const MAC = '52:54:00:aa:00:01';
    const LOOP = '52:54:00:aa:00:25';
    // ui-w1's machine boots (as iPXE asks: report, vars, menu): its page shows the boot, stage by stage.
    await pub(`/devices/report?mac=${MAC}`);
    expect(await pub(`/boot-vars?mac=${MAC}`)).toContain('set menu-default windows');
    await pub(`/boot-menu?mac=${MAC}`);
    await go('workers/ui-w1');
    const timeline = page.getByLabel('boot timeline');
    await timeline.getByText('vars: iscsi on stgt-01').waitFor();
    await timeline.getByText('in progress').waitFor();
    // A seat whose worker has no disk: each boot is answered the reboot loop; the third makes it a loop, the fourth is held.
    expect((await api('POST', '/devices', { mac: LOOP })).status).toBe(201);
    expect((await api('POST', '/workers', { worker_id: 'ui-w5', mac: LOOP })).status).toBe(201);
    for (let i = 0; i < 4; i++) {
      await pub(`/devices/report?mac=${LOOP}`);
      await pub(`/boot-vars?mac=${LOOP}`);
    }
    expect(await pub(`/boot-vars?mac=${LOOP}`)).toContain('# boot-loop hold');
    await page.goto(`${base}/ui/`);
    await page.getByRole('heading', { name: 'Overview', exact: true }).waitFor();
    const loops = page.getByLabel('boot loops');
    await loops.getByText(LOOP).waitFor();
    await page.getByLabel('why seats will not boot').getByText('boot-loop-hold').waitFor();
    await page.getByLabel('failed and stuck boots').getByText('the worker has no disk (answered menu-default reboot)').first().waitFor();
    await page.getByLabel('boots in the last hour').getByText('held 1').waitFor();
    await page.getByLabel('agents overview').getByText(/used · .* free/).waitFor();
    await shot('overview');
    // The worker page says the same, with its own release button.
    await go('workers/ui-w5');
    await page.getByLabel('boot timeline').getByText('Boot loop:').waitFor();
    await page.getByText('boot-loop-hold').first().waitFor();
    await shot('worker-boot-loop');
    await go('overview');
    await loops.getByRole('button', { name: 'Release hold' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Release' }).click();
    await page.getByText(`${LOOP} released`).waitFor();
    await loops.getByText('No device is looping.').waitFor();
    expect(await pub(`/boot-vars?mac=${LOOP}`)).toContain('set menu-default reboot');
    expect((await api('GET', '/operations?op=device.boot_hold.release')).body.entries).toEqual([expect.objectContaining({ mac: LOOP })]);
  });

  it('Signature enforcement: the confirmation counts the keyless bound devices as they are now, not as at the last refresh', async () => {
    await go('devices');
    const enforce = page.getByRole('checkbox', { name: /answers only signed requests/ });
    await enforce.waitFor();
    const before = (await api('GET', '/settings/signature-enforcement')).body.keyless_bound_devices.length;
    for (let i = 0; i < 3; i++) {
      expect((await api('POST', '/devices', { mac: `52:54:00:aa:00:3${i}` })).status).toBe(201);
      expect((await api('POST', '/workers', { worker_id: `ui-k${i}`, mac: `52:54:00:aa:00:3${i}` })).status).toBe(201);
    }
    await enforce.click();
    const dialog = page.getByRole('alertdialog');
    await dialog.getByText(`${before + 3} bound device(s) have no key and will stop booting`, { exact: false }).waitFor();
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    expect((await api('GET', '/settings/signature-enforcement')).body.enabled).toBe(false);
  });

  it("a worker page's create-disk form makes the first disk the default when asked (ticked by default), and its state stays on its own page", async () => {
    expect((await api('POST', '/workers', { worker_id: 'ui-w3' })).status).toBe(201);
    expect((await api('POST', '/workers', { worker_id: 'ui-w4' })).status).toBe(201);
    await go('workers/ui-w3');
    const create = page.getByLabel('create disk');
    await create.getByLabel('Type', { exact: true }).selectOption('empty');
    await create.getByLabel('Size', { exact: true }).fill('64M');
    await create.getByLabel('OS', { exact: true }).selectOption('ubuntu');
    expect(await create.getByLabel('Make it the default boot disk').isChecked()).toBe(true);
    await create.getByRole('button', { name: 'Create disk' }).click();
    await page.getByText('ubuntu disk created and made the default').waitFor();
    const w = (await api('GET', '/workers/ui-w3')).body;
    expect(w.default_disk).toBe(w.disks[0].os_tag);
    // Another worker's page starts with its own empty form.
    await create.getByLabel('Size', { exact: true }).fill('99G');
    await go('workers/ui-w4');
    await page.getByRole('heading', { name: 'ui-w4' }).waitFor();
    expect(await page.getByLabel('create disk').getByLabel('Type', { exact: true }).inputValue()).toBe('master');
  });

  it('Batch disks: the plan is previewed per worker with its agent, then executed with per-row results', async () => {
    await go('workers');
    await page.getByRole('button', { name: 'Create batch' }).click();
    await page.getByLabel('count').fill('3');
    await page.getByLabel('name prefix').fill('ui-b');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.getByLabel('batch result').getByText('3', { exact: true }).waitFor();
    await shot('workers');

    await go('batch-disks');
    for (const id of ['ui-b01', 'ui-b02', 'ui-b03']) await page.getByRole('checkbox', { name: new RegExp(`^${id}\\b`) }).check();
    await page.getByLabel('disk', { exact: true }).getByLabel('Master', { exact: true }).selectOption(MASTER);
    await page.getByLabel('disk', { exact: true }).getByLabel('OS', { exact: true }).selectOption('ubuntu');
    await page.getByRole('button', { name: 'Preview plan' }).click();
    const plan = page.getByLabel('plan', { exact: true });
    await plan.getByText('stgt-01: 3').waitFor();
    expect(await plan.locator('tbody tr').count()).toBe(3);
    // Nothing was created by the preview.
    expect((await api('GET', '/workers/ui-b01')).body.disks).toEqual([]);
    // Skip one row: the operator's override wins over the plan.
    await plan.getByLabel('agent for ui-b03').selectOption('');
    await plan.getByRole('button', { name: 'Execute 2 row(s)' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Execute' }).click();
    await plan.getByText('2 / 2').waitFor();
    await plan.locator('tr[data-worker="ui-b01"]').getByText('ok', { exact: true }).waitFor();
    await plan.locator('tr[data-worker="ui-b02"]').getByText('ok', { exact: true }).waitFor();
    // The plan ran: its results stay, and it cannot be run a second time over them.
    expect(await plan.getByRole('button', { name: 'Executed: preview again for another run' }).isDisabled()).toBe(true);
    await shot('batch-disks');
    for (const id of ['ui-b01', 'ui-b02']) expect((await api('GET', `/workers/${id}`)).body.disks.map((d: { os: string; agent: string }) => [d.os, d.agent])).toEqual([['ubuntu', 'stgt-01']]);
    expect((await api('GET', '/workers/ui-b03')).body.disks).toEqual([]);
  });

  it('Masters: each version with its agents and disks; a note edited in place; a version no disk holds deleted after a confirmation', async () => {
    // A second drop of the master (written aside, renamed over, as an operator copies one in) becomes version 2.
    const images = path.join(dir, 'images');
    makeFile(path.join(images, '.incoming'), 8 << 20, [{ offset: 0, bytes: Buffer.from('KURRENT-V2') }]);
    fs.renameSync(path.join(images, '.incoming'), path.join(images, MASTER));
    const catalog = async () => ((await api('GET', '/masters')).body.catalog as { name: string; versions: { version: number; disks: number; note: string }[] }[]).find((m) => m.name === MASTER);
    await until(async () => ((await catalog())?.versions.some((v) => v.version === 2) ? true : null));
    await go('masters');
    const table = page.getByRole('table', { name: `versions of ${MASTER}` });
    const v1 = table.getByRole('row', { name: /^v1 / });
    const v2 = table.getByRole('row', { name: /^v2 / });
    await v2.waitFor();
    // Disks made before hold version 1: its Delete is disabled and says why.
    const disksOnV1 = (await catalog())!.versions.find((v) => v.version === 1)!.disks;
    expect(disksOnV1).toBeGreaterThan(0);
    expect(await v1.getByRole('button', { name: 'Delete' }).isDisabled()).toBe(true);
    expect(await v1.getByRole('button', { name: 'Delete' }).getAttribute('title')).toBe(`${disksOnV1} disks hold this version`);
    await v2.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('note').fill('new drivers');
    await page.getByRole('button', { name: 'Save' }).click();
    await v2.getByText('new drivers').waitFor();
    expect((await catalog())!.versions.find((v) => v.version === 2)!.note).toBe('new drivers');
    await shot('masters');
    await v2.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Cancel' }).click();
    expect((await catalog())!.versions.map((v) => v.version)).toEqual([1, 2]);
    // The file in DISK_DIR is version 2 now: the agent refuses, and the page says why.
    await v2.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Delete version' }).click();
    await page.getByText('remove or replace that file first', { exact: false }).first().waitFor();
    // Once the file is replaced (version 3), version 2 goes.
    makeFile(path.join(images, '.incoming'), 8 << 20, [{ offset: 0, bytes: Buffer.from('KURRENT-V3') }]);
    fs.renameSync(path.join(images, '.incoming'), path.join(images, MASTER));
    await until(async () => ((await catalog())?.versions.some((v) => v.version === 3) ? true : null));
    await page.getByRole('button', { name: 'Refresh' }).click();
    await v2.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Delete version' }).click();
    await page.getByText(`Version 2 of ${MASTER} deleted on stgt-01`).waitFor();
    expect((await catalog())!.versions.map((v) => v.version)).toEqual([1, 3]);
    await v2.waitFor({ state: 'detached' });

    // A rollout of version 3: one canary worker first, then promoted to all, then rolled back.
    const panel = page.getByLabel(`rollout of ${MASTER}`);
    await panel.getByText('No rollout').waitFor();
    await panel.getByLabel('Roll out version').selectOption('3');
    await panel.getByLabel('Canary workers').fill('ui-b01');
    await panel.getByRole('button', { name: 'Start rollout' }).click();
    await panel.getByText('canary: ui-b01').waitFor();
    const r1 = (await api('GET', `/masters/${MASTER}/rollout`)).body;
    expect([r1.version, r1.phase, r1.canary]).toEqual([3, 'canary', ['ui-b01']]);
    const diskRows = panel.getByRole('table', { name: `disks of ${MASTER}` });
    await diskRows.getByRole('row', { name: /ui-b01 \(canary\).*needs rebase/ }).waitFor();
    await diskRows.getByRole('row', { name: /ui-b02 .*not reached/ }).waitFor();
    await shot('masters-rollout');
    await panel.getByRole('button', { name: 'Promote to all disks' }).click();
    // The phase badge itself: a substring match would find the button just clicked, before the promote is answered.
    await panel.getByText('all disks', { exact: true }).waitFor();
    expect((await api('GET', `/masters/${MASTER}/rollout`)).body.phase).toBe('all');
    await panel.getByRole('button', { name: 'Roll back to v1' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Roll back' }).click();
    await panel.getByText('Rollback to v1').waitFor();
    expect((await api('GET', `/masters/${MASTER}/rollout`)).body).toMatchObject({ version: 1, previous: 3, rollback: true, phase: 'all' });
    // Maintenance: a worker gets the writable clone; discarded after a confirmation.
    const mp = page.getByLabel(`maintenance of ${MASTER}`);
    await mp.getByLabel('Maintenance worker').fill('ui-b03');
    await mp.getByLabel('as its disk').selectOption('debian');
    await mp.getByRole('button', { name: 'Start maintenance' }).click();
    await mp.getByText('in maintenance').waitFor();
    expect((await api('GET', `/masters/${MASTER}/maintenance`)).body).toMatchObject({ worker_id: 'ui-b03', os: 'debian', from_version: 3 });
    await shot('masters-maintenance');
    await mp.getByRole('button', { name: 'Discard' }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Discard' }).click();
    await mp.getByRole('button', { name: 'Start maintenance' }).waitFor();
    expect((await api('GET', `/masters/${MASTER}/maintenance`)).status).toBe(404);
    // A persistent disk follows only by a rebase, which asks first; here DISK_DIR cannot reflink, and the page says so.
    await go('workers/ui-b01');
    await page.getByRole('button', { name: 'Rebase…' }).first().click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Discard and rebase' }).click();
    await page.getByText('cannot reflink', { exact: false }).first().waitFor();
  });

  it('Masters: a version missing on an agent that holds the master is distributed from the page, agent to agent', async () => {
    // A second agent with the same version 1 (the same bytes dropped on it) lacks version 3.
    const control2 = 11100 + (process.pid % 500);
    const tgtd2 = new Tgtd(control2, await freePort());
    await tgtd2.start();
    const images2 = path.join(dir, 'images-2');
    makeFile(path.join(images2, MASTER), 8 << 20);
    const port2 = await freePort();
    const agent2 = await spawnAgent({
      IPXE_AGENT_PORT: String(port2),
      IPXE_AGENT_BACKEND: 'stgt',
      IPXE_AGENT_TGT_CONTROL_PORT: String(control2),
      IPXE_AGENT_TOKEN: 'second-agent-token',
      DISK_DIR: images2,
      IPXE_AGENT_STATE_DIR: path.join(dir, 'agent-state-2'),
      IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
      IPXE_AGENT_MASTER_SETTLE_SECONDS: '1',
    });
    try {
      expect((await api('POST', '/agents', { id: 'stgt-02', base_url: `http://127.0.0.1:${port2}`, token: 'second-agent-token', iscsi_server: '127.0.0.1', role: { disk: true } })).status).toBe(201);
      const versions = async () => ((await api('GET', '/masters')).body.catalog.find((m: { name: string }) => m.name === MASTER)?.versions ?? []) as { version: number; agents: string[] }[];
      await until(async () => ((await versions()).find((v) => v.version === 1)?.agents.length === 2 ? true : null));
      await go('masters');
      const v3 = page.getByRole('table', { name: `versions of ${MASTER}` }).getByRole('row', { name: /^v3 / });
      const cell = v3.getByLabel('distribution of v3');
      await cell.getByText('stgt-02 missing').waitFor();
      await shot('masters-distribution');
      await cell.getByRole('button', { name: 'Distribute' }).click();
      // Once it is there the row lists both agents and the marker goes.
      await v3.getByText('stgt-01, stgt-02').waitFor();
      await cell.waitFor({ state: 'detached' });
      expect((await api('GET', `/masters/${MASTER}/versions/3/distribution`)).body).toMatchObject({ complete: true, agents: [{ agent: 'stgt-01', state: 'present' }, { agent: 'stgt-02', state: 'present' }] });
      expect((await api('GET', '/operations?op=master.version.distribute')).body.entries[0]).toMatchObject({ name: MASTER, version: 3, transfers: ['stgt-02<-stgt-01'] });
    } finally {
      await api('DELETE', '/agents/stgt-02');
      await agent2.stop();
      await tgtd2.stop();
    }
  });

  it('Batch bind: a fingerprint mismatch is not counted as ok, the confirmation names it, and a run happens once', async () => {
    for (const [mac, serial] of [
      ['52:54:00:bb:00:01', 'SN-B1'],
      ['52:54:00:bb:00:02', 'SN-B2'],
    ]) {
      expect((await api('POST', '/devices', { mac, serial })).status).toBe(201);
    }
    for (const id of ['ui-bb1', 'ui-bb2']) expect((await api('POST', '/workers', { worker_id: id })).status).toBe(201);
    await go('devices');
    await page.getByRole('button', { name: 'Batch bind' }).click();
    await page.locator('textarea[name="manifest"]').fill('52:54:00:bb:00:01,ui-bb1,SN-B1\n52:54:00:bb:00:02,ui-bb2,SN-WRONG\n');
    await page.getByRole('button', { name: 'Preview 2 pair(s)' }).click();
    const preview = page.getByLabel('batch preview');
    await preview.getByText('fingerprint mismatch(es)', { exact: false }).waitFor();
    expect((await preview.locator('p').first().textContent())?.replace(/\s+/g, ' ')).toMatch(/^2 pairs: 1 ok · 1 fingerprint mismatch\(es\) · 0 conflicts · 0 not found/);
    await page.getByRole('button', { name: 'Execute' }).click();
    const dialog = page.getByRole('alertdialog');
    await dialog.getByText('1 of them with a fingerprint that differs from the manifest', { exact: false }).waitFor();
    await dialog.getByRole('button', { name: 'Bind' }).click();
    await page.getByLabel('batch result').waitFor();
    expect((await api('GET', '/devices/52:54:00:bb:00:02')).body.bound_worker_id).toBe('ui-bb2');
    expect(await page.getByRole('button', { name: 'Execute' }).isDisabled()).toBe(true);
  });

  it('Operations: server-side filters and a live tail that shows a new operation without reloading', async () => {
    await go('operations');
    await page.getByLabel('op', { exact: true }).fill('device.*');
    await page.getByRole('button', { name: 'Apply' }).click();
    const table = page.getByRole('table', { name: 'operations' });
    // The filtered page replaces the unfiltered one: every row shown is a device.* operation.
    await table.getByText('device.bind').first().waitFor();
    const ops = await until(async () => {
      const o = await table.locator('tbody td:nth-child(3)').allTextContents();
      return o.length > 0 && o.every((x) => x.startsWith('device.')) ? o : null;
    });
    expect(ops).toEqual(expect.arrayContaining(['device.register', 'device.bind', 'device.revoke']));
    await api('POST', '/devices', { mac: '52:54:00:aa:00:77' });
    await table.getByText('52:54:00:aa:00:77').waitFor({ timeout: 15_000 });
    await shot('operations');
  });

  it('Devices with 100,000 in the pool: pages and search come from the server, a windowed table, keyboard works (timings printed)', async () => {
    for (let k = 0; k < 10; k++) {
      const entries = Array.from({ length: 10_000 }, (_, i) => ({ mac: macOf(0x10000 + k * 10_000 + i), serial: `BULK-${k * 10_000 + i}` }));
      const r = await api('POST', '/devices/import', { entries });
      expect(r.body.created).toHaveLength(10_000);
    }
    const all = (await api('GET', '/devices/page?limit=1')).body.counts.all as number;
    expect(all).toBeGreaterThan(100_000);
    const shown = (n: number, of: number) => page.getByTestId('devices-shown').getByText(`${n.toLocaleString('en-US')} shown of ${of.toLocaleString('en-US')}`, { exact: true });
    // Usable: from the navigation to the first page of rows and the pool's counts on screen.
    await go('overview');
    const t0 = Date.now();
    await page.goto(`${base}/ui/#/devices`);
    await shown(200, all).waitFor();
    await page.getByText(`${all.toLocaleString('en-US')} devices`, { exact: false }).waitFor();
    const usableMs = Date.now() - t0;
    const inDom = await page.locator('.vrow').count();
    expect(inDom).toBeGreaterThan(5);
    expect(inDom).toBeLessThan(80);
    // The end of the page, then the next one.
    await page.locator('.vbody').evaluate((el) => (el.scrollTop = el.scrollHeight));
    const first = (await api('GET', '/devices/page?limit=400')).body.items as { mac: string }[];
    await page.getByRole('row', { name: new RegExp(first[199].mac) }).waitFor();
    await page.getByRole('button', { name: 'More', exact: true }).click();
    await shown(400, all).waitFor();
    await page.locator('.vbody').evaluate((el) => (el.scrollTop = el.scrollHeight));
    await page.getByRole('row', { name: new RegExp(first[399].mac) }).waitFor();
    expect(await page.locator('.vrow').count()).toBeLessThan(80);
    // Search: from the last key to the one matching row, timed inside the page (the input event to
    // the DOM change that shows it), so neither Playwright's polling nor this process's event loop
    // (the control plane runs in it) is counted.
    const searchMs = await page.evaluate(
      () =>
        new Promise<number>((resolve, reject) => {
          // This runs in the page (this project's TypeScript has no DOM types).
          const w = globalThis as unknown as { document: { querySelector(s: string): { value: string; textContent: string | null; dispatchEvent(e: unknown): void } }; MutationObserver: new (cb: () => void) => { observe(el: unknown, o: object): void; disconnect(): void }; Event: new (type: string, o: object) => unknown };
          const input = w.document.querySelector('input[name="q"]');
          const shownEl = w.document.querySelector('[data-testid="devices-shown"]');
          const obs = new w.MutationObserver(() => {
            if (shownEl.textContent?.trim() !== '1 shown of 1') return;
            obs.disconnect();
            resolve(performance.now() - t0);
          });
          obs.observe(shownEl, { subtree: true, childList: true, characterData: true });
          setTimeout(() => reject(new Error(`no single match on screen: ${shownEl.textContent}`)), 10_000);
          input.value = 'BULK-94242';
          const t0 = performance.now();
          input.dispatchEvent(new w.Event('input', { bubbles: true }));
        }),
    );
    await shown(1, 1).waitFor();
    await page.getByRole('row', { name: new RegExp(macOf(0x10000 + 94242)) }).waitFor();
    // A MAC in another spelling finds it too.
    await page.getByLabel('Search').fill(macOf(0x10000 + 94242).replace(/:/g, '').toUpperCase());
    await page.getByRole('row', { name: new RegExp(macOf(0x10000 + 94242)) }).waitFor();
    // Keyboard: focus the row, Enter opens its panel.
    await page.locator('.vrow').first().focus();
    await page.keyboard.press('Enter');
    await page.getByRole('region', { name: `Device ${macOf(0x10000 + 94242)}` }).waitFor();
    // Printed, not asserted (a shared machine's timings are no pass/fail): issue 27 asks < 2 s and < 300 ms.
    console.log(`Devices page with ${all.toLocaleString('en-US')} devices in Chromium: usable in ${usableMs} ms (goal < 2,000), a search answered on screen in ${Math.round(searchMs)} ms (goal < 300, 150 ms of it the typing pause)`);
  }, 120_000);

  it('is usable on a tablet: navigation moves on top, nothing overflows sideways', async () => {
    const tablet = await browser.newPage({ viewport: { width: 820, height: 1180 }, isMobile: true, hasTouch: true });
    await tablet.goto(`${base}/ui/`);
    await tablet.evaluate((tok) => (globalThis as any).sessionStorage.setItem('kurrent.token', tok), TOKEN);
    await tablet.goto(`${base}/ui/#/workers`);
    await tablet.reload();
    await tablet.getByRole('heading', { name: 'Workers' }).waitFor();
    const nav = await tablet.locator('nav.side').boundingBox();
    const main = await tablet.locator('main.content').boundingBox();
    expect(nav!.y + nav!.height).toBeLessThanOrEqual(main!.y + 1);
    expect(nav!.height).toBeLessThan(120);
    expect(await tablet.evaluate(() => (globalThis as any).document.documentElement.scrollWidth <= (globalThis as any).innerWidth + 1)).toBe(true);
    await tablet.screenshot({ path: path.join(SCREENSHOT_DIR, 'workers-tablet.png') });
    // Every button stays inside its card, on the pages with row buttons.
    const outside = () =>
      tablet.evaluate(() =>
        [...(globalThis as any).document.querySelectorAll('main button')]
          .filter((b: any) => {
            const r = b.getBoundingClientRect();
            if (!r.width) return false; // not shown
            const box = (b.closest('.card, .page-head, table') ?? b.closest('main')).getBoundingClientRect();
            return r.right > Math.min(box.right, (globalThis as any).innerWidth) + 1;
          })
          .map((b: any) => b.textContent),
      );
    for (const [hash, ready] of [
      ['workers/ui-w1', 'Clear default'],
      ['agents', 'Drain'],
    ]) {
      await tablet.goto(`${base}/ui/#/${hash}`);
      await tablet.getByRole('button', { name: ready, exact: true }).first().waitFor();
      expect([hash, await outside()]).toEqual([hash, []]);
      expect(await tablet.evaluate(() => (globalThis as any).document.documentElement.scrollWidth <= (globalThis as any).innerWidth + 1)).toBe(true);
    }
    await tablet.screenshot({ path: path.join(SCREENSHOT_DIR, 'agents-tablet.png') });
    // The overview: its cards stack, nothing sideways.
    await tablet.goto(`${base}/ui/#/overview`);
    await tablet.getByRole('heading', { name: 'Overview', exact: true }).waitFor();
    await tablet.getByLabel('boot loops').getByText('No device is looping.').waitFor();
    expect(await outside()).toEqual([]);
    expect(await tablet.evaluate(() => (globalThis as any).document.documentElement.scrollWidth <= (globalThis as any).innerWidth + 1)).toBe(true);
    await tablet.screenshot({ path: path.join(SCREENSHOT_DIR, 'overview-tablet.png') });
    // Operations: the details column keeps a readable width (words are not split every few characters).
    await tablet.goto(`${base}/ui/#/operations`);
    const details = tablet.locator('td.details').first();
    await details.waitFor();
    expect((await details.boundingBox())!.width).toBeGreaterThanOrEqual(200);
    await tablet.screenshot({ path: path.join(SCREENSHOT_DIR, 'operations-tablet.png') });
    await tablet.close();
  });

  // Last: it stops the agent.
  it('pages update by themselves from the change feed: a worker made elsewhere appears after a /changes answer, a dead agent shows without Refresh', async () => {
    await go('workers');
    await page.getByRole('status', { name: 'live updates' }).getByText('Live', { exact: true }).waitFor();
    // The read that shows the new worker follows a /changes answer that named the ledger: pushed, not a timer.
    const told = page.waitForResponse(async (r) => r.url().includes('/changes?') && ((await r.json().catch(() => ({}))).topics ?? []).includes('ledger'), { timeout: 15_000 });
    expect((await api('POST', '/workers', { worker_id: 'pushed-w' })).status).toBe(201);
    await told;
    await page.getByRole('link', { name: 'pushed-w' }).waitFor({ timeout: 15_000 });

    // The overview shows each agent's disk use and targets (agent GET /usage), then its death.
    await go('overview');
    const card = page.getByLabel('agents overview');
    await card.getByText(/used · .* free/).waitFor();
    await card.getByText(/\d+ disks? · \d+ logged in/).waitFor();
    expect(await card.locator('meter').count()).toBe(1);
    await agent.stop();
    await card.getByText('unreachable').waitFor({ timeout: 15_000 });
    await page.getByLabel('seats').getByText('agent-down').waitFor({ timeout: 15_000 });
  });
});
