import { BootService } from '../../src/control-plane/boot/boot.service';
import { DiskVarsResolver } from '../../src/control-plane/boot/disk-vars';
import type { DiskRecord, WorkerRecord } from '../../src/control-plane/repositories/ledger/records';

/**
 * A worker's boot readiness comes from the code that answers its /boot-vars (BootService with the
 * real DiskVarsResolver); here its agent, capabilities and credential are replaced, so each
 * reason an e2e test cannot reach without a broken agent is checked.
 */
describe("a worker's boot readiness", () => {
  const agent = { id: 'a1', base_url: 'http://127.0.0.1:9', enabled: true, iscsi_server: '10.0.0.3', role: { disk: true, cd: false }, tags: [] };
  const setup = () => {
    const state = {
      agent: agent as typeof agent | undefined,
      probe: undefined as { up: boolean } | undefined,
      caps: { nvme_port: 4421, nvme_tls: true } as Record<string, unknown> | undefined,
      cred: 'ok' as string,
      enforcement: false,
    };
    const registry = { get: () => state.agent, revision: () => 0 };
    const storageNodes = {
      capsRevision: 0,
      cachedCapabilities: () => state.caps,
      dataAddress: () => '10.0.0.3',
      backendOf: () => 'stgt',
      lastProbe: { get: () => state.probe },
    };
    const credentials = {
      revision: 0,
      bootCredentialOrBlocker: () => (state.cred === 'ok' ? { hostnqn: 'nqn.h', tls_psk: 'p', dhchap_secret: 's', dhchap_ctrl_secret: 'c' } : state.cred),
    };
    const iscsiAccess = { hasInitiatorAcl: () => false, chapOf: () => undefined };
    const disks = new DiskVarsResolver(registry as never, storageNodes as never, credentials as never, iscsiAccess as never);
    const store = { read: () => store, devices: { get: () => ({ pubkey: null }) } };
    const settings = { get signatureEnforcement() {
      return state.enforcement;
    } };
    const sessions = { held: () => false };
    const boot = new BootService(store as never, settings as never, disks, { bootMenuTimeoutMs: 5000 } as never, {} as never, {} as never, {} as never, sessions as never, { ensure: () => null } as never);
    return { state, boot };
  };
  const nvmeDisk: DiskRecord = { agent: 'a1', transport: 'nvme-tcp', nqn: 'nqn.2026-07.com.k:w1.ubuntu', filename: 'w1.img', backing: '/d/w1.img', os: 'ubuntu', os_tag: 'aaaaaaaaaaaa', source: { type: 'empty', size: '1G' } };
  const worker = (disks: DiskRecord[], def: string | null): WorkerRecord =>
    ({ worker_id: 'w1', hostname: 'w1', arch: 'x86_64', state: 'ready', disks, cd: null, default_os: def ? 'ubuntu' : null, default_disk: def, boot: { menu_default: null, menu_timeout: null } }) as WorkerRecord;
  const codes = (b: BootService, w: WorkerRecord, mac: string | null = '02:00:00:00:00:01') => b.readiness(w, mac).reasons.map((r) => r.code);

  it('bootable when /boot-vars would hand out the default NVMe disk and its agent answered', () => {
    const { boot } = setup();
    expect(boot.readiness(worker([nvmeDisk], 'aaaaaaaaaaaa'), '02:00:00:00:00:01')).toEqual({ bootable: true, reasons: [] });
  });

  it('names why /boot-vars answers the empty script for an NVMe default disk', () => {
    const { boot, state } = setup();
    const w = worker([nvmeDisk], 'aaaaaaaaaaaa');
    for (const cred of ['credential-missing', 'credential-revoked', 'credential-not-pushed']) {
      state.cred = cred;
      expect(codes(boot, w)).toEqual([cred]);
    }
    state.cred = 'ok';
    state.caps = { nvme_port: 4421, nvme_tls: false };
    expect(codes(boot, w)).toEqual(['nvme-port-without-tls']);
    state.caps = undefined;
    expect(codes(boot, w)).toEqual(['nvme-port-unknown']);
    state.agent = undefined;
    expect(codes(boot, w)).toEqual(['agent-unknown']);
  });

  it('adds what /boot-vars cannot see: the agent as last probed, drained, and the device key', () => {
    const { boot, state } = setup();
    const w = worker([nvmeDisk], 'aaaaaaaaaaaa');
    state.probe = { up: false };
    expect(codes(boot, w)).toEqual(['agent-down']);
    state.probe = { up: true };
    state.agent = { ...agent, enabled: false };
    expect(codes(boot, w)).toEqual(['agent-draining']);
    state.agent = agent;
    state.enforcement = true;
    expect(codes(boot, w)).toEqual(['no-device-key']);
    expect(codes(boot, w, null)).toEqual(['no-bound-device']);
  });

  it('an NVMe disk is never an implicit default: without one the worker is in the reboot loop', () => {
    const { boot } = setup();
    expect(codes(boot, worker([nvmeDisk], null))).toEqual(['no-default-disk']);
    expect(codes(boot, worker([], null), null)).toEqual(['no-bound-device', 'no-disk']);
  });
});
