import { call, CliContext } from '../context';
import { CliError, EXIT, fields } from '../output';

/** `kurrent settings ...` and `kurrent reconcile`. */
export function settingsCommands(ctx: CliContext): void {
  const { program, api, print, verb } = ctx;
  const settings = program.command('settings').description('global switches');
  const onOff = (v: string) => {
    if (v !== 'on' && v !== 'off') throw new CliError(`expected on or off, got ${JSON.stringify(v)}`, EXIT.usage);
    return v === 'on';
  };
  verb(settings, 'admission', 'how new devices are admitted now (open, window, closed), the window, and what was refused', 'kurrent settings admission').action(async () => {
    const data = await call(api().GET('/settings/admission'));
    print(data, () => {
      const w = data.window;
      const refused = Object.entries(data.refused.by_reason)
        .filter(([, n]) => n)
        .map(([r, n]) => `${r} ${n}`)
        .join(', ');
      return (
        `mode: ${data.mode}\n${data.explanation}\n` +
        `window: ${w.open ? `open until ${w.expires_at}` : w.opened_at ? `closed (last opened ${w.opened_at})` : 'never opened'}, admitted ${w.admitted}${w.max_devices ? ` of ${w.max_devices}` : ''}\n` +
        `refused since ${data.refused.since}: ${data.refused.total}${refused ? ` (${refused})` : ''}\n`
      );
    });
  });
  verb(settings, 'auto-register', 'show, or turn on/off, pooling of new MACs (open mode; see admission)', 'kurrent settings auto-register off')
    .argument('[state]', 'on | off', onOff)
    .action(async (on: boolean | undefined) => {
      const data = on === undefined ? await call(api().GET('/settings/auto-register')) : await call(api().PUT('/settings/auto-register', { body: { enabled: on } }));
      print(data, () => fields(data as never));
    });
  verb(settings, 'enforcement', 'show, or turn on/off, signature enforcement', 'kurrent settings enforcement on --force')
    .argument('[state]', 'on | off', onOff)
    .option('--force', 'even with bound devices that have no key')
    .action(async (on: boolean | undefined, o: { force?: boolean }) => {
      const data =
        on === undefined
          ? await call(api().GET('/settings/signature-enforcement'))
          : await call(api().PUT('/settings/signature-enforcement', { body: { enabled: on, ...(o.force ? { force: true } : {}) } }));
      print(data, () => fields(data as never));
    });
  verb(program, 'reconcile', 'run one credential reconciler pass now', 'kurrent reconcile').action(async () => {
    const data = await call(api().POST('/reconcile'));
    print(data, () => `${data.pushed.length} pushed, ${data.removed.length} removed, ${data.failed.length} failed, ${data.not_due} waiting\n`);
  });

}
