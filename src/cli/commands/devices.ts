import * as fs from 'node:fs';
import type { Schemas } from '../../client';
import { call, CliContext, int, parseDevices, parsePairs, summary } from '../context';
import { ago, CliError, EXIT, fields, table } from '../output';

/** `kurrent devices ...`: machines by MAC, the registration window, bindings. */
export function deviceCommands(ctx: CliContext): void {
  const { program, api, print, progress, confirm, verb } = ctx;
  const devices = program.command('devices').description('physical machines by MAC');
  verb(devices, 'list', 'devices, optionally by state or text', 'kurrent devices list --state pooled --search dell')
    .option('--state <state>', 'pooled | bound | revoked')
    .option('--search <text>', 'MAC in any spelling, serial, product, manufacturer or bound worker contains this')
    .option('--limit <n>', 'at most n devices (in MAC order)', int('--limit'))
    .action(async (o: { state?: 'pooled' | 'bound' | 'revoked'; search?: string; limit?: number }) => {
      // Filtered, searched and paged by the control plane (GET /devices/page, as the web UI):
      // a 100,000-device pool is never one 43 MB answer, and --limit stops after what it needs.
      if (o.limit === 0) throw new CliError('--limit must be at least 1, got 0', EXIT.usage);
      const query = { state: o.state ?? 'all', ...(o.search ? { q: o.search } : {}) } as const;
      const want = o.limit ?? Infinity;
      const data: Schemas['DeviceDto'][] = [];
      let after: string | undefined;
      do {
        const page = await call(api().GET('/devices/page', { params: { query: { ...query, limit: Math.min(1000, want - data.length), ...(after ? { after } : {}) } } }));
        data.push(...page.items);
        after = page.next_after ?? undefined;
      } while (after && data.length < want);
      print(data, () =>
        table(
          data.map((d) => ({ ...d, product: d.fingerprint.product, serial: d.fingerprint.serial, key: d.key_sha256 ? 'claimed' : '-', last_seen: ago(d.last_seen) })),
          ['mac', 'state', 'bound_worker_id', 'product', 'serial', 'key', 'last_seen'],
        ),
      );
    });
  verb(devices, 'show', 'one device', 'kurrent devices show 52:54:00:12:34:56')
    .argument('<mac>')
    .action(async (mac: string) => {
      const data = await call(api().GET('/devices/{mac}', { params: { path: { mac } } }));
      print(data, () => fields(data as never));
    });
  verb(devices, 'register', 'pre-register a device (pooled)', 'kurrent devices register 52:54:00:12:34:56 --serial SN1')
    .argument('<mac>')
    .option('--serial <s>')
    .option('--product <s>')
    .option('--manufacturer <s>')
    .option('--uuid <s>')
    .action(async (mac: string, o: { serial?: string; product?: string; manufacturer?: string; uuid?: string }) => {
      const data = await call(api().POST('/devices', { body: { mac, ...o } }));
      print(data, () => fields(data as never));
    });
  verb(devices, 'import', 'register many from a CSV (mac[,serial,product,manufacturer,uuid]) or JSON file, - for stdin', 'kurrent devices import seats.csv')
    .argument('<file>')
    .action(async (file: string) => {
      const text = fs.readFileSync(file === '-' ? 0 : file, 'utf8');
      const entries = parseDevices(text);
      progress(`importing ${entries.length} devices...`);
      const data = await call(api().POST('/devices/import', { body: { entries } }));
      print(data, () => `created ${data.created.length}, skipped ${data.skipped.length}, failed ${data.failed.length}\n${data.failed.map((f) => `  failed ${f.mac}: ${f.error}\n`).join('')}`);
    });
  verb(devices, 'revoke', 'revoke a device (it never boots as a worker again until restored)', 'kurrent devices revoke 52:54:00:12:34:56 --yes')
    .argument('<mac>')
    .action(async (mac: string) => {
      await confirm(`revoke device ${mac}`);
      const data = await call(api().DELETE('/devices/{mac}', { params: { path: { mac } } }));
      print(data, () => `${mac}: revoked\n`);
    });
  verb(devices, 'restore', 'undo a revocation: the device returns to the pool, keyless', 'kurrent devices restore 52:54:00:12:34:56')
    .argument('<mac>')
    .action(async (mac: string) => {
      const data = await call(api().POST('/devices/{mac}/restore', { params: { path: { mac } } }));
      print(data, () => `${data.mac}: ${data.state}\n`);
    });
  verb(devices, 'bind', 'bind a device to a worker (--force moves a bound one)', 'kurrent devices bind 52:54:00:12:34:56 seat-01')
    .argument('<mac>')
    .argument('<worker_id>')
    .option('--force', 'take the device (or the worker) from its current binding')
    .action(async (mac: string, worker: string, o: { force?: boolean }) => {
      if (o.force) await confirm(`force-bind ${mac} to ${worker}`);
      const data = await call(api().POST('/devices/{mac}/bind', { params: { path: { mac }, query: { worker_id: worker, ...(o.force ? { force: true } : {}) } } }));
      print(data, () => fields(data as never));
    });
  verb(devices, 'unbind', 'return a device to the pool', 'kurrent devices unbind 52:54:00:12:34:56')
    .argument('<mac>')
    .action(async (mac: string) => {
      const data = await call(api().DELETE('/devices/{mac}/bind', { params: { path: { mac } } }));
      print(data, () => fields(data as never));
    });
  verb(devices, 'batch-bind', 'bind a manifest of "mac,worker_id" lines (or JSON pairs); --preview shows the plan only', 'kurrent devices batch-bind manifest.csv --preview')
    .argument('<file>')
    .option('--preview', 'show matched, conflicts and not found; change nothing')
    .action(async (file: string, o: { preview?: boolean }) => {
      const pairs = parsePairs(fs.readFileSync(file === '-' ? 0 : file, 'utf8'));
      progress(`${o.preview ? 'previewing' : 'binding'} ${pairs.length} pairs...`);
      const data = o.preview
        ? await call(api().POST('/devices/bind/batch/preview', { body: { pairs } }))
        : await call(api().POST('/devices/bind/batch', { body: { pairs } }));
      print(data, () => summary(data as unknown as Record<string, unknown>));
    });
  verb(devices, 'key-reset', "forget a device's key (it claims a new one in the next window)", 'kurrent devices key-reset 52:54:00:12:34:56 --yes')
    .argument('<mac>')
    .action(async (mac: string) => {
      await confirm(`reset the key of ${mac}`);
      const data = await call(api().DELETE('/devices/{mac}/key', { params: { path: { mac } } }));
      print(data, () => fields(data as never));
    });
  const windowCmd = devices.command('window').description('registration window (secure mode)');
  verb(windowCmd, 'open', 'open the window', 'kurrent devices window open --ttl 15 --max 50')
    .requiredOption('--ttl <minutes>', '1-60', int('--ttl'))
    .option('--max <devices>', 'quota of new devices', int('--max'))
    .action(async (o: { ttl: number; max?: number }) => {
      const data = await call(api().POST('/devices/registration-window', { body: { ttl_minutes: o.ttl, ...(o.max !== undefined ? { max_devices: o.max } : {}) } }));
      print(data, () => fields(data as never));
    });
  verb(windowCmd, 'show', 'the window: open, expiry, seats left', 'kurrent devices window show').action(async () => {
    const data = await call(api().GET('/devices/registration-window'));
    print(data, () => fields(data as never));
  });
  verb(windowCmd, 'close', 'close the window now', 'kurrent devices window close').action(async () => {
    const data = await call(api().DELETE('/devices/registration-window'));
    print(data, () => fields(data as never));
  });

}
