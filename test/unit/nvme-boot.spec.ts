import { DiskVarsResolver } from '../../src/control-plane/boot/disk-vars';
import { deriveCtrlKey, deriveTlsPsk, generateDhchapKey, secretSha12 } from '../../src/shared/nvme-keys';
import type { AgentRecord, StorageNodeRegistry } from '../../src/control-plane/storage-nodes/storage-node-registry';
import type { StorageNodesService, Capabilities } from '../../src/control-plane/storage-nodes/storage-nodes.service';
import { CredentialsService } from '../../src/control-plane/credentials/credentials.service';
import type { CredentialRecord, CredentialRepository, PushRecord } from '../../src/control-plane/repositories/credentials/credential.repository';
import { DiskRecord, newWorker } from '../../src/control-plane/repositories/ledger/records';

/**
 * When an NVMe/TCP disk may boot: DiskVarsResolver and CredentialsService with their I/O
 * (registry, agent capabilities cache, credential file) replaced by plain objects.
 */
describe('NVMe boot variables: the empty answer unless everything is in place', () => {
  const NQN = 'nqn.2026-07.com.controller:w1.3f2a9c1b7d4e';
  const HOST = 'nqn.2026-07.com.controller:host.w1';
  const agent: AgentRecord = { id: 'n1', base_url: 'http://10.0.0.5:4840', token: '', iscsi_server: '10.0.0.9', role: { disk: true, cd: false }, tags: [], enabled: true };
  const disk: DiskRecord = { agent: 'n1', transport: 'nvme-tcp', nqn: NQN, filename: 'w1.3f2a9c1b7d4e.img', backing: '/x', os: 'ubuntu', os_version: '22.04', os_tag: '3f2a9c1b7d4e', source: { type: 'master', name: 'm' } };
  const worker = newWorker('w1', { disks: [disk], default_disk: '3f2a9c1b7d4e', default_os: 'ubuntu' });
  let caps: Partial<Capabilities> | undefined;
  let cred: CredentialRecord | undefined;
  let resolver: DiskVarsResolver;

  beforeEach(() => {
    const key = generateDhchapKey();
    const push: PushRecord = { state: 'pushed', attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null, key_sha256: secretSha12(key), subsystems: [NQN] };
    cred = { worker_id: 'w1', hostnqn: HOST, dhchap_key: key, issued_at: 'x', revoked: false, revoked_at: null, agents: { n1: push } };
    caps = { backend: 'nvmet', nvme_port: 4421, nvme_tls: true };
    const registry = { get: (id: string) => (id === 'n1' ? agent : undefined) } as unknown as StorageNodeRegistry;
    const agents = { cachedCapabilities: () => caps, dataAddress: (a: AgentRecord) => a.iscsi_server } as unknown as StorageNodesService;
    const store = { get: () => cred } as unknown as CredentialRepository;
    const config = { hostNqnBase: 'nqn.2026-07.com.controller', reconcileSeconds: 30 };
    const ledger = { read: () => ({ workers: new Map([['w1', worker]]) }) };
    const credentials = new CredentialsService(store, ledger as never, registry, {} as never, {} as never, {} as never, config as never);
    resolver = new DiskVarsResolver(registry, agents, credentials, { hasInitiatorAcl: () => false, chapOf: () => undefined } as never);
  });

  it('hands out disk, address, port, host NQN, the derived PSK and both DH-HMAC-CHAP secrets when the push is current', () => {
    expect(resolver.nvme(worker, disk)).toEqual({ disk_nqn: NQN, storager_ip: '10.0.0.9', nvme_port: 4421, hostnqn: HOST, tls_psk: deriveTlsPsk(cred!.dhchap_key, HOST), dhchap_secret: cred!.dhchap_key, dhchap_ctrl_secret: deriveCtrlKey(cred!.dhchap_key, HOST) });
    expect(resolver.defaultDisk(worker)).toEqual({ disk, explicit: true });
    expect(resolver.itemId(disk)).toBe('ubuntu-3f2a9c1b7d4e');
  });

  it.each([
    ['the port requires no TLS', () => (caps = { ...caps, nvme_tls: false })],
    ['the port is unknown', () => (caps = { ...caps, nvme_port: null })],
    ['the agent was never probed', () => (caps = undefined)],
    ['there is no credential', () => (cred = undefined)],
    ['the credential is revoked', () => (cred!.revoked = true)],
    // Left by a kill between a worker's delete and its credential's removal, then the id re-created.
    ['the credential was issued to an earlier worker of the same id', () => (cred!.worker_incarnation = '0123456789abcdef')],
    ['the push is pending', () => (cred!.agents.n1.state = 'pending')],
    ['the agent holds an older key', () => (cred!.agents.n1.key_sha256 = '000000000000')],
    ['the agent does not link the disk', () => (cred!.agents.n1.subsystems = [])],
    ['the push went to another agent', () => (cred!.agents = { n2: cred!.agents.n1 })],
  ])('nothing when %s', (_why, breakIt) => {
    breakIt();
    expect(resolver.nvme(worker, disk)).toBeNull();
  });

  it('an NVMe disk is never an implicit default; an iSCSI one is (seed 000 base_iqn before a default)', () => {
    expect(resolver.defaultDisk({ ...worker, default_disk: null, default_os: null })).toBeUndefined();
    const iscsi: DiskRecord = { ...disk, transport: 'iscsi', nqn: undefined, iqn: 'iqn.2026-07.com.controller:w1.debian', os: 'debian', os_version: null };
    expect(resolver.defaultDisk({ ...worker, disks: [disk, iscsi], default_disk: null, default_os: null })).toEqual({ disk: iscsi, explicit: false });
  });
});
