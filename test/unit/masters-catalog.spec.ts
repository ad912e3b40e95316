import { MastersService } from '../../src/control-plane/masters/masters.service';
import type { MasterDto, MasterVersionDto } from '../../src/shared/agent-contract/luns.dto';

const v = (version: number, sha: string, extra: Partial<MasterVersionDto> = {}): MasterVersionDto => ({ version, size: 64, allocated: 8, sha256: sha.repeat(64), created: 1000 + version, note: '', origin: 'drop', ...extra });

/** The control plane's MastersService with its I/O replaced: the agent registry and calls, the ledger, the audit. */
function setup(agents: Record<string, MasterDto[] | Error>, disks: { worker: string; os: string; name: string; version?: number }[] = []) {
  const registry = { all: () => Object.keys(agents).map((id) => ({ id, enabled: true, role: { disk: true } })) };
  const deleted: string[] = [];
  const storageNodes = {
    dataAddress: (a: { id: string }) => `10.0.0.${a.id.length}`,
    mastersOf: async (a: { id: string }) => {
      const m = agents[a.id];
      if (m instanceof Error) throw m;
      return m;
    },
    masterTransferOf: async (a: { id: string }, name: string, version: number) => (a.id === 'receiving' && name === '_tpl_u.img' && version === 2 ? { name, version, state: 'running' } : null),
    deleteMasterVersion: async (a: { id: string }, name: string, version: number) => {
      if (a.id === 'refuses') throw new Error('409 the file is this version');
      deleted.push(`${a.id}:${name}:${version}`);
      return { name, version };
    },
  };
  const workers = new Map<string, { worker_id: string; disks: unknown[] }>();
  for (const d of disks) {
    const w = workers.get(d.worker) ?? { worker_id: d.worker, disks: [] };
    w.disks.push({ os: d.os, source: { type: 'master', name: d.name, ...(d.version ? { version: d.version } : {}) } });
    workers.set(d.worker, w);
  }
  const audits: Record<string, unknown>[] = [];
  const svc = new MastersService(registry as never, storageNodes as never, { read: () => ({ workers }) } as never, { record: async (op: string, e: Record<string, unknown>) => void audits.push({ op, ...e }) } as never);
  return { svc, audits, deleted };
}

describe('MastersService (control plane): the catalog of versions over agents', () => {
  it('gathers each version over the agents, counts the disks on it, and names agents holding other bytes under the same number', async () => {
    const m = (versions: MasterVersionDto[]): MasterDto[] => [{ name: '_tpl_u.img', size: 64, mtime: 1, latest: versions[versions.length - 1]?.version ?? null, versions }];
    const { svc } = setup(
      { a: m([v(1, 'a'), v(2, 'b')]), b: m([v(1, 'a'), v(2, 'c')]), c: m([v(1, 'a'), v(2, 'b')]), old: [{ name: '_tpl_u.img', size: 64, mtime: 1 } as MasterDto] },
      [
        { worker: 'w1', os: 'ubuntu', name: '_tpl_u.img', version: 1 },
        { worker: 'w2', os: 'ubuntu', name: '_tpl_u.img', version: 1 },
        { worker: 'w3', os: 'ubuntu', name: '_tpl_u.img', version: 2 },
        { worker: 'w4', os: 'ubuntu', name: '_tpl_u.img' },
      ],
    );
    const r = await svc.list('test');
    expect(r.agents.find((x) => x.agent === 'old')?.masters).toEqual([{ name: '_tpl_u.img', size: 64, mtime: 1, latest: null, versions: [] }]);
    expect(r.catalog).toEqual([
      {
        name: '_tpl_u.img',
        latest: 2,
        unversioned_disks: 1,
        versions: [
          { ...v(1, 'a'), agents: ['a', 'b', 'c'], disks: 2 },
          // Two agents hold b's bytes: those are version 2; b's own is the conflict.
          { ...v(2, 'b'), agents: ['a', 'c'], conflicting_agents: ['b'], disks: 1 },
        ],
      },
    ]);
  });

  it('deleting: refused while a ledger disk holds the version (nothing called); an agent that refuses is named beside those that deleted', async () => {
    const m: MasterDto[] = [{ name: '_tpl_u.img', size: 64, mtime: 1, latest: 2, versions: [v(1, 'a'), v(2, 'b')] }];
    const { svc, audits, deleted } = setup({ a: m, refuses: m, other: [] }, [{ worker: 'w1', os: 'ubuntu', name: '_tpl_u.img', version: 1 }]);
    await expect(svc.deleteVersion('_tpl_u.img', '1', 'test')).rejects.toMatchObject({ status: 409, message: 'version 1 of _tpl_u.img is in use by 1 disk(s) (w1/ubuntu); nothing was deleted' });
    expect(deleted).toEqual([]);
    await expect(svc.deleteVersion('_tpl_u.img', '2', 'test')).rejects.toMatchObject({ status: 409, message: 'version 2 of _tpl_u.img: deleted on a; refused on refuses: 409 the file is this version' });
    expect(deleted).toEqual(['a:_tpl_u.img:2']);
    await expect(svc.deleteVersion('_tpl_u.img', '3', 'test')).rejects.toMatchObject({ status: 404 });
    await expect(svc.deleteVersion('u.img', '2', 'test')).rejects.toMatchObject({ status: 400 });
    expect(audits.map((e) => [e.op, e.status ?? 'ok', e.version])).toEqual([
      ['master.version.delete', 'failed', 1],
      ['master.version.delete', 'failed', 2],
    ]);
  });

  it('an agent that cannot be asked which versions it holds stops a delete before anything changes (502)', async () => {
    const m: MasterDto[] = [{ name: '_tpl_u.img', size: 64, mtime: 1, latest: 1, versions: [v(1, 'a')] }];
    const { svc, deleted } = setup({ a: m, down: new Error('ECONNREFUSED') });
    await expect(svc.deleteVersion('_tpl_u.img', '1', 'test')).rejects.toMatchObject({ status: 502 });
    expect(deleted).toEqual([]);
  });

  it('a version being copied to an agent is not deleted (its transfer would be cut half-way); other versions are', async () => {
    const m: MasterDto[] = [{ name: '_tpl_u.img', size: 64, mtime: 1, latest: 2, versions: [v(1, 'a'), v(2, 'b')] }];
    const { svc, deleted, audits } = setup({ a: m, receiving: [{ name: '_tpl_u.img', size: 64, mtime: 1, latest: 1, versions: [v(1, 'a')] }] });
    await expect(svc.deleteVersion('_tpl_u.img', '2', 'test')).rejects.toMatchObject({ status: 409, message: 'version 2 of _tpl_u.img is being copied to receiving (GET /masters/_tpl_u.img/versions/2/distribution); nothing was deleted' });
    expect(deleted).toEqual([]);
    expect(audits.pop()).toMatchObject({ op: 'master.version.delete', status: 'failed', version: 2, error: 'being copied' });
    await svc.deleteVersion('_tpl_u.img', '1', 'test');
    expect(deleted).toEqual(['a:_tpl_u.img:1', 'receiving:_tpl_u.img:1']);
  });
});
