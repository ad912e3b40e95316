import * as fs from 'node:fs';
import * as path from 'node:path';
import { renderAgentSpec, renderControlPlaneSpec } from '../../scripts/openapi';

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
    expect(ops.sort()).toEqual(
      [
        'DELETE /devices/registration-window Devices_closeWindow',
        'DELETE /devices/{mac} Devices_revoke',
        'DELETE /devices/{mac}/bind Devices_unbind',
        'DELETE /devices/{mac}/key Devices_resetKey',
        'DELETE /workers/{worker_id} Workers_remove',
        'GET /boot-vars Boot_bootVars',
        'GET /devices Devices_list',
        'GET /devices/challenge Boot_challenge',
        'GET /devices/registration-window Devices_window',
        'GET /devices/report Devices_report',
        'GET /devices/{mac} Devices_get',
        'GET /healthz Health_health',
        'GET /operations Audit_list',
        'GET /settings/auto-register Settings_get',
        'GET /settings/signature-enforcement Settings_getEnforcement',
        'GET /workers Workers_list',
        'GET /workers/{worker_id} Workers_get',
        'GET /workers/{worker_id}/status Workers_status',
        'POST /devices Devices_register',
        'POST /devices/bind/batch Devices_batch',
        'POST /devices/bind/batch/preview Devices_preview',
        'POST /devices/import Devices_import',
        'POST /devices/registration-window Devices_openWindow',
        'POST /devices/{mac}/bind Devices_bind',
        'POST /workers Workers_create',
        'POST /workers/batch Workers_createBatch',
        'POST /workers/delete/batch Workers_removeBatch',
        'PUT /settings/auto-register Settings_set',
        'PUT /settings/signature-enforcement Settings_setEnforcement',
        'PUT /workers/{worker_id}/default-os Workers_setDefaultOs',
        'PUT /workers/{worker_id}/mac Workers_setMac',
        'GET /agents Agents_list',
        'POST /agents Agents_create',
        'POST /agents/probe Agents_probe',
        'PUT /agents/{agent_id} Agents_update',
        'GET /agents/{agent_id}/luns Agents_luns',
        'POST /agents/{agent_id}/luns/disk Agents_createDisk',
        'POST /agents/{agent_id}/luns/cd Agents_createCd',
        'DELETE /agents/{agent_id}/luns Agents_deleteLun',
        'POST /agents/{agent_id}/luns/scan Agents_scan',
        'GET /masters Agents_masters',
        'POST /workers/{worker_id}/luns/disk Workers_createDisk',
        'POST /workers/luns/disk/batch Workers_createDisks',
        'DELETE /workers/{worker_id}/luns/disk/{os} Workers_deleteDisk',
        'PUT /workers/{worker_id}/default-disk Workers_setDefaultDisk',
        'GET /workers/{worker_id}/credential Credentials_get',
        'PUT /workers/{worker_id}/credential Credentials_set',
        'DELETE /workers/{worker_id}/credential Credentials_revoke',
        'POST /reconcile Reconciler_run',
        'GET /boot-menu Boot_bootMenu',
      ].sort(),
    );
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
    expect(doc.paths['/boot-vars'].get.security).toBeUndefined();
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
        'DELETE /luns',
        'POST /luns/scan',
        'GET /masters',
        'GET /nvme/hosts',
        'PUT /nvme/hosts/{hostnqn}',
        'DELETE /nvme/hosts/{hostnqn}',
      ].sort(),
    );
    expect(doc.components.schemas.CreateDiskDto.required).toEqual(['iqn']);
    expect(doc.components.schemas.NvmeHostDto.properties).not.toHaveProperty('dhchap_key');
  });
});
