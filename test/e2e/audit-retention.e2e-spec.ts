import * as fs from 'node:fs';
import * as path from 'node:path';
import { AuditRetentionService } from '../../src/control-plane/audit/audit-retention.service';
import { AuditService } from '../../src/control-plane/audit/audit.service';
import { Clock } from '../../src/control-plane/common/clock';
import type { AuditEntry } from '../../src/control-plane/repositories/audit/audit.repository';
import { onPostgres, startApp, TestApp } from '../helpers/app';

const DAY = 86_400_000;

/**
 * Audit retention on the store this pass runs on (files: whole closed segments; PostgreSQL: rows
 * along the primary key): entries past IPXE_CP_AUDIT_RETENTION_DAYS go, oldest first, never one
 * above a cursor a follower of GET /operations used within the hold; what went is itself audited.
 */
describe('audit retention', () => {
  let t: TestApp;
  afterEach(() => t?.close());

  const page = async (q: string): Promise<{ next_cursor: number; entries: AuditEntry[] }> => {
    const r = await t.req('GET', `/operations${q}`);
    expect(r.status).toBe(200);
    return r.body;
  };
  const everything = async () => {
    const out: AuditEntry[] = [];
    for (let since = 0; ; ) {
      const p = await page(`?since=${since}&limit=10000`);
      out.push(...p.entries);
      if (!p.entries.length) return out;
      since = p.next_cursor;
    }
  };

  it('keeps every entry when no retention is set', async () => {
    t = await startApp({ IPXE_CP_AUDIT_SEGMENT_MB: '1' });
    const clock = t.app.get(Clock);
    const real = clock.now.bind(clock);
    clock.now = () => new Date(real().getTime() - 400 * DAY);
    await t.req('POST', '/workers', { worker_id: 'old-1' });
    clock.now = real;
    const before = await everything();
    expect(await t.app.get(AuditRetentionService).run()).toBeNull();
    expect(await everything()).toEqual(before);
  });

  it('drops what is past the retention, holds what a follower still reads, and audits what it dropped', async () => {
    t = await startApp({ IPXE_CP_AUDIT_RETENTION_DAYS: '7', IPXE_CP_AUDIT_SEGMENT_MB: '1', IPXE_CP_AUDIT_CURSOR_HOLD_HOURS: '24' });
    const clock = t.app.get(Clock);
    const audit = t.app.get(AuditService);
    let now = Date.now();
    clock.now = () => new Date(now);

    // A month ago: a worker, then 3 MiB of entries (files: two or more closed segments).
    now -= 30 * DAY;
    expect((await t.req('POST', '/workers', { worker_id: 'old-1' })).status).toBe(201);
    const old: AuditEntry[] = [];
    for (let i = 0; i < 60; i++) old.push(await audit.record('test.filler', { n: i, note: 'o'.repeat(50_000) }));
    // Today: another worker and more entries (files: the segment closed now ends with recent ones).
    now += 30 * DAY;
    expect((await t.req('POST', '/workers', { worker_id: 'new-1' })).status).toBe(201);
    for (let i = 0; i < 25; i++) await audit.record('test.filler', { n: 100 + i, note: 'n'.repeat(50_000) });
    const before = await everything();
    const recent = before.filter((e) => Date.parse(e.ts) > now - DAY);
    expect(recent.length).toBeGreaterThanOrEqual(26);

    // A follower is paging through from the 31st old entry (files: inside the second segment).
    const cursor = old[30].id;
    expect((await page(`?since=${cursor}&limit=5`)).entries[0].id).toBeGreaterThan(cursor);
    const first = await t.app.get(AuditRetentionService).run();
    expect(first).not.toBeNull();
    expect(first!.from_id).toBe(before[0].id);
    expect(first!.through_id).toBeLessThanOrEqual(cursor);
    if (onPostgres()) expect(first!.through_id).toBe(cursor);
    const kept = await everything();
    expect(kept.filter((e) => e.op !== 'audit.retention')).toEqual(before.filter((e) => e.id > first!.through_id));
    // Nothing the follower still reads went.
    expect((await page(`?since=${cursor}&limit=10000`)).entries.filter((e) => e.op !== 'audit.retention')).toEqual(before.filter((e) => e.id > cursor));
    const record = kept.find((e) => e.op === 'audit.retention')!;
    expect(record).toMatchObject({ from_id: first!.from_id, through_id: first!.through_id, retention_days: 7, held_cursor: cursor, client: 'retention' });
    expect((await page('?op=audit.*')).entries.map((e) => e.id)).toEqual([record.id]);

    // A day later the follower's hold has lapsed: every old entry may go, never a recent one.
    now += 25 * 3600_000;
    const second = await t.app.get(AuditRetentionService).run();
    expect(second).not.toBeNull();
    expect(second!.from_id).toBeGreaterThan(first!.through_id);
    const left = await everything();
    for (const e of recent) expect(left).toContainEqual(e);
    expect(left.some((e) => e.id <= second!.through_id)).toBe(false);
    // PostgreSQL drops every old row; files keep the old entries that share the open file or a
    // segment with recent ones (whole files only).
    if (onPostgres()) expect(left.filter((e) => Date.parse(e.ts) < now - 7 * DAY)).toEqual([]);
    else if (fs.existsSync(path.join(t.dir, 'state'))) {
      const segs = fs.readdirSync(path.join(t.dir, 'state')).filter((f) => /^operations\.\d+-\d+\.jsonl$/.test(f));
      for (const f of segs) expect(Number(f.split('.')[1].split('-')[1])).toBeGreaterThan(second!.through_id);
    }
    // Ids go on after a restart on the same store.
    const lastId = left[left.length - 1].id;
    await t.close();
    t = await startApp({ IPXE_CP_AUDIT_RETENTION_DAYS: '7', IPXE_CP_AUDIT_SEGMENT_MB: '1' }, { dir: t.dir });
    expect((await t.req('POST', '/workers', { worker_id: 'after-1' })).status).toBe(201);
    const tail = (await page('?tail=1&op=worker.create')).entries[0];
    expect(tail.worker_id).toBe('after-1');
    expect(tail.id).toBeGreaterThan(lastId);
  }, 60_000);
});
