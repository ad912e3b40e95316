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
  list(): Promise<TargetInfo[]>;
  createDisk(name: string, backing: string, opts: { allowedHosts?: string[] }): Promise<void>;
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

export const TARGET_BACKEND = 'kurrent:target-backend';
