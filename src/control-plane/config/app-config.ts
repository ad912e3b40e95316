import { ConfigError } from '../../shared/config-error';
import { BASE_NQN } from '../../shared/grammars';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** How dnsmasq is told to re-read dhcp-hosts.conf after a binding change. */
export type DnsmasqReload =
  | { kind: 'none' }
  | { kind: 'pidfile'; path: string }
  | { kind: 'docker'; container: string }
  | { kind: 'command'; command: string };

/**
 * Typed, validated configuration. Built once at boot from the environment
 * (`loadConfig`); nothing else in the app reads process.env.
 */
export class AppConfig {
  /** Bearer token; empty = auth disabled (reference 1.3). */
  token!: string;
  host!: string;
  port!: number;
  /** Start-up default of the auto-register switch (state/settings.json wins). */
  autoRegister!: boolean;
  /** Menu timeout (ms) of the reboot loop. */
  autoBootTimeoutMs!: number;
  /** Menu timeout (ms) when a default boot is configured. */
  bootMenuTimeoutMs!: number;
  configDir!: string;
  stateDir!: string;
  dnsmasqDir!: string;
  /** The iPXE scripts GET /ipxe/{name} serves (boot.ipxe.cfg, menu.ipxe): the shipped docker/tftp by default. */
  ipxeScriptsDir!: string;
  /** Where devices, workers, settings, credentials and the audit live: files (default) or PostgreSQL. */
  store!: 'file' | 'postgres';
  /** IPXE_CP_DATABASE_URL (postgres://...), required with IPXE_CP_STORE=postgres; never logged. */
  databaseUrl!: string;
  /**
   * Bound of every wait on PostgreSQL (connect, a query's answer, a lock, a statement): past it a
   * write answers 503 instead of hanging with the write lock held (IPXE_CP_DATABASE_TIMEOUT_MS).
   */
  databaseTimeoutMs!: number;
  /**
   * PostgreSQL: how often a control plane checks the database for changes it was not notified of
   * (a half-open LISTEN connection), IPXE_CP_SYNC_MS; and the staleness past which /healthz
   * fails, IPXE_CP_STALENESS_MAX_MS (default 5 x the period, at least a database timeout more).
   */
  syncMs!: number;
  stalenessMaxMs!: number;
  /** IPXE_CP_RECONCILER=false: this process never reconciles (no lease, no passes; maintenance runs). */
  reconciler!: boolean;
  /** How often a control plane without the reconciler lease tries to take it (PostgreSQL store). */
  leaseSeconds!: number;
  /** This control plane's name among several (IPXE_CP_NODE_ID; default host:pid): commit origins, lease holder. */
  nodeId!: string;
  /** The built web UI (`npm run build:web` -> web/dist) served at /ui; null when it is not built. */
  webDir!: string | null;
  dnsmasqReload!: DnsmasqReload;
  /** atomic: temp file + rename; inplace: rewrite keeping the inode (single-file bind mounts). */
  dnsmasqWriteMode!: 'atomic' | 'inplace';
  /** How long report-driven ledger updates (last_seen, fingerprints) may stay unflushed. */
  reportFlushMs!: number;
  /**
   * Quiet time (ms) after the last commit before the YAML files are rewritten from the change
   * log (at most 10 x that after the first pending commit); 0 = rewrite them on every commit.
   */
  checkpointMs!: number;
  /** Change-log size (bytes) that triggers a checkpoint at once. */
  checkpointBytes!: number;
  /** Most devices the pool may hold before /devices/report stops auto-registering new MACs. */
  poolLimit!: number;
  /** New registrations per second one source address may make through /devices/report (burst: 10 s worth). */
  registerRate!: number;
  /**
   * HTTPS for the API and the boot chain (IPXE_CP_TLS_CERT / IPXE_CP_TLS_KEY, PEM files); null =
   * plain HTTP (development). Read and checked at start: the key must belong to the certificate.
   */
  tls!: { cert: Buffer; key: Buffer; fingerprint256: string } | null;
  logLevel!: string;
  /** Log every request (off by default on the boot path; see main.ts). */
  accessLog!: boolean;
  /** Answer the boot routes before Fastify and, by the boot front, before node:http (IPXE_CP_RAW_BOOT_PATH, default on; off: through Fastify like every route). */
  rawBootPath!: boolean;
  /** GET /metrics without the token (IPXE_CP_METRICS_PUBLIC): for a Prometheus on a trusted network. */
  metricsPublic!: boolean;
  /** Timeout (ms) of agent calls that change things (a clone may copy when reflink is missing). */
  agentTimeoutMs!: number;
  /** Timeout (ms) of agent health/capability/listing probes (GET /agents?live, placement). */
  agentProbeTimeoutMs!: number;
  /** How often the agents of boots waiting for their disk login are asked who is logged in (IPXE_CP_DISK_WATCH_MS). */
  diskWatchMs!: number;
  /**
   * How often the boot-event store is pruned to what the boot timelines hold and to the 7-day
   * retention (IPXE_CP_BOOT_EVENT_PRUNE_SECONDS, 3600); the first prune comes after at most 300 s.
   */
  bootEventPruneSeconds!: number;
  /**
   * How long a boot waits for its reset-mode disks to be restored before /boot-vars answers
   * (IPXE_CP_DISK_RESET_TIMEOUT_MS): a disk still held by a session is retried until then, and a
   * reset not done by then refuses the boot (never a disk that was not restored).
   */
  diskResetTimeoutMs!: number;
  /**
   * How often every enabled agent is probed in the background (IPXE_CP_AGENT_WATCH_MS; 0 = never):
   * readiness and the change feed learn that an agent went down without anyone opening a page.
   */
  agentWatchMs!: number;
  /** Host NQNs of workers are `<hostNqnBase>:host.<worker_id>` (IPXE_CP_HOST_NQN_BASE). */
  hostNqnBase!: string;
  /**
   * Audit retention (IPXE_CP_AUDIT_RETENTION_DAYS; 0 = keep every entry): entries older than this
   * are dropped, oldest first, but never one a follower of GET /operations seen within
   * auditCursorHoldMs still needs (entries above its cursor).
   */
  auditRetentionDays!: number;
  /** How long a `since` cursor seen by GET /operations holds its entries against retention (IPXE_CP_AUDIT_CURSOR_HOLD_HOURS). */
  auditCursorHoldMs!: number;
  /** Files: operations.jsonl is closed as a segment past this size (IPXE_CP_AUDIT_SEGMENT_MB); retention drops whole segments. */
  auditSegmentBytes!: number;
  /** Reconciler period in seconds (IPXE_CP_RECONCILE_SECONDS); 0 = only POST /reconcile. Also the backoff base. */
  reconcileSeconds!: number;
  /** The environment as read at start: `${VAR}` tokens in agents.yml expand from here. */
  env!: Readonly<Record<string, string | undefined>>;
}

export { ConfigError };

type Env = Record<string, string | undefined>;

function bool(env: Env, name: string, dflt: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  const v = raw.trim().toLowerCase();
  if (['true', '1', 'yes', 'on'].includes(v)) return true;
  if (['false', '0', 'no', 'off'].includes(v)) return false;
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(raw)}`);
}

function int(env: Env, name: string, dflt: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be an integer, got ${JSON.stringify(raw)}`);
  const n = Number(raw.trim());
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

function dir(env: Env, name: string, dflt: string, cwd: string): string {
  const raw = env[name];
  const v = raw === undefined || raw === '' ? dflt : raw;
  if (v.includes('\0')) throw new ConfigError(`${name} must be a path`);
  return path.resolve(cwd, v);
}

export function parseReload(raw: string | undefined, name = 'IPXE_CP_DNSMASQ_RELOAD'): DnsmasqReload {
  const v = (raw ?? '').trim();
  if (v === '' || v === 'none') return { kind: 'none' };
  const idx = v.indexOf(':');
  const kind = idx < 0 ? v : v.slice(0, idx);
  const arg = idx < 0 ? '' : v.slice(idx + 1).trim();
  if (kind === 'pidfile' && arg) return { kind: 'pidfile', path: arg };
  if (kind === 'docker' && /^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(arg)) return { kind: 'docker', container: arg };
  if (kind === 'command' && arg) return { kind: 'command', command: arg };
  throw new ConfigError(
    `${name} must be none, pidfile:<path>, docker:<container> or command:<cmd>, got ${JSON.stringify(raw)}`,
  );
}

/** Reads and validates every setting; throws ConfigError naming the variable. */
export function loadConfig(env: Env, cwd = process.cwd()): AppConfig {
  const c = new AppConfig();
  c.token = env.IPXE_CP_TOKEN ?? '';
  // Without a token every route is open: then only loopback, unless the operator names the host.
  c.host = env.IPXE_CP_HOST || (c.token ? '0.0.0.0' : '127.0.0.1');
  c.port = int(env, 'IPXE_CP_PORT', 4839, 0, 65535);
  c.autoRegister = bool(env, 'IPXE_CP_AUTO_REGISTER', true);
  c.autoBootTimeoutMs = int(env, 'IPXE_CP_AUTO_BOOT_TIMEOUT', 1, 0, 86_400_000);
  c.bootMenuTimeoutMs = int(env, 'IPXE_CP_BOOT_MENU_TIMEOUT', 5000, 0, 86_400_000);
  c.configDir = dir(env, 'IPXE_CP_CONFIG_DIR', 'config', cwd);
  c.stateDir = dir(env, 'IPXE_CP_STATE_DIR', 'state', cwd);
  c.dnsmasqDir = dir(env, 'IPXE_CP_DNSMASQ_DIR', 'dnsmasq', cwd);
  c.ipxeScriptsDir = dir(env, 'IPXE_CP_IPXE_SCRIPTS_DIR', 'docker/tftp', cwd);
  c.webDir = webDir(env, cwd);
  const store = (env.IPXE_CP_STORE || 'file').trim();
  if (store !== 'file' && store !== 'postgres') throw new ConfigError(`IPXE_CP_STORE must be file or postgres, got ${JSON.stringify(store)}`);
  c.store = store;
  c.databaseUrl = (env.IPXE_CP_DATABASE_URL ?? '').trim();
  if (store === 'postgres' && !/^postgres(ql)?:\/\//.test(c.databaseUrl)) {
    throw new ConfigError('IPXE_CP_DATABASE_URL must be a postgres:// URL when IPXE_CP_STORE=postgres');
  }
  c.databaseTimeoutMs = int(env, 'IPXE_CP_DATABASE_TIMEOUT_MS', 5000, 100, 600_000);
  c.syncMs = int(env, 'IPXE_CP_SYNC_MS', 1000, 100, 60_000);
  c.stalenessMaxMs = int(env, 'IPXE_CP_STALENESS_MAX_MS', Math.max(5 * c.syncMs, c.syncMs + c.databaseTimeoutMs), c.syncMs, 3_600_000);
  c.reconciler = bool(env, 'IPXE_CP_RECONCILER', true);
  c.leaseSeconds = int(env, 'IPXE_CP_LEASE_SECONDS', 2, 1, 300);
  c.nodeId = (env.IPXE_CP_NODE_ID || `${os.hostname()}:${process.pid}`).trim();
  if (!/^[A-Za-z0-9._:-]{1,100}$/.test(c.nodeId)) throw new ConfigError(`IPXE_CP_NODE_ID must be 1-100 of letters, digits, '.', '_', ':', '-', got ${JSON.stringify(c.nodeId)}`);
  c.dnsmasqReload = parseReload(env.IPXE_CP_DNSMASQ_RELOAD);
  const mode = (env.IPXE_CP_DNSMASQ_WRITE_MODE || 'atomic').trim();
  if (mode !== 'atomic' && mode !== 'inplace') {
    throw new ConfigError(`IPXE_CP_DNSMASQ_WRITE_MODE must be atomic or inplace, got ${JSON.stringify(mode)}`);
  }
  c.dnsmasqWriteMode = mode;
  c.reportFlushMs = int(env, 'IPXE_CP_REPORT_FLUSH_MS', 500, 0, 60_000);
  c.checkpointMs = int(env, 'IPXE_CP_CHECKPOINT_MS', 1000, 0, 600_000);
  c.checkpointBytes = int(env, 'IPXE_CP_CHECKPOINT_BYTES', 8 * 1024 * 1024, 4096, 1024 * 1024 * 1024);
  c.poolLimit = int(env, 'IPXE_CP_POOL_LIMIT', 10_000, 0, 10_000_000);
  c.registerRate = int(env, 'IPXE_CP_REGISTER_RATE', 100, 1, 1_000_000);
  c.tls = loadTls(env, cwd);
  const level = (env.IPXE_CP_LOG_LEVEL || 'info').trim();
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(level)) {
    throw new ConfigError(`IPXE_CP_LOG_LEVEL must be one of fatal,error,warn,info,debug,trace,silent, got ${JSON.stringify(level)}`);
  }
  c.logLevel = level;
  c.accessLog = bool(env, 'IPXE_CP_ACCESS_LOG', false);
  c.rawBootPath = bool(env, 'IPXE_CP_RAW_BOOT_PATH', true);
  c.metricsPublic = bool(env, 'IPXE_CP_METRICS_PUBLIC', false);
  c.agentTimeoutMs = int(env, 'IPXE_CP_AGENT_TIMEOUT_MS', 300_000, 100, 3_600_000);
  c.agentProbeTimeoutMs = int(env, 'IPXE_CP_AGENT_PROBE_TIMEOUT_MS', 2000, 50, 60_000);
  c.diskWatchMs = int(env, 'IPXE_CP_DISK_WATCH_MS', 2000, 100, 60_000);
  c.bootEventPruneSeconds = int(env, 'IPXE_CP_BOOT_EVENT_PRUNE_SECONDS', 3600, 5, 86_400);
  c.diskResetTimeoutMs = int(env, 'IPXE_CP_DISK_RESET_TIMEOUT_MS', 15_000, 500, 120_000);
  c.agentWatchMs = int(env, 'IPXE_CP_AGENT_WATCH_MS', 10_000, 0, 3_600_000);
  if (c.agentWatchMs > 0 && c.agentWatchMs < 200) throw new ConfigError(`IPXE_CP_AGENT_WATCH_MS must be 0 (off) or at least 200, got ${c.agentWatchMs}`);
  c.hostNqnBase = (env.IPXE_CP_HOST_NQN_BASE || 'nqn.2026-07.com.controller').trim();
  if (!BASE_NQN.test(c.hostNqnBase) || c.hostNqnBase.length > 150) {
    throw new ConfigError(`IPXE_CP_HOST_NQN_BASE must look like nqn.2026-07.com.example, got ${JSON.stringify(c.hostNqnBase)}`);
  }
  c.auditRetentionDays = int(env, 'IPXE_CP_AUDIT_RETENTION_DAYS', 0, 0, 36_500);
  c.auditCursorHoldMs = int(env, 'IPXE_CP_AUDIT_CURSOR_HOLD_HOURS', 24, 0, 8760) * 3600_000;
  c.auditSegmentBytes = int(env, 'IPXE_CP_AUDIT_SEGMENT_MB', 64, 1, 65_536) * 1024 * 1024;
  c.reconcileSeconds = int(env, 'IPXE_CP_RECONCILE_SECONDS', 30, 0, 86_400);
  c.env = Object.freeze({ ...env });
  return c;
}

/**
 * IPXE_CP_WEB_DIR (default web/dist): named explicitly, it must hold index.html; the default may be
 * missing (an API-only checkout), and /ui then says how to build it.
 */
function webDir(env: Env, cwd: string): string | null {
  const d = dir(env, 'IPXE_CP_WEB_DIR', 'web/dist', cwd);
  if (fs.existsSync(path.join(d, 'index.html'))) return d;
  if (env.IPXE_CP_WEB_DIR) throw new ConfigError(`IPXE_CP_WEB_DIR: ${d} holds no index.html (npm run build:web builds it)`);
  return null;
}

/** The TLS certificate and key, both or neither, and the key must match the certificate. */
export function loadTls(env: Env, cwd: string): AppConfig['tls'] {
  const certPath = (env.IPXE_CP_TLS_CERT ?? '').trim();
  const keyPath = (env.IPXE_CP_TLS_KEY ?? '').trim();
  if (!certPath && !keyPath) return null;
  if (!certPath) throw new ConfigError('IPXE_CP_TLS_CERT is required when IPXE_CP_TLS_KEY is set');
  if (!keyPath) throw new ConfigError('IPXE_CP_TLS_KEY is required when IPXE_CP_TLS_CERT is set');
  const read = (name: string, p: string) => {
    try {
      return fs.readFileSync(path.resolve(cwd, p));
    } catch (e) {
      throw new ConfigError(`${name}: cannot read ${p}: ${(e as Error).message}`);
    }
  };
  const cert = read('IPXE_CP_TLS_CERT', certPath);
  const key = read('IPXE_CP_TLS_KEY', keyPath);
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (e) {
    throw new ConfigError(`IPXE_CP_TLS_CERT: ${certPath} is not a PEM certificate: ${(e as Error).message}`);
  }
  let pk;
  try {
    pk = createPrivateKey(key);
  } catch (e) {
    throw new ConfigError(`IPXE_CP_TLS_KEY: ${keyPath} is not a PEM private key: ${(e as Error).message}`);
  }
  if (!x509.checkPrivateKey(pk)) throw new ConfigError(`IPXE_CP_TLS_KEY: ${keyPath} does not belong to the certificate ${certPath}`);
  return { cert, key, fingerprint256: x509.fingerprint256 };
}
