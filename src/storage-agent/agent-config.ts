import { BASE_IQN, BASE_NQN } from '../shared/grammars';
import * as path from 'node:path';
import { ConfigError } from '../shared/config-error';

export type BackendName = 'stgt' | 'lio' | 'nvmet';

/** Storage agent configuration, read and validated once at start (no process.env elsewhere). */
export class AgentConfig {
  token!: string;
  host!: string;
  port!: number;
  backend!: BackendName;
  /** Image directory: masters (`_tpl_` in the name), worker disks, ISOs. */
  diskDir!: string;
  /** Agent state: the target manifest and NVMe host credentials (0600). */
  stateDir!: string;
  baseIqn!: string;
  baseNqn!: string;
  /** Master scan period (ms). */
  masterScanMs!: number;
  /** A dropped `_tpl_` file unchanged this long (ms) becomes a version at the next scan (a file still being copied in does not). */
  masterSettleMs!: number;
  /** Cap on the bytes per second a transfer pulls from another agent (0: none). */
  transferMaxBytesPerSec!: number;
  /** stgt: tgtd management port (tgtadm -C); 0 = the default socket. */
  tgtControlPort!: number;
  /** lio: configfs root of the target subsystem; nvmet: of nvmet. */
  configfsRoot!: string;
  /** lio: targetcli-fb saveconfig.json. */
  lioSaveconfig!: string;
  /** iSCSI portal address/port (lio) and NVMe/TCP listener (nvmet). */
  portalAddr!: string;
  iscsiPort!: number;
  nvmePort!: number;
  nvmeTls!: boolean;
  logLevel!: string;
}

type Env = Record<string, string | undefined>;


function int(env: Env, name: string, dflt: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be an integer, got ${JSON.stringify(raw)}`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

export function loadAgentConfig(env: Env, cwd = process.cwd()): AgentConfig {
  const c = new AgentConfig();
  c.token = env.IPXE_AGENT_TOKEN ?? '';
  // Without a token every route is open: then only loopback, unless the operator names the host.
  c.host = env.IPXE_AGENT_HOST || (c.token ? '0.0.0.0' : '127.0.0.1');
  c.port = int(env, 'IPXE_AGENT_PORT', 4840, 0, 65535);
  const backend = (env.IPXE_AGENT_BACKEND || 'stgt').trim();
  if (backend !== 'stgt' && backend !== 'lio' && backend !== 'nvmet') {
    throw new ConfigError(`IPXE_AGENT_BACKEND must be stgt, lio or nvmet, got ${JSON.stringify(backend)}`);
  }
  c.backend = backend;
  c.diskDir = path.resolve(cwd, env.DISK_DIR || env.IPXE_AGENT_DISK_DIR || 'images');
  c.stateDir = path.resolve(cwd, env.IPXE_AGENT_STATE_DIR || 'agent-state');
  c.baseIqn = (env.IPXE_AGENT_BASE_IQN || 'iqn.2026-07.com.controller').trim();
  if (!BASE_IQN.test(c.baseIqn)) {
    throw new ConfigError(`IPXE_AGENT_BASE_IQN must look like iqn.2026-07.com.example, got ${JSON.stringify(c.baseIqn)}`);
  }
  c.baseNqn = (env.IPXE_AGENT_BASE_NQN || 'nqn.2026-07.com.controller').trim();
  if (!BASE_NQN.test(c.baseNqn)) {
    throw new ConfigError(`IPXE_AGENT_BASE_NQN must look like nqn.2026-07.com.example, got ${JSON.stringify(c.baseNqn)}`);
  }
  c.masterScanMs = int(env, 'IPXE_AGENT_MASTER_SCAN_SECONDS', 30, 1, 86_400) * 1000;
  c.masterSettleMs = int(env, 'IPXE_AGENT_MASTER_SETTLE_SECONDS', 10, 0, 86_400) * 1000;
  c.transferMaxBytesPerSec = int(env, 'IPXE_AGENT_TRANSFER_MAX_MBPS', 0, 0, 100_000) * 1_000_000;
  c.tgtControlPort = int(env, 'IPXE_AGENT_TGT_CONTROL_PORT', 0, 0, 65535);
  const dfltRoot = backend === 'nvmet' ? '/sys/kernel/config/nvmet' : '/sys/kernel/config/target';
  c.configfsRoot = path.resolve(cwd, env.IPXE_AGENT_CONFIGFS_ROOT || dfltRoot);
  c.lioSaveconfig = path.resolve(cwd, env.IPXE_AGENT_LIO_SAVECONFIG || '/etc/rtslib-fb-target/saveconfig.json');
  c.portalAddr = (env.IPXE_AGENT_PORTAL_ADDR || '0.0.0.0').trim();
  if (!/^(\d{1,3}\.){3}\d{1,3}$/.test(c.portalAddr)) {
    throw new ConfigError(`IPXE_AGENT_PORTAL_ADDR must be an IPv4 address, got ${JSON.stringify(c.portalAddr)}`);
  }
  c.iscsiPort = int(env, 'IPXE_AGENT_ISCSI_PORT', 3260, 1, 65535);
  c.nvmePort = int(env, 'IPXE_AGENT_NVME_PORT', 4421, 1, 65535);
  const tls = (env.IPXE_AGENT_NVME_TLS ?? 'true').trim().toLowerCase();
  if (!['true', 'false', '1', '0'].includes(tls)) throw new ConfigError(`IPXE_AGENT_NVME_TLS must be true or false, got ${JSON.stringify(tls)}`);
  c.nvmeTls = tls === 'true' || tls === '1';
  c.logLevel = (env.IPXE_AGENT_LOG_LEVEL || 'info').trim();
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(c.logLevel)) {
    throw new ConfigError(`IPXE_AGENT_LOG_LEVEL must be a pino level, got ${JSON.stringify(c.logLevel)}`);
  }
  return c;
}
