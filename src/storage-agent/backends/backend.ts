/** One exported target as a backend reports it. */
export interface TargetInfo {
  /** IQN (iSCSI) or NQN (NVMe/TCP). */
  name: string;
  /** stgt target id. */
  tid?: number;
  backing: string | null;
  cd: boolean;
  /** nvmet: host NQNs allowed on the subsystem. */
  allowed_hosts?: string[];
  /** lio, stgt: initiator IQNs the target admits (absent: open to any initiator). */
  allowed_initiators?: string[];
  /** lio, stgt: the CHAP credential it requires (absent: none; secret '' when the backend cannot tell it). */
  chap?: Chap;
}

/** An initiator logged in to a target now (iSCSI session, NVMe-oF controller). */
export interface InitiatorSession {
  /** IQN or NQN of the target. */
  target: string;
  /** Initiator IQN or host NQN. */
  initiator: string;
  /** The initiator's address, when the backend shows it. */
  address: string | null;
  /** The backend's id of the session (stgt I_T nexus, LIO session id, nvmet controller), when it has one: a new login gets a new one. */
  id: string | null;
}

/** An iSCSI CHAP credential (one-way: the target checks the initiator). */
export interface Chap {
  userid: string;
  secret: string;
}

/**
 * What the running kernel can do for this backend, read from configfs at start (null on a
 * configfs-shaped test directory, where no kernel answers).
 */
export interface KernelFeatures {
  release: string | null;
  /** nvmet: hosts/<nqn>/dhchap_key exists (CONFIG_NVME_TARGET_AUTH). */
  nvmet_dhchap: boolean | null;
  /** nvmet: ports/<id>/addr_tsas exists (CONFIG_NVME_TARGET_TCP_TLS). */
  nvmet_tls: boolean | null;
  /** The `.nvme` keyring exists (nvme-keyring), where TLS PSKs go. */
  nvme_keyring: boolean | null;
  /** A tlshd process runs (the kernel's TLS handshakes are done by it). */
  tlshd: boolean | null;
  /** What this node cannot serve, each naming the missing kernel feature; empty when nothing. */
  missing: string[];
}

/** Nothing asked of a kernel (stgt, a test directory), optionally with what is missing. */
export function noKernelFeatures(missing: string[] = [], release: string | null = null): KernelFeatures {
  return { release, nvmet_dhchap: null, nvmet_tls: null, nvme_keyring: null, tlshd: null, missing };
}

/** What a storage backend must do; the agent's LUN service drives it. */
export interface TargetBackend {
  readonly name: 'stgt' | 'lio' | 'nvmet';
  readonly transport: 'iscsi' | 'nvme-tcp';
  readonly supportsCd: boolean;
  /** How targets survive a restart, in words (capabilities.persistent). */
  readonly persistence: string;
  /** Called once at agent start (restore persisted state, create the port, ...). */
  start(): Promise<void>;
  /** Kernel features, known after start(). */
  features(): KernelFeatures;
  list(): Promise<TargetInfo[]>;
  /** Initiators logged in now; null when this backend cannot see them here (the reason in `sessionsUnavailable`). */
  sessions(): Promise<InitiatorSession[] | null>;
  createDisk(name: string, backing: string, opts: { allowedHosts?: string[]; allowedInitiators?: string[]; chap?: Chap }): Promise<void>;
  /** lio and stgt: the initiator ACLs of a disk and the CHAP credential they require, set in place. */
  setAccess?(name: string, initiators: string[], chap: Chap | undefined): Promise<void>;
  createCd(name: string, backing: string): Promise<void>;
  /** Removes the target; returns what it was (its backing file), or null if it did not exist. */
  remove(name: string): Promise<TargetInfo | null>;
  /** nvmet only: host credentials. */
  putHost?(hostnqn: string, creds: HostCredentials): Promise<void>;
  removeHost?(hostnqn: string): Promise<void>;
  /** nvmet only: the subsystems whose allowed_hosts link this host. */
  hostSubsystems?(hostnqn: string): Promise<string[]>;
  /** nvmet only: links (or unlinks) the host on one subsystem. */
  allowHost?(nqn: string, hostnqn: string, allow: boolean): Promise<void>;
}

export interface HostCredentials {
  dhchap_key: string;
  dhchap_ctrl_key?: string;
  dhchap_hash: string;
  dhchap_dhgroup: string;
  tls_psk?: string;
}

/** An operation the running kernel cannot do (a missing feature): a 409 naming it. */
export class KernelFeatureError extends Error {}

export const TARGET_BACKEND = 'kurrent:target-backend';
