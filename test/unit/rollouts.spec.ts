import { RolloutsService } from '../../src/control-plane/masters/rollouts.service';
import type { TxAudit } from '../../src/control-plane/repositories/audit/audit.repository';
import type { DiskRecord } from '../../src/control-plane/repositories/ledger/records';
import type { RolloutState, SettingsFile } from '../../src/control-plane/repositories/settings/settings.repository';

const MASTER = '_tpl_u.img';
const disk = (version?: number, extra: Partial<DiskRecord> = {}): DiskRecord => ({
  agent: 'a',
  iqn: 'iqn.2026-07.com.k:w.ubuntu',
  filename: 'w.ubuntu.img',
  backing: '/d/w.ubuntu.img',
  os: 'ubuntu',
  source: { type: 'master', name: MASTER, ...(version ? { version } : {}) },
  ...extra,
});

/** RolloutsService with its I/O replaced: the settings document, the ledger, the catalog, the sessions, the audit, the clock. */
function setup(workers: Record<string, number | undefined>, agents = ['a']) {
  let doc: SettingsFile = {};
  const audits: Record<string, unknown>[] = [];
  // The audit entries travel with the save (one commit in the real engines).
  const repo = {
    onChange: () => undefined,
    load: async () => doc,
    save: async (_k: unknown, next: SettingsFile, entries: TxAudit[] = []) => {
      for (const a of entries) audits.push({ op: a.op, ...a.fields });
      return (doc = { ...doc, ...next });
    },
  };
  const ledger = { workers: new Map(Object.entries(workers).map(([id, v]) => [id, { worker_id: id, disks: [disk(v)] }])), devices: new Map() };
  const store = { read: () => ledger, exclusive: <T>(fn: () => T) => fn() };
  const masters = { addInUseCheck: () => undefined, list: async () => ({ catalog: [{ name: MASTER, versions: [1, 2, 3].map((version) => ({ version, agents })) }] }) };
  const svc = new RolloutsService(repo as never, store as never, masters as never, { latest: () => null } as never, { isoNow: () => '2026-12-02T10:00:00+00:00' } as never);
  return { svc, audits, doc: () => doc.master_rollouts?.[MASTER] as RolloutState };
}

describe('RolloutsService (control plane): which version each disk is to hold', () => {
  it('the canary workers take the version first, the others keep theirs until promoted; new disks get the fleet version', async () => {
    const { svc, audits } = setup({ w1: 1, w2: 1, w3: 1 });
    await svc.onModuleInit();
    expect(svc.targetOf('w1', disk(1))).toBe(1);
    expect(svc.defaultVersion(MASTER)).toBeUndefined();
    const r = await svc.start(MASTER, { version: 2, canary_workers: ['w1'] }, 'test');
    expect([r.phase, r.previous, r.canary]).toEqual(['canary', 1, ['w1']]);
    expect([svc.targetOf('w1', disk(1)), svc.targetOf('w2', disk(1))]).toEqual([2, 1]);
    expect(svc.defaultVersion(MASTER)).toBe(1);
    // A disk made before versions, not reached, stays on the fleet's version (not the agent's latest).
    expect(svc.targetOf('w2', disk(undefined))).toBe(1);
    // The maintenance disk is never moved.
    expect(svc.targetOf('w1', disk(3, { maintenance: true }))).toBe(3);
    await svc.promote(MASTER, 'test');
    expect([svc.targetOf('w2', disk(1)), svc.defaultVersion(MASTER)]).toEqual([2, 2]);
    const back = await svc.rollback(MASTER, {}, 'test');
    expect([back.version, back.previous, back.rollback, back.phase]).toEqual([1, 2, true, 'all']);
    expect(audits.map((a) => `${a.op} ${a.version}`)).toEqual(['master.rollout 2', 'master.rollout.promote 2', 'master.rollback 1']);
  });

  it('a canary percentage is at least one worker, picked by a hash, the same for the same rollout', async () => {
    const ids = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`seat-${String(i).padStart(2, '0')}`, 1]));
    const a = setup(ids);
    const b = setup(ids);
    const ra = await a.svc.start(MASTER, { version: 2, canary_percent: 10 }, 'test');
    const rb = await b.svc.start(MASTER, { version: 2, canary_percent: 10 }, 'test');
    expect(ra.canary).toHaveLength(4);
    expect(rb.canary).toEqual(ra.canary);
    // Not simply the first names.
    expect(ra.canary).not.toEqual(['seat-00', 'seat-01', 'seat-02', 'seat-03']);
    expect((await setup({ w1: 1, w2: 1 }).svc.start(MASTER, { version: 2, canary_percent: 1 }, 'test')).canary).toHaveLength(1);
  });

  it('refused: a version missing on an agent with disks of the master, the same target again, a rollback with nothing before', async () => {
    const { svc } = setup({ w1: 1 }, ['b']);
    await expect(svc.start(MASTER, { version: 2 }, 'test')).rejects.toMatchObject({ status: 409, message: expect.stringContaining('version 2 of _tpl_u.img is not on a, where disks of it are') });
    const ok = setup({ w1: undefined });
    await ok.svc.start(MASTER, { version: 2 }, 'test');
    expect(ok.doc()).toMatchObject({ version: 2, previous: null, phase: 'all' });
    await expect(ok.svc.start(MASTER, { version: 2 }, 'test')).rejects.toMatchObject({ status: 409 });
    await expect(ok.svc.rollback(MASTER, {}, 'test')).rejects.toMatchObject({ status: 409, message: expect.stringContaining('has no version before it') });
    await expect(ok.svc.promote(MASTER, 'test')).rejects.toMatchObject({ status: 409 });
  });
});
