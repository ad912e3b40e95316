import * as fs from 'node:fs';
import * as path from 'node:path';
import Ajv from 'ajv';
import { spawnSync } from 'node:child_process';
import { parse } from 'yaml';
import { loadConfig } from '../../src/control-plane/config/app-config';

const root = path.join(__dirname, '../..');
const read = (f: string) => fs.readFileSync(path.join(root, f), 'utf8');

describe('deployment files (no Docker engine here: checked statically)', () => {
  it('compose.yml: control plane with the docker reload strategy and the dnsmasq directory mounted', () => {
    const c = parse(read('docker/compose.yml'));
    const cp = c.services['control-plane'];
    expect(cp.build.dockerfile).toBe('docker/control-plane.Dockerfile');
    expect(fs.existsSync(path.join(root, cp.build.dockerfile))).toBe(true);
    expect(cp.environment.IPXE_CP_DNSMASQ_RELOAD).toBe(`docker:${c.services.dnsmasq.container_name}`);
    expect(cp.volumes).toContain('../dnsmasq:/app/dnsmasq');
    expect(cp.ports).toContain('${IPXE_CP_PORT:-4839}:${IPXE_CP_PORT:-4839}');
    expect(cp.environment.IPXE_CP_PORT).toBe('${IPXE_CP_PORT:-4839}');
    for (const v of c.services.dnsmasq.volumes) {
      const src = v.split(':')[0];
      if (src.startsWith('./')) expect(fs.existsSync(path.join(root, 'docker', src))).toBe(true);
    }
  });

  it('compose.postgres.yml: two control planes on one PostgreSQL behind the balancer, each a node id, the dnsmasq projection from one', () => {
    // merge: compose resolves the `<<: *control-plane` merge keys.
    const c = parse(read('docker/compose.postgres.yml'), { merge: true });
    const cps = ['cp-1', 'cp-2'].map((n) => c.services[n]);
    for (const cp of cps) {
      expect(cp.build.dockerfile).toBe('docker/control-plane.Dockerfile');
      expect(cp.environment.IPXE_CP_STORE).toBe('postgres');
      expect(cp.environment.IPXE_CP_DATABASE_URL).toBe(cps[0].environment.IPXE_CP_DATABASE_URL);
      expect(cp.depends_on.postgres.condition).toBe('service_healthy');
    }
    expect(new Set(cps.map((cp) => cp.environment.IPXE_CP_NODE_ID)).size).toBe(2);
    expect(cps.filter((cp) => cp.environment.IPXE_CP_DNSMASQ_RELOAD)).toHaveLength(1);
    expect(c.services.lb.ports).toEqual(['4839:4839']);
    const haproxy = read('docker/haproxy.cfg');
    for (const n of ['cp-1', 'cp-2']) expect(haproxy).toContain(`server ${n} ${n}:4839 check`);
    expect(haproxy).toContain('option httpchk GET /healthz');
  });

  it('both compose files validate against the Compose Specification and need no file a clone lacks', () => {
    // test/fixtures/compose-spec.json: schema/compose-spec.json of github.com/compose-spec/compose-spec
    // at 170098ba07d9 (2026-06-23), Apache-2.0.
    // Its $schema is draft-07 under an https URL Ajv does not know by that name: the meta-schema is Ajv's own draft-07.
    const { $schema: _meta, ...schema } = JSON.parse(read('test/fixtures/compose-spec.json'));
    const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
    const validate = ajv.compile(schema);
    expect(validate({ services: { x: { imagez: 'debian' } } })).toBe(false); // the schema does refuse what is not Compose
    for (const f of ['docker/compose.yml', 'docker/compose.postgres.yml']) {
      const doc = parse(read(f), { merge: true });
      expect([f, validate(doc) ? null : ajv.errorsText(validate.errors)]).toEqual([f, null]);
      // Debian's docker-compose 1.29 refuses a top-level name; no env_file a clone does not have.
      expect(doc.name).toBeUndefined();
      for (const svc of Object.values<Record<string, unknown>>(doc.services)) expect(svc.env_file).toBeUndefined();
      for (const [svc, def] of Object.entries<Record<string, unknown>>(doc.services)) {
        for (const v of (def.volumes as string[] | undefined) ?? []) {
          const src = v.split(':')[0];
          // Relative sources: shipped files, or the directories the control plane creates at start.
          if (src.startsWith('./')) expect([svc, v, fs.existsSync(path.join(root, 'docker', src))]).toEqual([svc, v, true]);
          if (src.startsWith('../')) expect([svc, v, ['../config', '../state', '../dnsmasq'].includes(src)]).toEqual([svc, v, true]);
        }
      }
    }
    // Every ${VAR} has a default or a message (`:-`, `:?`), so `up` with an empty environment says what is missing.
    for (const f of ['docker/compose.yml', 'docker/compose.postgres.yml']) {
      for (const m of read(f).matchAll(/\$\{([A-Z_]+)([^}]*)\}/g)) expect([f, m[1], /^:[-?]/.test(m[2])]).toEqual([f, m[1], true]);
    }
  });

  it("Debian's docker-compose 1.29 resolves both files as written (config), and names a missing mandatory variable", () => {
    const compose = (file: string, env: Record<string, string>) =>
      spawnSync('docker-compose', ['-p', 'kurrent-check', '-f', path.join(root, file), 'config'], { encoding: 'utf8', env: { PATH: process.env.PATH!, ...env } });
    const one = compose('docker/compose.yml', { IPXE_CP_TOKEN: 't0ken' });
    expect([one.status, one.stderr]).toEqual([0, '']);
    const cp = parse(one.stdout).services['control-plane'];
    expect(cp.environment).toMatchObject({ IPXE_CP_TOKEN: 't0ken', IPXE_CP_PORT: '4839', IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' });
    const ha = compose('docker/compose.postgres.yml', { KURRENT_DB_PASSWORD: 'pw' });
    expect(ha.status).toBe(0);
    const svc = parse(ha.stdout).services;
    expect([svc['cp-1'].environment.IPXE_CP_NODE_ID, svc['cp-2'].environment.IPXE_CP_DATABASE_URL]).toEqual(['cp-1', 'postgres://kurrent:pw@postgres:5432/kurrent']);
    const missing = compose('docker/compose.postgres.yml', {});
    expect([missing.status, missing.stderr]).toEqual([1, expect.stringContaining('set KURRENT_DB_PASSWORD')]);
  });

  it('podman-compose 1.0 (Debian 12) reads and interpolates both files as written, and names a missing mandatory variable', () => {
    // 1.0 has no `config`; `ps` parses the file, resolves every variable, and starts nothing.
    const pc = (file: string, env: Record<string, string>) =>
      spawnSync('podman-compose', ['-p', 'kurrent-check', '-f', path.join(root, file), 'ps'], { encoding: 'utf8', env: { PATH: process.env.PATH!, ...env } });
    expect(pc('docker/compose.yml', { IPXE_CP_TOKEN: 't' }).status).toBe(0);
    expect(pc('docker/compose.postgres.yml', { KURRENT_DB_PASSWORD: 'pw' }).status).toBe(0);
    const missing = pc('docker/compose.postgres.yml', {});
    expect([missing.status, missing.stderr]).toEqual([1, expect.stringContaining('set KURRENT_DB_PASSWORD')]);
  });

  it('the images check health on the port their settings give, with the readiness check the systemd units use', () => {
    for (const [f, args] of [
      ['docker/control-plane.Dockerfile', ['node', 'dist/scripts/wait-healthy.js', '--timeout', '3']],
      ['docker/agent.Dockerfile', ['node', 'dist/scripts/wait-healthy.js', '--agent', '--timeout', '3']],
    ] as const) {
      const hc = /^HEALTHCHECK .*CMD (\[.*\])$/m.exec(read(f));
      expect([f, hc && JSON.parse(hc[1])]).toEqual([f, args]);
      expect(read(f)).not.toMatch(/127\.0\.0\.1:48[34][09]/);
    }
  });

  it('npm start, the Dockerfile and the systemd unit start the app as npm run start:prod does: its environment, node flags and script', () => {
    const pkg = JSON.parse(read('package.json'));
    // npm start builds, then becomes start:prod (exec: a SIGTERM to npm start reaches the server).
    expect(pkg.scripts.start).toBe('npm run build && exec npm run start:prod');
    const [, env, node] = /^exec env ((?:[A-Z_]+=\S+ )+)(node .+)$/.exec(pkg.scripts['start:prod'])!;
    const vars = env.trim().split(' ').sort();
    expect(vars).toEqual(['MALLOC_MMAP_THRESHOLD_=16384', 'MALLOC_TRIM_THRESHOLD_=131072']);
    const docker = read('docker/control-plane.Dockerfile');
    const cmd = /^CMD (\[.*\])$/m.exec(docker)![1];
    expect(node.split(' ')).toEqual(JSON.parse(cmd));
    expect(/^ENV (MALLOC_.*)$/m.exec(docker)![1].split(' ').sort()).toEqual(vars);
    const unit = read('deploy/systemd/kurrent-control-plane.service');
    expect(/^Environment=(MALLOC_.*)$/m.exec(unit)![1].split(' ').sort()).toEqual(vars);
    expect(/^ExecStart=@NODE@ (.*)$/m.exec(unit)![1].split(' ')).toEqual([...node.split(' ').slice(1, -1), '/opt/kurrent/' + node.split(' ').at(-1)]);
  });

  it('control_plane.env.example holds only valid values and every variable the reference names', () => {
    const env = Object.fromEntries(
      read('config/control_plane.env.example')
        .split('\n')
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    for (const v of ['IPXE_CP_TOKEN', 'IPXE_CP_AUTO_REGISTER', 'IPXE_CP_AUTO_BOOT_TIMEOUT', 'IPXE_CP_BOOT_MENU_TIMEOUT']) {
      expect(Object.keys(env)).toContain(v);
    }
    expect(() => loadConfig(env)).not.toThrow();
  });

  it('menu.ipxe offers exactly the fixed items boot.menu_default accepts, plus one item per /boot-menu disk', async () => {
    const { MENU_ITEMS } = await import('../../src/control-plane/workers/menu');
    const menu = read('docker/tftp/menu.ipxe');
    const items = [...menu.matchAll(/^item (?!--)(\S+)/gm)].map((m) => m[1]);
    expect(items.filter((i) => !i.startsWith('$')).sort()).toEqual([...MENU_ITEMS].sort());
    for (const i of items.filter((x) => !x.startsWith('$'))) expect(menu).toContain(`:${i}\n`);
    // The dynamic items: the variables /boot-menu sets, in the loop that reads them.
    expect(items.filter((i) => i.startsWith('$'))).toEqual(['${menu-${i}-id}']);
    expect(menu).toContain('item ${menu-${i}-id} ${menu-${i}-label}\n');
    expect(menu).toContain('set root-path ${menu-${i}-root}\n');
    expect(read('docker/tftp/boot.ipxe.cfg')).toContain('chain --autofree ${controller}/boot-menu?mac=${mac}&hostname=${hostname}${auth} ||\n');
  });

  it('boot.ipxe: Kurrent iPXE goes HTTPS-only with no way back to TFTP/HTTP; stock iPXE keeps TFTP', () => {
    const boot = read('docker/tftp/boot.ipxe');
    expect(boot).toContain('kurrent-keygen && goto secure ||\n');
    const [stock, secure] = boot.split('\n:secure\n');
    expect(stock).toContain('chain boot.ipxe.cfg || shell\n');
    expect(secure).toContain('set controller ${controller-https}\nchain ${controller}/ipxe/boot.ipxe.cfg || goto refused\n');
    // After :secure nothing plain: no TFTP chain, no http://, no shell, no second try.
    expect(secure).not.toMatch(/chain boot\.ipxe\.cfg|http:\/\/|shell|goto secure/);
    expect(secure.match(/^chain /gm)).toHaveLength(1);
    expect(/^set controller-https (https:\/\/\S+)$/m.exec(stock)).not.toBeNull();
    // boot.ipxe.cfg keeps the controller boot.ipxe chose.
    expect(read('docker/tftp/boot.ipxe.cfg')).toMatch(/^isset \$\{controller\} \|\| set controller http:\/\/\S+$/m);
  });
});

describe('agent deployment files', () => {
  it('agent.env.example is a valid agent configuration', async () => {
    const { loadAgentConfig } = await import('../../src/storage-agent/agent-config');
    const env = Object.fromEntries(
      read('config/agent.env.example')
        .split('\n')
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    expect(loadAgentConfig(env)).toMatchObject({ backend: 'stgt', port: 4840, nvmePort: 4421, diskDir: '/srv/iscsi_img' });
  });

  it.each([
    ['IPXE_AGENT_BACKEND', 'zfs'],
    ['IPXE_AGENT_BASE_IQN', 'iqn.2026-07.com.x:suffix'],
    ['IPXE_AGENT_BASE_IQN', 'not-an-iqn'],
    ['IPXE_AGENT_BASE_NQN', 'nqn'],
    ['IPXE_AGENT_PORT', '99999'],
    ['IPXE_AGENT_PORTAL_ADDR', 'localhost'],
    ['IPXE_AGENT_NVME_TLS', 'maybe'],
  ])('agent config rejects %s=%s naming it', async (name, value) => {
    const { loadAgentConfig } = await import('../../src/storage-agent/agent-config');
    expect(() => loadAgentConfig({ [name]: value })).toThrow(name);
  });
});
