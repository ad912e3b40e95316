import * as path from 'node:path';
import { startApp, tempDir, TestApp } from '../helpers/app';
import { KernelNode } from '../../scripts/kernel-node';

/**
 * Kernel feature detection on Debian 12's own 6.1 kernel, built without nvmet DH-HMAC-CHAP and
 * NVMe/TCP TLS: the agent reads that from configfs, reports it, serves no port at all, refuses
 * NVMe disks naming the missing feature (nothing half-created), and the control plane shows the
 * agent as unable to serve NVMe/TCP and never hands out plaintext boot variables.
 */

const TOKEN = 'kn-61-token';
const MAC = '02:00:00:00:61:01';

describe('a 6.1 kernel without nvmet DH-HMAC-CHAP and TLS', () => {
  const dir = tempDir('kurrent-kernel-61-');
  let node: KernelNode;
  let t: TestApp;

  beforeAll(async () => {
    node = new KernelNode({ kernel: '6.1', dir: path.join(dir, 'node'), env: { IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_TOKEN: TOKEN, IPXE_AGENT_LOG_LEVEL: 'warn' } });
    await node.start();
    t = await startApp({ IPXE_CP_TOKEN: 'cp', IPXE_CP_RECONCILE_SECONDS: '0', IPXE_CP_AGENT_PROBE_TIMEOUT_MS: '15000', KN_AGENT_TOKEN: TOKEN }, { dir: path.join(dir, 'cp') });
  }, 300_000);

  afterAll(async () => {
    await t?.close();
    await node?.stop();
  });

  const agent = async (method: string, url: string, body?: unknown) => {
    const r = await fetch(`${node.agentUrl}${url}`, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
    return { status: r.status, body: (await r.json()) as Record<string, any> };
  };

  it('the agent reports what the kernel lacks, read from configfs, and makes no port', async () => {
    expect(node.kernelVersion).toMatch(/^6\.1\./);
    const caps = (await agent('GET', '/capabilities')).body;
    expect(caps).toMatchObject({ backend: 'nvmet', nvme_tls: false });
    expect(caps.kernel).toMatchObject({ release: node.kernelVersion, nvmet_dhchap: false, nvmet_tls: false });
    expect(caps.kernel.missing).toEqual([expect.stringMatching(/^nvmet DH-HMAC-CHAP: kernel 6\.1\.\S+ has no dhchap_key/), expect.stringMatching(/^nvmet TLS: kernel 6\.1\.\S+ has no addr_tsas/)]);
    // What the kernel shows: a host directory without dhchap attributes, a port never configured.
    expect((await node.exec('ls /sys/kernel/config/nvmet/ports/1/')).split(/\s+/)).not.toContain('addr_tsas');
    expect((await node.exec('cat /sys/kernel/config/nvmet/ports/1/addr_trsvcid')).trim()).toBe('');
    expect((await node.exec('ls /sys/kernel/config/nvmet/hosts')).trim()).toBe('');
  });

  it('creating an NVMe disk or host is a 409 naming the missing feature; nothing is created', async () => {
    const d = await agent('POST', '/luns/disk', { iqn: 'nqn.2026-07.com.controller:w1.aaaaaaaaaaaa', size: '16M' });
    expect([d.status, d.body.message]).toEqual([409, expect.stringMatching(/nvmet DH-HMAC-CHAP: kernel 6\.1\.\S+ .*nothing was created/)]);
    const h = await agent('PUT', `/nvme/hosts/${encodeURIComponent('nqn.2026-07.com.controller:host.w1')}`, { dhchap_key: 'DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:', dhchap_hash: 'hmac(sha256)', dhchap_dhgroup: 'ffdhe2048' });
    expect([h.status, h.body.message]).toEqual([409, expect.stringMatching(/missing nvmet DH-HMAC-CHAP/)]);
    expect((await node.exec('ls /sys/kernel/config/nvmet/subsystems /mnt/images')).replace(/\s+/g, ' ').trim()).toBe('/mnt/images: /sys/kernel/config/nvmet/subsystems:');
    expect((await agent('GET', '/luns')).body).toEqual([]);
  });

  it('the control plane shows the agent unable to serve NVMe/TCP, refuses the disk, and /boot-vars never falls back', async () => {
    expect((await t.req('POST', '/agents', { id: 'old', base_url: node.agentUrl, token: '${KN_AGENT_TOKEN}', iscsi_server: '10.0.2.2', role: { disk: true }, tags: ['nvmet'] })).status).toBe(201);
    const live = (await t.req('GET', '/agents?live=true')).body;
    expect(live).toEqual([expect.objectContaining({ id: 'old', health: 'ok', capabilities: expect.objectContaining({ nvme_tls: false, kernel: expect.objectContaining({ missing: expect.arrayContaining([expect.stringMatching(/TLS/)]) }) }) })]);
    await t.req('POST', '/devices', { mac: MAC });
    await t.req('POST', '/workers', { worker_id: 'w1', mac: MAC });
    const d = await t.req('POST', '/workers/w1/luns/disk', { type: 'empty', os: 'ubuntu', os_version: '24.04', size: '16M' });
    expect([d.status, d.body.message]).toEqual([409, expect.stringMatching(/agent old cannot serve disks: nvmet DH-HMAC-CHAP: kernel 6\.1.*nothing was created/)]);
    expect((await t.req('GET', '/workers/w1')).body.disks).toEqual([]);
    expect((await t.req('GET', `/boot-vars?mac=${MAC}&format=json`)).body).not.toHaveProperty('disk_nqn');
    expect((await t.req('GET', `/boot-vars?mac=${MAC}&format=json`)).body).not.toHaveProperty('base_iqn');
  });
});
