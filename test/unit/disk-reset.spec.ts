import { DiskResetService } from '../../src/control-plane/boot/disk-reset.service';
import { DiskRecord, WorkerRecord } from '../../src/control-plane/repositories/ledger/records';
import { AgentHttpError } from '../../src/control-plane/storage-nodes/agent-gateway';

/** DiskResetService with its I/O replaced: the ledger, the agent call, the boot sessions, the audit. */
function setup(opts: { disks?: Partial<DiskRecord>[]; agent?: (iqn: string, n: number) => Promise<{ ms: number }> } = {}) {
  const disk = (o: Partial<DiskRecord>, i: number): DiskRecord => ({
    agent: 'a',
    transport: 'iscsi',
    iqn: `iqn.2026-07.com.k:w1.os${i}`,
    filename: `w1.os${i}.img`,
    backing: `/d/w1.os${i}.img`,
    os: `os${i}`,
    os_tag: `${i}`.padStart(12, 'a'),
    source: { type: 'master', name: '_tpl_m.img' },
    mode: 'reset',
    ...o,
  });
  const worker = { worker_id: 'w1', disks: (opts.disks ?? [{}]).map(disk) } as WorkerRecord;
  const ledger = {
    devices: new Map([['02:00:00:00:00:01', { state: 'bound', bound_worker_id: 'w1' }]]),
    workers: new Map([['w1', worker]]),
  };
  const session = { current: null as null | { started: number; outcome: string } };
  const sessions = {
    latest: () => (session.current ? { session: { started: session.current.started }, outcome: session.current.outcome } : null),
    onStarted: (fn: (mac: string, stage: string) => void) => (started = fn),
  };
  let started: (mac: string, stage: string) => void = () => undefined;
  const calls: string[] = [];
  const audits: Record<string, unknown>[] = [];
  const storageNodes = {
    resetDisk: (_a: unknown, dto: { iqn: string }) => {
      calls.push(dto.iqn);
      return (opts.agent ?? (async () => ({ ms: 3 })))(dto.iqn, calls.length);
    },
  };
  const svc = new DiskResetService(
    { read: () => ledger } as never,
    { get: (id: string) => (id === 'a' ? { id: 'a' } : undefined) } as never,
    storageNodes as never,
    sessions as never,
    { record: async (op: string, e: Record<string, unknown>) => void audits.push({ op, ...e }) } as never,
    { diskResetTimeoutMs: 1200 } as never,
    { now: () => new Date() } as never,
    { targetOf: (_w: string, d: DiskRecord) => (d.source.type === 'master' ? d.source.version : undefined) } as never,
  );
  return { svc, session, calls, audits, worker, report: (mac: string) => started(mac, 'report') };
}

const MAC = '02:00:00:00:00:01';

describe('DiskResetService (reset-mode disks at the start of every boot)', () => {
  it('nothing for a device without reset-mode disks, unknown or unbound', () => {
    const { svc, worker } = setup({ disks: [{ mode: undefined }] });
    expect(svc.ensure(MAC)).toBeNull();
    expect(svc.ensure('02:00:00:00:00:09')).toBeNull();
    worker.disks = [];
    expect(svc.ensure(MAC)).toBeNull();
  });

  it('once per boot in progress: the report starts it, /boot-vars finds it; a boot that is over starts a new one', async () => {
    const { svc, session, calls, audits, report } = setup({ disks: [{}, { mode: undefined }, {}] });
    session.current = { started: 1000, outcome: 'in_progress' };
    report(MAC);
    expect(calls).toEqual(['iqn.2026-07.com.k:w1.os0', 'iqn.2026-07.com.k:w1.os2']); // the persistent disk is left alone
    expect(await svc.ensure(MAC)).toEqual({ ok: true });
    expect(await svc.ensure(MAC)).toEqual({ ok: true });
    expect(calls).toHaveLength(2);
    expect(audits.map((a) => [a.op, a.iqn, a.tries, a.ms])).toEqual([
      ['disk.reset', 'iqn.2026-07.com.k:w1.os0', 1, 3],
      ['disk.reset', 'iqn.2026-07.com.k:w1.os2', 1, 3],
    ]);
    // The last boot booted; this /boot-vars came without a report: a new boot, a new restore.
    session.current = { started: 1000, outcome: 'booted' };
    expect(await svc.ensure(MAC)).toEqual({ ok: true });
    expect(calls).toHaveLength(4);
    // A report of a new boot.
    session.current = { started: 2000, outcome: 'in_progress' };
    report(MAC);
    await svc.ensure(MAC);
    expect(calls).toHaveLength(6);
  });

  it('a disk held by a session is retried until the deadline, then the boot is refused with every reason', async () => {
    const held = () => Promise.reject(new AgentHttpError('a', 409, 'an initiator holds a session on iqn (iqn.x:seat): the disk is in use and was not reset'));
    const { svc, session, audits } = setup({ agent: held });
    session.current = { started: 1, outcome: 'in_progress' };
    const out = await svc.ensure(MAC);
    expect(out).toEqual({ ok: false, reason: expect.stringMatching(/^disk reset failed: os0 \(iqn\.2026-07\.com\.k:w1\.os0\): agent a: an initiator holds a session/) });
    expect(audits).toEqual([expect.objectContaining({ op: 'disk.reset', status: 'failed', tries: expect.any(Number) })]);
    expect(audits[0].tries as number).toBeGreaterThanOrEqual(2);
  });

  it('a session that goes away within the deadline: restored on a retry; any other refusal is final at once', async () => {
    const goes = (_iqn: string, n: number) => (n < 2 ? Promise.reject(new AgentHttpError('a', 409, 'an initiator holds a session on x')) : Promise.resolve({ ms: 2 }));
    const a = setup({ agent: goes });
    a.session.current = { started: 1, outcome: 'in_progress' };
    expect(await a.svc.ensure(MAC)).toEqual({ ok: true });
    expect(a.audits).toEqual([expect.objectContaining({ op: 'disk.reset', tries: 2, ms: 2 })]);

    const noReflink = () => Promise.reject(new AgentHttpError('a', 409, 'DISK_DIR (ext4) cannot reflink'));
    const b = setup({ agent: noReflink, disks: [{}, { agent: 'gone' }] });
    b.session.current = { started: 1, outcome: 'in_progress' };
    const out = await b.svc.ensure(MAC);
    expect(b.calls).toHaveLength(1); // no retry; the disk of an unknown agent is never called
    expect(out).toEqual({ ok: false, reason: expect.stringMatching(/cannot reflink.*; os1 \(iqn\.2026-07\.com\.k:w1\.os1\): agent not found: gone$/) });
  });
});
