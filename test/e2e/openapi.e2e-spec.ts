import * as fs from 'node:fs';
import * as path from 'node:path';
import { SwaggerModule } from '@nestjs/swagger';
import { renderAgentSpec, renderControlPlaneSpec } from '../../scripts/openapi';
import { createApp } from '../../src/control-plane/app.factory';
import { loadConfig } from '../../src/control-plane/config/app-config';
import { tempDir } from '../helpers/app';

describe('OpenAPI document', () => {
  let spec: string;
  beforeAll(async () => {
    spec = await renderControlPlaneSpec();
  });

  it('matches the committed openapi/control-plane.openapi.json (run `npm run openapi` after API changes)', () => {
    const committed = fs.readFileSync(path.join(__dirname, '../../openapi/control-plane.openapi.json'), 'utf8');
    expect(spec).toBe(committed);
  });

  it('documents every route of the reference with stable operationIds and DTO schemas', () => {
    const doc = JSON.parse(spec);
    const ops = Object.entries<any>(doc.paths).flatMap(([p, m]) => Object.entries<any>(m).map(([verb, o]) => `${verb.toUpperCase()} ${p} ${o.operationId}`));
    // operationIds: <verb><Noun>, camelCase, what generated clients call their functions; stable.
    expect(ops.sort()).toEqual(
      [
        'DELETE /agents/{agent_id} deleteAgent',
        'DELETE /agents/{agent_id}/luns deleteAgentLun',
        'DELETE /devices/registration-window closeRegistrationWindow',
        'DELETE /devices/{mac} revokeDevice',
        'DELETE /devices/{mac}/bind unbindDevice',
        'DELETE /devices/{mac}/key resetDeviceKey',
        'DELETE /masters/{name}/versions/{version} deleteMasterVersion',
        'DELETE /workers/{worker_id} deleteWorker',
        'DELETE /workers/{worker_id}/credential revokeWorkerCredential',
        'DELETE /workers/{worker_id}/luns/disk/{os} deleteWorkerDisk',
        'GET /agents listAgents',
        'GET /agents/{agent_id}/luns listAgentLuns',
        'GET /boot-menu getBootMenu',
        'GET /boot-vars getBootVars',
        'GET /boots listBoots',
        'GET /changes waitForChanges',
        'GET /devices listDevices',
        'GET /devices/page listDevicePage',
        'GET /devices/challenge getDeviceChallenge',
        'GET /devices/registration-window getRegistrationWindow',
        'GET /devices/report reportDevice',
        'GET /devices/{mac} getDevice',
        'GET /healthz getHealth',
        'GET /ipxe/{name} getIpxeScript',
        'GET /masters listMasters',
        'GET /metrics getMetrics',
        'GET /operations listOperations',
        'GET /settings/admission getAdmission',
        'GET /settings/auto-register getAutoRegister',
        'GET /settings/boot-policy getBootPolicy',
        'GET /settings/signature-enforcement getSignatureEnforcement',
        'GET /workers listWorkers',
        'GET /workers/{worker_id} getWorker',
        'GET /workers/{worker_id}/credential getWorkerCredential',
        'GET /workers/{worker_id}/status getWorkerStatus',
        'POST /agents createAgent',
        'POST /agents/probe probeAgent',
        'POST /boots/os-up reportOsUp',
        'POST /boots/{mac}/release releaseBootHold',
        'POST /agents/{agent_id}/luns/cd createAgentCd',
        'POST /agents/{agent_id}/luns/disk createAgentDisk',
        'POST /agents/{agent_id}/luns/scan scanAgentLuns',
        'POST /devices registerDevice',
        'POST /devices/bind/batch bindDevicesBatch',
        'POST /devices/bind/batch/preview previewBindDevicesBatch',
        'POST /devices/import importDevices',
        'POST /devices/registration-window openRegistrationWindow',
        'POST /devices/{mac}/bind bindDevice',
        'POST /devices/{mac}/restore restoreDevice',
        'POST /reconcile runReconciler',
        'POST /workers createWorker',
        'POST /workers/batch createWorkersBatch',
        'POST /workers/delete/batch deleteWorkersBatch',
        'POST /workers/luns/disk/batch createWorkerDisksBatch',
        'POST /workers/{worker_id}/luns/disk createWorkerDisk',
        'PUT /agents/{agent_id} updateAgent',
        'PUT /masters/{name}/versions/{version}/note setMasterVersionNote',
        'GET /masters/{name}/versions/{version}/distribution getMasterVersionDistribution',
        'POST /masters/{name}/versions/{version}/distribute distributeMasterVersion',
        'GET /masters/{name}/rollout getMasterRollout',
        'GET /masters/{name}/maintenance getMasterMaintenance',
        'POST /masters/{name}/maintenance startMasterMaintenance',
        'POST /masters/{name}/maintenance/promote promoteMasterMaintenance',
        'DELETE /masters/{name}/maintenance discardMasterMaintenance',
        'POST /masters/{name}/rollout startMasterRollout',
        'POST /masters/{name}/rollout/promote promoteMasterRollout',
        'POST /masters/{name}/rollout/rollback rollbackMasterRollout',
        'POST /workers/{worker_id}/luns/disk/{os_tag}/rebase rebaseWorkerDisk',
        'PUT /settings/auto-register setAutoRegister',
        'PUT /settings/boot-policy setBootPolicy',
        'PUT /settings/signature-enforcement setSignatureEnforcement',
        'PUT /workers/{worker_id}/credential setWorkerCredential',
        'PUT /workers/{worker_id}/default-disk setWorkerDefaultDisk',
        'PUT /workers/{worker_id}/default-os setWorkerDefaultOs',
        'PUT /workers/{worker_id}/luns/disk/{os_tag}/mode setWorkerDiskMode',
        'PUT /workers/{worker_id}/mac setWorkerMac',
      ].sort(),
    );
    for (const id of ops.map((o) => o.split(' ')[2])) expect(id).toMatch(/^[a-z]+[A-Z][A-Za-z]*$/);
    const s = doc.components.schemas;
    expect(s.CreateWorkerDto.required).toEqual(['worker_id']);
    expect(s.CreateWorkerDto.properties.worker_id.pattern).toBeDefined();
    expect(s.BootConfigDto.properties.menu_timeout).toMatchObject({ minimum: 0 });
    expect(s.BootConfigDto.properties.menu_default.enum).toContain('menu-install');
    expect(s.BatchCreateWorkersDto.properties.count).toMatchObject({ minimum: 1, maximum: 100 });
    expect(s.WorkerDto.properties.readiness.enum).toEqual(['ready', 'partial', 'idle']);
    expect(s.ErrorDto.required).toEqual(expect.arrayContaining(['statusCode', 'error', 'message']));
    const bv = doc.paths['/boot-vars'].get;
    expect(Object.keys(bv.responses['200'].content).sort()).toEqual(['application/json', 'text/plain']);
    expect(doc.paths['/workers'].post.responses['409'].content['application/json'].schema.$ref).toBe('#/components/schemas/ErrorDto');
    expect(doc.paths['/workers/batch'].post.responses['422']).toBeDefined();
    expect(doc.paths['/workers'].get.security).toEqual([{ bearer: [] }]);
    // Public routes say so: an empty security list, and the description names each of them.
    const open = Object.entries<any>(doc.paths).flatMap(([p, m]) => Object.entries<any>(m).filter(([, op]) => op.security.length === 0).map(([v]) => `${v.toUpperCase()} ${p}`));
    expect(open.sort()).toEqual(['GET /boot-menu', 'GET /boot-vars', 'GET /devices/challenge', 'GET /devices/report', 'GET /healthz', 'GET /ipxe/{name}', 'POST /boots/os-up']);
    for (const p of open) expect(doc.info.description).toContain(p.slice(4));
    expect(doc.servers).toEqual([expect.objectContaining({ url: '{scheme}://{host}:{port}', variables: expect.objectContaining({ port: { default: '4839' } }) })]);
    expect(doc.info.license).toEqual({ name: 'Apache-2.0', url: 'https://www.apache.org/licenses/LICENSE-2.0' });
  });
});

describe('the document the control plane serves', () => {
  const committed = () => JSON.parse(fs.readFileSync(path.join(__dirname, '../../openapi/control-plane.openapi.json'), 'utf8'));

  /** The app on a scratch tree, with the prebuilt document at `prebuiltSpec`; its createDocument calls counted. */
  async function serve(prebuiltSpec: string) {
    const dir = tempDir('kurrent-prebuilt-');
    const build = jest.spyOn(SwaggerModule, 'createDocument');
    const app = await createApp(loadConfig({ IPXE_CP_LOG_LEVEL: 'silent' }, dir), { quiet: true, prebuiltSpec });
    await app.init();
    await app.getHttpAdapter().getInstance().ready();
    const fastify = app.getHttpAdapter().getInstance();
    const req = (method: 'GET' | 'POST', url: string, payload?: object) => fastify.inject({ method, url, payload });
    // Other apps of this process may build theirs meanwhile: only calls for this one count.
    const builds = () => build.mock.calls.filter((c) => c[0] === app).length;
    return { app, req, builds, done: async () => (build.mockRestore(), await app.close(), fs.rmSync(dir, { recursive: true, force: true })) };
  }

  it('is the one the build wrote beside the bundle: /openapi.json serves it, and nothing is built at run time, a body validation included', async () => {
    const file = path.join(tempDir('kurrent-spec-'), 'control-plane.openapi.json');
    const marked = committed();
    marked.info.title = 'prebuilt by this test';
    fs.writeFileSync(file, JSON.stringify(marked));
    const t = await serve(file);
    try {
      // The first body validation reads the schemas (nullable fields) from the document.
      const n = await t.req('POST', '/workers', { worker_id: 'w1', arch: null });
      expect([n.statusCode, n.json().message]).toEqual([400, 'arch: must not be null']);
      expect((await t.req('GET', '/openapi.json')).json().info.title).toBe('prebuilt by this test');
      expect(t.builds()).toBe(0);
    } finally {
      await t.done();
    }
  });

  it('is built on first use when there is none, or it cannot be read, and is then the committed one', async () => {
    const dir = tempDir('kurrent-spec-');
    const broken = path.join(dir, 'broken.json');
    fs.writeFileSync(broken, '{"openapi": "3.0');
    for (const file of [path.join(dir, 'missing.json'), broken]) {
      const t = await serve(file);
      try {
        expect(t.builds()).toBe(0); // not at start
        expect((await t.req('GET', '/openapi.json')).json()).toEqual(committed());
        expect(t.builds()).toBe(1);
      } finally {
        await t.done();
      }
    }
  });
});

describe('storage agent OpenAPI document', () => {
  it('matches the committed openapi/agent.openapi.json (run `npm run openapi` after API changes)', async () => {
    const spec = await renderAgentSpec();
    expect(spec).toBe(fs.readFileSync(path.join(__dirname, '../../openapi/agent.openapi.json'), 'utf8'));
    const doc = JSON.parse(spec);
    const ops = Object.entries<any>(doc.paths).flatMap(([p, m]) => Object.keys(m).map((verb) => `${verb.toUpperCase()} ${p}`));
    expect(ops.sort()).toEqual(
      [
        'GET /healthz',
        'GET /capabilities',
        'GET /luns',
        'POST /luns/disk',
        'POST /luns/cd',
        'PUT /luns/access',
        'POST /luns/reset',
        'DELETE /luns',
        'POST /luns/scan',
        'GET /masters',
        'DELETE /masters/{name}/versions/{version}',
        'PUT /masters/{name}/versions/{version}/note',
        'POST /masters/{name}/versions',
        'GET /masters/transfers',
        'POST /masters/{name}/transfers',
        'GET /masters/{name}/versions/{version}/extents',
        'GET /masters/{name}/versions/{version}/content',
        'GET /nvme/hosts',
        'GET /sessions',
        'GET /usage',
        'PUT /nvme/hosts/{hostnqn}',
        'DELETE /nvme/hosts/{hostnqn}',
      ].sort(),
    );
    expect(doc.components.schemas.CreateLunDiskDto.required).toEqual(['iqn']);
    expect(doc.components.schemas.NvmeHostDto.properties).not.toHaveProperty('dhchap_key');
    // The sender's token goes in, never out: no answer carries it.
    expect(doc.components.schemas.MasterTransferDto.properties).not.toHaveProperty('source_token');
    expect(Object.keys(doc.paths['/masters/{name}/versions/{version}/content'].get.responses['200'].content)).toEqual(['application/octet-stream']);
  });
});

describe('schema names and what the generator cannot say', () => {
  it('no two classes of src/ share a name (Swagger would document one for the other), and the spec says it', () => {
    const names = new Map<string, string[]>();
    const walk = (d: string): void => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (p.endsWith('.ts')) for (const m of fs.readFileSync(p, 'utf8').matchAll(/^export (?:abstract )?class (\w+)/gm)) names.set(m[1], [...(names.get(m[1]) ?? []), p]);
      }
    };
    walk(path.join(__dirname, '../../src'));
    expect([...names].filter(([, files]) => files.length > 1)).toEqual([]);
  });

  it('identifiers carry their patterns and rules between fields are JSON Schema', () => {
    const doc = JSON.parse(fs.readFileSync(path.join(__dirname, '../../openapi/control-plane.openapi.json'), 'utf8'));
    const s = doc.components.schemas;
    expect(s.DeviceDto.properties.mac.pattern).toBe('^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$');
    expect(s.AgentDto.properties.base_url.pattern).toMatch(/^\^https\?:/);
    expect(s.DiskDto.properties.nqn.pattern).toMatch(/^\^nqn/);
    expect(s.CreateDiskDto.oneOf).toHaveLength(2);
    expect(s.SetCredentialDto.oneOf).toHaveLength(2);
    expect(s.DefaultOsDto.minProperties).toBe(1);
    const mac = doc.paths['/devices/{mac}'].get.parameters.find((p: { name: string }) => p.name === 'mac');
    expect(new RegExp(mac.schema.pattern).test('00-0C-29-B9-8B-2D')).toBe(true);
    expect(doc.paths['/workers/{worker_id}'].get.parameters[0].schema.pattern).toBeDefined();
  });

  it('patterns are ECMA-262 sources, errors are JSON, bodies are closed, the token is no JWT', () => {
    for (const file of ['control-plane.openapi.json', 'agent.openapi.json']) {
      const text = fs.readFileSync(path.join(__dirname, '../../openapi', file), 'utf8');
      const doc = JSON.parse(text);
      expect(text).not.toMatch(/"pattern": "\//);
      expect(text).not.toContain('bearerFormat');
      for (const [p, item] of Object.entries<any>(doc.paths)) {
        for (const [verb, op] of Object.entries<any>(item)) {
          for (const [status, res] of Object.entries<any>(op.responses)) {
            if (Number(status) >= 400) expect([`${verb} ${p} ${status}`, Object.keys(res.content)]).toEqual([`${verb} ${p} ${status}`, ['application/json']]);
          }
          const ref = op.requestBody?.content?.['application/json']?.schema?.$ref;
          if (ref) expect([`${verb} ${p}`, doc.components.schemas[ref.split('/').pop()].additionalProperties]).toEqual([`${verb} ${p}`, false]);
        }
      }
    }
  });
});
