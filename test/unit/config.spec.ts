import { loadAgentConfig } from '../../src/storage-agent/agent-config';
import { ConfigError, loadConfig } from '../../src/control-plane/config/app-config';

describe('loadConfig', () => {
  it('has the documented defaults', () => {
    const c = loadConfig({}, '/srv/kurrent');
    expect(c).toMatchObject({
      token: '',
      port: 4839,
      autoRegister: true,
      autoBootTimeoutMs: 1,
      bootMenuTimeoutMs: 5000,
      configDir: '/srv/kurrent/config',
      stateDir: '/srv/kurrent/state',
      dnsmasqDir: '/srv/kurrent/dnsmasq',
      dnsmasqReload: { kind: 'none' },
      dnsmasqWriteMode: 'atomic',
    });
  });

  it('listens on loopback only without a token, on every interface with one, where the operator says when set', () => {
    expect(loadConfig({}).host).toBe('127.0.0.1');
    expect(loadConfig({ IPXE_CP_TOKEN: 't' }).host).toBe('0.0.0.0');
    expect(loadConfig({ IPXE_CP_HOST: '0.0.0.0' }).host).toBe('0.0.0.0');
    expect(loadConfig({ IPXE_CP_TOKEN: 't', IPXE_CP_HOST: '192.168.80.2' }).host).toBe('192.168.80.2');
    expect(loadAgentConfig({}).host).toBe('127.0.0.1');
    expect(loadAgentConfig({ IPXE_AGENT_TOKEN: 't' }).host).toBe('0.0.0.0');
    expect(loadAgentConfig({ IPXE_AGENT_HOST: '0.0.0.0' }).host).toBe('0.0.0.0');
  });

  it('parses every variable', () => {
    const c = loadConfig({
      IPXE_CP_TOKEN: 't',
      IPXE_CP_PORT: '8080',
      IPXE_CP_AUTO_REGISTER: 'false',
      IPXE_CP_AUTO_BOOT_TIMEOUT: '2',
      IPXE_CP_BOOT_MENU_TIMEOUT: '0',
      IPXE_CP_STATE_DIR: '/var/lib/kurrent',
      IPXE_CP_DNSMASQ_RELOAD: 'pidfile:/run/dnsmasq.pid',
      IPXE_CP_DNSMASQ_WRITE_MODE: 'inplace',
    });
    expect(c).toMatchObject({
      token: 't',
      port: 8080,
      autoRegister: false,
      autoBootTimeoutMs: 2,
      bootMenuTimeoutMs: 0,
      stateDir: '/var/lib/kurrent',
      dnsmasqReload: { kind: 'pidfile', path: '/run/dnsmasq.pid' },
      dnsmasqWriteMode: 'inplace',
    });
    expect(loadConfig({})).toMatchObject({ auditRetentionDays: 0, auditCursorHoldMs: 24 * 3600_000, auditSegmentBytes: 64 * 1024 * 1024 });
    expect(loadConfig({ IPXE_CP_AUDIT_RETENTION_DAYS: '90', IPXE_CP_AUDIT_SEGMENT_MB: '8' })).toMatchObject({ auditRetentionDays: 90, auditSegmentBytes: 8 * 1024 * 1024 });
    expect(loadConfig({ IPXE_CP_DNSMASQ_RELOAD: 'docker:ipxe-dnsmasq' }).dnsmasqReload).toEqual({ kind: 'docker', container: 'ipxe-dnsmasq' });
    expect(loadConfig({ IPXE_CP_DNSMASQ_RELOAD: 'command:kill -HUP 1' }).dnsmasqReload).toEqual({ kind: 'command', command: 'kill -HUP 1' });
  });

  it.each([
    ['IPXE_CP_PORT', 'http'],
    ['IPXE_CP_PORT', '70000'],
    ['IPXE_CP_AUTO_REGISTER', 'maybe'],
    ['IPXE_CP_AUTO_BOOT_TIMEOUT', '-1'],
    ['IPXE_CP_BOOT_MENU_TIMEOUT', '5s'],
    ['IPXE_CP_DNSMASQ_RELOAD', 'signal:1'],
    ['IPXE_CP_DNSMASQ_RELOAD', 'docker:'],
    ['IPXE_CP_DNSMASQ_RELOAD', 'docker:a b'],
    ['IPXE_CP_DNSMASQ_RELOAD', 'pidfile:'],
    ['IPXE_CP_DNSMASQ_WRITE_MODE', 'copy'],
    ['IPXE_CP_LOG_LEVEL', 'loud'],
    ['IPXE_CP_AUDIT_RETENTION_DAYS', '30d'],
    ['IPXE_CP_AUDIT_SEGMENT_MB', '0'],
    ['IPXE_CP_AUDIT_CURSOR_HOLD_HOURS', '9000'],
  ])('rejects %s=%s naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });
});

describe('IPXE_CP_WEB_DIR', () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const fs = require('node:fs') as typeof import('node:fs');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const path = require('node:path') as typeof import('node:path');
  const tmp = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'kurrent-web-'));

  it('default web/dist: served when built, null (API only) when not', () => {
    expect(loadConfig({}, tmp).webDir).toBeNull();
    fs.mkdirSync(path.join(tmp, 'web/dist'), { recursive: true });
    fs.writeFileSync(path.join(tmp, 'web/dist/index.html'), '<!doctype html>');
    expect(loadConfig({}, tmp).webDir).toBe(path.join(tmp, 'web/dist'));
  });

  it('named explicitly, it must hold index.html: the start stops naming the variable', () => {
    expect(() => loadConfig({ IPXE_CP_WEB_DIR: 'elsewhere' }, tmp)).toThrow(ConfigError);
    expect(() => loadConfig({ IPXE_CP_WEB_DIR: 'elsewhere' }, tmp)).toThrow(/IPXE_CP_WEB_DIR: .*elsewhere holds no index.html/);
    expect(loadConfig({ IPXE_CP_WEB_DIR: 'web/dist' }, tmp).webDir).toBe(path.join(tmp, 'web/dist'));
  });
});
