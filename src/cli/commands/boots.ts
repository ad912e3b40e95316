import { call, CliContext, int } from '../context';
import { fields, table } from '../output';

/** `kurrent boots ...`: boot sessions, boot loops and their release; `kurrent settings boot-policy`. */
export function bootCommands(ctx: CliContext): void {
  const { program, api, print, verb } = ctx;
  const boots = program.command('boots').description('boots of the fleet, stage by stage (GET /boots)');
  verb(boots, 'list', 'boots, newest first, with their stages and outcome', 'kurrent boots list --outcome failed --since 2026-12-02T08:00:00Z')
    .option('--mac <mac>', 'only this device')
    .option('--worker <id>', 'only this worker')
    .option('--outcome <outcome>', 'in_progress, booted, failed, stuck, superseded, waiting or held')
    .option('--since <time>', 'only boots with a stage at or after this ISO time')
    .option('--limit <n>', 'at most this many (default 100)', int('--limit'))
    .action(async (o: { mac?: string; worker?: string; outcome?: string; since?: string; limit?: number }) => {
      const query = { ...(o.mac ? { mac: o.mac } : {}), ...(o.worker ? { worker_id: o.worker } : {}), ...(o.outcome ? { outcome: o.outcome as never } : {}), ...(o.since ? { since: o.since } : {}), ...(o.limit ? { limit: o.limit } : {}) };
      const data = await call(api().GET('/boots', { params: { query } }));
      print(data, () =>
        table(
          data.items.map((b) => ({
            ...b,
            stages: b.stages.map((s) => `${s.stage}+${(s.offset_ms / 1000).toFixed(1)}s`).join(' '),
            reason: b.reason ?? (b.looping ? 'looping' : ''),
          })),
          ['started_at', 'mac', 'worker_id', 'outcome', 'stages', 'reason'],
        ),
      );
    });
  verb(boots, 'release', "release a looping device's hold: its next boot is answered as before (audited)", 'kurrent boots release 52:54:00:12:34:56')
    .argument('<mac>', 'the device')
    .action(async (mac: string) => {
      const data = await call(api().POST('/boots/{mac}/release', { params: { path: { mac } } }));
      print(data, () => (data.released ? `${data.mac} released: it boots normally at its next power-on\n` : `${data.mac} was not looping\n`));
    });
  const settings = program.commands.find((c) => c.name() === 'settings');
  if (!settings) return;
  verb(settings, 'boot-policy', 'show, or change, when a boot is stuck and when a device is looping (and whether it is held)', 'kurrent settings boot-policy --loop-action keep-looping')
    .option('--loop-threshold <n>', 'boots that never reach the disk that make a loop', int('--loop-threshold'))
    .option('--loop-window <minutes>', 'the window they are counted in', int('--loop-window'))
    .option('--loop-action <action>', 'hold or keep-looping')
    .option('--stuck-after <seconds>', 'a boot with no next stage for this long is stuck', int('--stuck-after'))
    .action(async (o: { loopThreshold?: number; loopWindow?: number; loopAction?: string; stuckAfter?: number }) => {
      const body = {
        ...(o.loopThreshold !== undefined ? { loop_threshold: o.loopThreshold } : {}),
        ...(o.loopWindow !== undefined ? { loop_window_minutes: o.loopWindow } : {}),
        ...(o.loopAction !== undefined ? { loop_action: o.loopAction as never } : {}),
        ...(o.stuckAfter !== undefined ? { stuck_after_seconds: o.stuckAfter } : {}),
      };
      const data = Object.keys(body).length ? await call(api().PUT('/settings/boot-policy', { body })) : await call(api().GET('/settings/boot-policy'));
      print(data, () => fields(data as never));
    });
}
