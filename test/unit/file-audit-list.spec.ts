import * as fs from 'node:fs';
import * as path from 'node:path';
import { Clock } from '../../src/control-plane/common/clock';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import type { AuditEntry, AuditQuery } from '../../src/control-plane/repositories/audit/audit.repository';
import { FileAuditRepository } from '../../src/control-plane/repositories/audit/file-audit.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';

/**
 * GET /operations on files without reading from the start (bisecting for `since`, reading
 * backwards for `tail`) answers exactly what a full scan answers: every query below is checked
 * against a plain filter over all the entries, on an audit with lines longer than the read
 * window, unreadable lines, and gaps in the ids (cancelled commits).
 */
describe('FileAuditRepository.list', () => {
  const dir = tempDir('kurrent-audit-list-');
  const all: AuditEntry[] = [];
  let repo: FileAuditRepository;

  beforeAll(async () => {
    const lines: string[] = [];
    let id = 0;
    for (let i = 0; i < 20_000; i++) {
      id += i % 97 === 0 ? 3 : 1; // skipped ids
      const e: AuditEntry = { id, ts: '2026-12-03T00:00:00+00:00', op: ['device.report', 'worker.create', 'disk.reset', 'bind'][i % 4], status: 'ok', mac: `02:00:00:00:${String(i % 50).padStart(2, '0')}:01` };
      if (i % 2_500 === 7) e.note = 'x'.repeat(100_000); // longer than one 64 KiB read
      if (i % 3_000 === 11) e.macs = ['02:00:00:00:99:99'];
      all.push(e);
      lines.push(JSON.stringify(e));
      if (i % 4_000 === 5) lines.push('{not json'); // hand-edited or glued by an old writer
    }
    fs.mkdirSync(path.join(dir, 'state'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'state', 'operations.jsonl'), lines.join('\n') + '\n');
    repo = new FileAuditRepository({ stateDir: path.join(dir, 'state') } as AppConfig, new FileSystem(), new Clock());
    await repo.onModuleInit();
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const reference = (q: AuditQuery & { since: number; limit: number }) => {
    const m = all.filter(
      (e) =>
        e.id > q.since &&
        (!q.mac || e.mac === q.mac || (Array.isArray(e.macs) && e.macs.includes(q.mac))) &&
        (!q.op || (q.op.endsWith('.*') ? e.op.startsWith(q.op.slice(0, -1)) : e.op === q.op)),
    );
    return q.tail ? m.slice(-q.tail) : m.slice(0, q.limit);
  };
  const last = () => all[all.length - 1].id;

  it.each([
    ['from the start', { since: 0, limit: 100 }],
    ['after the middle', { since: 10_150, limit: 100 }],
    ['after an id that was skipped', { since: 97 * 50 + 2, limit: 5 }],
    ['after an id past the end', { since: 99_999_999, limit: 100 }],
    ['after the last but three', { since: 0, limit: 100, sinceFromEnd: 3 }],
    ['a rare filter from the middle', { since: 9_000, limit: 10, mac: '02:00:00:00:99:99' }],
    ['an op family', { since: 15_000, limit: 50, op: 'device.*' }],
    ['tail 100', { since: 0, limit: 100, tail: 100 }],
    ['tail 1, filtered by MAC', { since: 0, limit: 100, tail: 1, mac: '02:00:00:00:07:01' }],
    ['tail of a rare filter (reads back to the start)', { since: 0, limit: 100, tail: 50, mac: '02:00:00:00:99:99' }],
    ['tail after a cursor near the end', { since: 0, limit: 100, tail: 100, sinceFromEnd: 10 }],
    ['tail over the long lines', { since: 0, limit: 100, tail: 3000, op: 'worker.create' }],
  ])('%s: the same entries as a full scan', async (_name, raw) => {
    const { sinceFromEnd, ...q } = raw as AuditQuery & { since: number; limit: number; sinceFromEnd?: number };
    if (sinceFromEnd !== undefined) q.since = last() - sinceFromEnd;
    const got = await repo.list(q);
    const want = reference(q);
    expect(got.entries.map((e) => e.id)).toEqual(want.map((e) => e.id));
    expect(got.next_cursor).toBe(want.length ? want[want.length - 1].id : q.since);
  });
});
