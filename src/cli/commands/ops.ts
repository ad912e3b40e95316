import type { Schemas } from '../../client';
import { call, CliContext, int } from '../context';

/** `kurrent ops ...`: the audit trail. */
export function opsCommands(ctx: CliContext): void {
  const { program, io, g, api, verb } = ctx;
  const ops = program.command('ops').description('the audit trail (GET /operations)');
  verb(ops, 'list', 'operations, oldest first; --follow keeps printing new ones', 'kurrent ops list --mac 52:54:00:12:34:56 --follow')
    .option('--since <id>', 'only after this id', int('--since'))
    .option('--limit <n>', 'at most this many per page', int('--limit'))
    .option('--mac <mac>', 'only about this device')
    .option('--follow', 'tail new operations (Ctrl-C stops): waits on the change feed (GET /changes), no polling')
    .action(async (o: { since?: number; limit?: number; mac?: string; follow?: boolean }) => {
      let since = o.since ?? 0;
      const show = (entries: Schemas['OperationEntryDto'][]) => {
        for (const e of entries) {
          const extra = Object.entries(e)
            .filter(([k]) => !['id', 'ts', 'op', 'status', 'client'].includes(k))
            .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`)
            .join(' ');
          io.out(g().json ? JSON.stringify(e) + '\n' : `${e.id}  ${e.ts}  ${e.op}  ${e.status}  ${extra}\n`);
        }
      };
      // The feed's cursor is taken before the first page, so nothing recorded in between is missed.
      let cursor = o.follow ? (await call(api().GET('/changes', { params: { query: { wait: 0 } } }))).cursor : '';
      // Each long-poll ends well within the request timeout.
      const wait = Math.max(1, Math.min(25, Math.floor(g().requestTimeout) - 5));
      for (;;) {
        const page = await call(api().GET('/operations', { params: { query: { since, ...(o.limit ? { limit: o.limit } : {}), ...(o.mac ? { mac: o.mac } : {}) } } }));
        show(page.entries);
        since = page.next_cursor;
        if (!o.follow) return;
        if (page.entries.length) continue; // more may be waiting
        // Another control plane's entries arrive with its ledger changes.
        for (let topics: string[] = []; !topics.some((x) => x === 'audit' || x === 'ledger'); ) {
          const r = await call(api().GET('/changes', { params: { query: { cursor, wait } } }));
          cursor = r.cursor;
          topics = r.reset ? ['audit'] : r.topics;
        }
      }
    });

}
