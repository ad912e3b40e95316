import { Command, CommanderError, Option } from 'commander';
import * as fs from 'node:fs';
import * as readline from 'node:readline';
import { createKurrentClient, KurrentClient, Schemas } from '../client';
import { ago, CliError, exitCodeOf, EXIT, fields, table } from './output';

/**
 * `kurrent`: the operator's CLI, one more client of the REST API (the typed client generated from
 * the spec). Global options: --url / KURRENT_URL, --token / KURRENT_TOKEN, --request-timeout / KURRENT_REQUEST_TIMEOUT, --json, --yes.
 */

interface Globals {
  url: string;
  token?: string;
  requestTimeout: number;
  json?: boolean;
  yes?: boolean;
}

type Io = { out: (s: string) => void; err: (s: string) => void; isTTY: boolean; stdin: NodeJS.ReadableStream };

const EXIT_HELP = `
Exit codes: 0 ok, 1 other API error, 2 usage (or a destructive verb without --yes), 3 auth (401/403),
4 not found, 5 conflict, 6 server error or unreachable.
Environment: KURRENT_URL (default http://localhost:4839), KURRENT_TOKEN, KURRENT_REQUEST_TIMEOUT (seconds, 30).`;

/** Unwraps an openapi-fetch answer: the data, or a CliError with the API's message and exit code. */
async function call<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  let r: { data?: T; error?: unknown; response: Response };
  try {
    r = await p;
  } catch (e) {
    if ((e as Error).name === 'TimeoutError') throw new CliError(`the control plane did not answer within the timeout (--request-timeout / KURRENT_REQUEST_TIMEOUT)`, EXIT.server);
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new CliError(`cannot reach the control plane: ${cause?.code ?? cause?.message ?? (e as Error).message}`, EXIT.server);
  }
  if (!r.response.ok) {
    const body = r.error as { message?: string } | string | undefined;
    const msg = typeof body === 'object' && body?.message ? body.message : typeof body === 'string' && body ? body : r.response.statusText;
    throw new CliError(`${r.response.status}: ${msg}`, exitCodeOf(r.response.status));
  }
  return r.data as T;
}

const seconds = (v: string) => {
  if (!/^\d+(\.\d+)?$/.test(v) || Number(v) <= 0 || Number(v) > 3600) throw new CliError(`--request-timeout must be a number of seconds between 0 and 3600, got ${JSON.stringify(v)}`, EXIT.usage);
  return Number(v);
};
const list = (v: string) => v.split(',').map((s) => s.trim()).filter(Boolean);
const int = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new CliError(`${name} must be a whole number, got ${JSON.stringify(v)}`, EXIT.usage);
  return Number(v);
};

/** Builds the program; `io` is swappable so tests and completion can drive it. */
export function buildProgram(io: Io, env: NodeJS.ProcessEnv = process.env): Command {
  const program = new Command('kurrent')
    .description('Operate a Kurrent control plane: devices, workers, disks, agents, credentials, audit.')
    .addOption(new Option('--url <url>', 'control plane URL').env('KURRENT_URL').default(env.KURRENT_URL ?? 'http://localhost:4839'))
    .addOption(new Option('--token <token>', 'bearer token (IPXE_CP_TOKEN)').env('KURRENT_TOKEN'))
    .addOption(new Option('--request-timeout <seconds>', 'give up on a request without an answer after this long').env('KURRENT_REQUEST_TIMEOUT').default(30).argParser(seconds))
    .option('--json', 'print JSON instead of tables (for scripts)')
    .option('-y, --yes', 'do destructive things without asking')
    .addHelpText('after', EXIT_HELP)
    .showHelpAfterError()
    .configureOutput({ writeOut: io.out, writeErr: io.err })
    .exitOverride();

  const g = (): Globals => program.opts<Globals>();
  const api = (): KurrentClient => createKurrentClient({ baseUrl: g().url, token: g().token, timeoutMs: g().requestTimeout * 1000 });
  const print = (data: unknown, human: () => string) => io.out(g().json ? JSON.stringify(data, null, 2) + '\n' : human());
  const progress = (s: string) => {
    if (!g().json) io.err(`${s}\n`);
  };
  /** Destructive verbs: a y/N question on a terminal, --yes anywhere else. */
  const confirm = async (what: string) => {
    if (g().yes) return;
    if (!io.isTTY) throw new CliError(`refusing to ${what} without --yes (not a terminal)`, EXIT.usage);
    const rl = readline.createInterface({ input: io.stdin, output: process.stderr });
    const answer = await new Promise<string>((r) => rl.question(`${what}? [y/N] `, r));
    rl.close();
    if (!/^y(es)?$/i.test(answer.trim())) throw new CliError('cancelled', EXIT.usage);
  };
  const verb = (parent: Command, name: string, description: string, example: string) =>
    parent.command(name).description(description).addHelpText('after', `\nExample:\n  $ ${example}\n`);

  // ---- agents ----
  const agents = program.command('agents').description('storage agents (config/agents.yml)');
  verb(agents, 'list', 'agents with live health and capabilities', 'kurrent agents list')
    .option('--no-live', 'do not probe the agents')
    .action(async (o: { live: boolean }) => {
      const data = await call(api().GET('/agents', { params: { query: { live: o.live } } }));
      print(data, () => table(data as never, ['id', 'base_url', 'iscsi_server', 'enabled', 'health', 'capabilities.backend', 'tags']));
    });
  verb(agents, 'probe', 'test an agent URL and token before adding it', 'kurrent agents probe http://10.0.0.3:4840 --agent-token s3cret')
    .argument('<base_url>')
    .option('--agent-token <token>', "the agent's token")
    .action(async (baseUrl: string, o: { agentToken?: string }) => {
      const data = await call(api().POST('/agents/probe', { body: { base_url: baseUrl, ...(o.agentToken ? { token: o.agentToken } : {}) } }));
      print(data, () => fields(data as never));
    });
  const agentBody = (o: { baseUrl?: string; iscsiServer?: string; role?: string[]; tag?: string[]; agentToken?: string }) => ({
    ...(o.iscsiServer ? { iscsi_server: o.iscsiServer } : {}),
    ...(o.role ? { role: { disk: o.role.includes('disk'), cd: o.role.includes('cd') } } : {}),
    ...(o.tag ? { tags: o.tag } : {}),
    ...(o.agentToken !== undefined ? { token: o.agentToken } : {}),
  });
  const agentOptions = (c: Command) =>
    c
      .option('--iscsi-server <address>', 'data-plane address workers connect to')
      .option('--role <roles>', 'disk,cd', list)
      .option('--tag <tags>', 'comma-separated tags (lio/stgt pick the iSCSI separator)', list)
      .option('--agent-token <token>', "the agent's token, or ${ENV_NAME}");
  agentOptions(verb(agents, 'add', 'register an agent', 'kurrent agents add st1 --base-url http://10.0.0.3:4840 --role disk,cd --tag storage,stgt'))
    .argument('<id>')
    .requiredOption('--base-url <url>', "the agent's HTTP API")
    .action(async (id: string, o: { baseUrl: string }) => {
      const data = await call(api().POST('/agents', { body: { id, base_url: o.baseUrl, ...agentBody(o) } }));
      print(data, () => fields(data as never));
    });
  /** PUT replaces an agent: the CLI sends what the agent has now with the given changes on top. */
  const putAgent = async (id: string, change: (a: Schemas['AgentDto']) => Record<string, unknown>) => {
    const all = await call(api().GET('/agents', { params: { query: { live: false } } }));
    const a = all.find((x) => x.id === id);
    if (!a) throw new CliError(`404: agent not found: ${id}`, EXIT.notFound);
    const body = { base_url: a.base_url, iscsi_server: a.iscsi_server, role: a.role, tags: a.tags, enabled: a.enabled, ...change(a) };
    return call(api().PUT('/agents/{agent_id}', { params: { path: { agent_id: id } }, body: body as never }));
  };
  agentOptions(verb(agents, 'update', 'change some fields of an agent (the others stay)', 'kurrent agents update st1 --iscsi-server 10.0.0.3'))
    .argument('<id>')
    .option('--base-url <url>', "the agent's HTTP API")
    .action(async (id: string, o: { baseUrl?: string }) => {
      const data = await putAgent(id, () => ({ ...(o.baseUrl ? { base_url: o.baseUrl } : {}), ...agentBody(o) }));
      print(data, () => fields(data as never));
    });
  for (const [name, enabled, what] of [
    ['drain', false, 'no new disks on the agent (existing ones keep serving)'],
    ['enable', true, 'accept new disks again'],
  ] as const) {
    verb(agents, name, what, `kurrent agents ${name} st1`)
      .argument('<id>')
      .action(async (id: string) => {
        const data = await putAgent(id, () => ({ enabled }));
        print(data, () => `${id}: ${enabled ? 'enabled' : 'drained'}\n`);
      });
  }
  verb(agents, 'delete', 'remove an agent from the registry (refused while workers have disks there)', 'kurrent agents delete st1')
    .argument('<id>')
    .option('--force', 'remove it anyway: its disks stay in the ledger, unbootable, until deleted or the agent is added again')
    .action(async (id: string, o: { force?: boolean }) => {
      const data = await call(api().DELETE('/agents/{agent_id}', { params: { path: { agent_id: id }, query: o.force ? { force: true } : {} } }));
      print(data, () => `${data.deleted}: removed${data.targets_left.length ? `; left unbootable: ${data.targets_left.join(', ')}` : ''}\n`);
    });
  verb(agents, 'luns', "the agent's targets as it lists them", 'kurrent agents luns st1')
    .argument('<id>')
    .action(async (id: string) => {
      const data = await call(api().GET('/agents/{agent_id}/luns', { params: { path: { agent_id: id } } }));
      print(data, () => table(data.map((t) => ({ name: t.iqn ?? t.nqn, cd: t.cd, backing: t.luns.map((l) => l.backing) })), ['name', 'cd', 'backing']));
    });

  // ---- masters ----
  verb(program, 'masters', 'master images of every agent', 'kurrent masters').action(async () => {
    const data = await call(api().GET('/masters'));
    print(data, () => table(data.agents.flatMap((a) => a.masters.map((m) => ({ agent: a.agent, ...m }))), ['agent', 'name', 'size', 'mtime']));
  });

  // ---- devices ----
  const devices = program.command('devices').description('physical machines by MAC');
  verb(devices, 'list', 'devices, optionally by state or text', 'kurrent devices list --state pooled --search dell')
    .option('--state <state>', 'pooled | bound | revoked')
    .option('--search <text>', 'MAC, serial or product contains this')
    .action(async (o: { state?: 'pooled' | 'bound' | 'revoked'; search?: string }) => {
      let data = await call(api().GET('/devices', { params: { query: o.state ? { state: o.state } : {} } }));
      if (o.search) {
        const q = o.search.toLowerCase();
        data = data.filter((d) => [d.mac, d.fingerprint.serial, d.fingerprint.product].some((v) => v?.toLowerCase().includes(q)));
      }
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
  verb(devices, 'revoke', 'revoke a device (unbinds it; it never boots as a worker again)', 'kurrent devices revoke 52:54:00:12:34:56 --yes')
    .argument('<mac>')
    .action(async (mac: string) => {
      await confirm(`revoke device ${mac}`);
      const data = await call(api().DELETE('/devices/{mac}', { params: { path: { mac } } }));
      print(data, () => `${mac}: revoked\n`);
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

  // ---- workers ----
  const workers = program.command('workers').description('worker identities, their disks and credentials');
  verb(workers, 'create', 'create a worker (bind --mac when given)', 'kurrent workers create seat-01 --mac 52:54:00:12:34:56')
    .argument('<worker_id>')
    .option('--mac <mac>')
    .option('--hostname <name>')
    .option('--arch <arch>')
    .action(async (id: string, o: { mac?: string; hostname?: string; arch?: string }) => {
      const data = await call(api().POST('/workers', { body: { worker_id: id, ...o } }));
      print(data, () => fields(data as never, ['worker_id', 'hostname', 'mac', 'state', 'readiness']));
    });
  verb(workers, 'batch', 'create <count> workers <prefix>NN (idempotent)', 'kurrent workers batch --prefix seat- --count 20')
    .requiredOption('--count <n>', '1-100', int('--count'))
    .option('--prefix <prefix>', 'name prefix', 'worker-')
    .action(async (o: { count: number; prefix: string }) => {
      progress(`creating ${o.count} workers...`);
      const data = await call(api().POST('/workers/batch', { body: { count: o.count, name_prefix: o.prefix } }));
      print(data, () => summary(data as unknown as Record<string, unknown>));
    });
  verb(workers, 'list', 'all workers', 'kurrent workers list').action(async () => {
    const data = await call(api().GET('/workers'));
    print(data, () => table(data.map((w) => ({ ...w, disks: w.disks.map((d) => d.os + (d.os_version ? `@${d.os_version}` : '')) })), ['worker_id', 'hostname', 'mac', 'readiness', 'state', 'disks', 'default_os', 'default_disk']));
  });
  verb(workers, 'show', 'one worker', 'kurrent workers show seat-01')
    .argument('<worker_id>')
    .action(async (id: string) => {
      const data = await call(api().GET('/workers/{worker_id}', { params: { path: { worker_id: id } } }));
      print(data, () => fields(data as never));
    });
  verb(workers, 'status', 'the ledger entry and what dnsmasq and the agents have', 'kurrent workers status seat-01')
    .argument('<worker_id>')
    .action(async (id: string) => {
      const data = await call(api().GET('/workers/{worker_id}/status', { params: { path: { worker_id: id } } }));
      print(data, () => fields({ worker: data.worker.worker_id, dnsmasq: data.actual.dnsmasq, disks: data.actual.disks.map((d) => `${d.os}:${d.exists ? 'ok' : d.error ?? 'missing'}`) }));
    });
  verb(workers, 'delete', 'delete a worker (its device returns to the pool, its targets go)', 'kurrent workers delete seat-01 --delete-disk --yes')
    .argument('<worker_id>')
    .option('--delete-disk', 'also delete the .img files')
    .option('--ignore-missing-target', "an agent's 404 counts as done")
    .action(async (id: string, o: { deleteDisk?: boolean; ignoreMissingTarget?: boolean }) => {
      await confirm(`delete worker ${id}${o.deleteDisk ? ' and its disk files' : ''}`);
      const data = await call(api().DELETE('/workers/{worker_id}', { params: { path: { worker_id: id }, query: { delete_disk: !!o.deleteDisk, ignore_missing_target: !!o.ignoreMissingTarget } } }));
      print(data, () => fields(data as never));
    });
  verb(workers, 'mac', 'rebind the worker to another pooled device', 'kurrent workers mac seat-01 52:54:00:12:34:57')
    .argument('<worker_id>')
    .argument('<mac>')
    .action(async (id: string, mac: string) => {
      const data = await call(api().PUT('/workers/{worker_id}/mac', { params: { path: { worker_id: id } }, body: { mac } }));
      print(data, () => fields(data as never, ['worker_id', 'mac', 'changed']));
    });
  verb(workers, 'default-os', 'default boot by os (and menu settings)', 'kurrent workers default-os seat-01 ubuntu --timeout 3000')
    .argument('<worker_id>')
    .argument('[os]')
    .option('--menu-default <item>', 'menu.ipxe item')
    .option('--timeout <ms>', 'menu timeout', int('--timeout'))
    .action(async (id: string, os: string | undefined, o: { menuDefault?: string; timeout?: number }) => {
      const body = { ...(os ? { os } : {}), ...(o.menuDefault ? { menu_default: o.menuDefault } : {}), ...(o.timeout !== undefined ? { menu_timeout: o.timeout } : {}) };
      const data = await call(api().PUT('/workers/{worker_id}/default-os', { params: { path: { worker_id: id } }, body: body as never }));
      print(data, () => fields(data as never, ['worker_id', 'default_os', 'default_disk', 'boot']));
    });
  verb(workers, 'default-disk', 'default boot disk by os_tag (seed 004); "none" clears', 'kurrent workers default-disk seat-01 3f2a9c1b7d4e')
    .argument('<worker_id>')
    .argument('<os_tag>')
    .action(async (id: string, tag: string) => {
      const data = await call(api().PUT('/workers/{worker_id}/default-disk', { params: { path: { worker_id: id } }, body: { os_tag: tag === 'none' ? null : tag } }));
      print(data, () => fields(data as never, ['worker_id', 'default_os', 'default_disk']));
    });
  const disk = workers.command('disk').description("a worker's system disks");
  const diskSpec = (c: Command) =>
    c
      .requiredOption('--os <os>', 'windows | ubuntu | debian | centos | esxi')
      .option('--os-version <v>')
      .option('--master <file>', 'clone this master (_tpl_ image)')
      .option('--size <size>', 'an empty disk of this size, e.g. 40G');
  const specOf = (o: { os: string; osVersion?: string; master?: string; size?: string }) => {
    if (!!o.master === !!o.size) throw new CliError('give exactly one of --master or --size', EXIT.usage);
    return { os: o.os, ...(o.osVersion ? { os_version: o.osVersion } : {}), ...(o.master ? { type: 'master' as const, name: o.master } : { type: 'empty' as const, size: o.size! }) };
  };
  diskSpec(verb(disk, 'create', 'create a disk (placement picks the agent unless --agent)', 'kurrent workers disk create seat-01 --os ubuntu --master _tpl_ubuntu_2204.img'))
    .argument('<worker_id>')
    .option('--agent <id>', 'pin the agent')
    .action(async (id: string, o: { os: string; osVersion?: string; master?: string; size?: string; agent?: string }) => {
      const body = { ...specOf(o), ...(o.agent ? { disk_agent: o.agent } : {}) };
      const data = await call(api().POST('/workers/{worker_id}/luns/disk', { params: { path: { worker_id: id } }, body: body as never }));
      print(data, () => table(data.disks as never, ['os', 'os_version', 'os_tag', 'agent', 'transport', 'iqn', 'nqn']));
    });
  verb(disk, 'delete', 'delete a disk (the .img stays unless --delete-file)', 'kurrent workers disk delete seat-01 ubuntu --delete-file --yes')
    .argument('<worker_id>')
    .argument('<os>')
    .option('--os-version <v>')
    .option('--delete-file')
    .option('--ignore-missing-target')
    .action(async (id: string, os: string, o: { osVersion?: string; deleteFile?: boolean; ignoreMissingTarget?: boolean }) => {
      await confirm(`delete the ${os} disk of ${id}${o.deleteFile ? ' and its file' : ''}`);
      const query = { delete_file: !!o.deleteFile, ignore_missing_target: !!o.ignoreMissingTarget, ...(o.osVersion ? { os_version: o.osVersion } : {}) };
      const data = await call(api().DELETE('/workers/{worker_id}/luns/disk/{os}', { params: { path: { worker_id: id, os }, query } }));
      print(data, () => table(data.disks as never, ['os', 'os_version', 'os_tag', 'agent']));
    });
  diskSpec(verb(disk, 'batch', 'one disk spec for many workers; --dry-run shows the placement plan', 'kurrent workers disk batch --workers seat-01,seat-02 --os ubuntu --master _tpl_ubuntu_2204.img --dry-run'))
    .requiredOption('--workers <ids>', 'comma-separated worker ids (id=agent pins one)', list)
    .option('--dry-run', 'plan only')
    .action(async (o: { os: string; osVersion?: string; master?: string; size?: string; workers: string[]; dryRun?: boolean }) => {
      const targets = o.workers.map((w) => (w.includes('=') ? { worker_id: w.split('=')[0], agent: w.split('=')[1] } : { worker_id: w }));
      progress(`${o.dryRun ? 'planning' : 'creating'} ${targets.length} disks...`);
      const data = await call(api().POST('/workers/luns/disk/batch', { body: { ...specOf(o), targets, dry_run: !!o.dryRun } as never }));
      print(data, () => `${data.dry_run ? 'plan' : 'done'}: ${data.succeeded.length} ok, ${data.skipped.length} skipped, ${data.failed.length} failed\n` + table([...data.succeeded.map((s) => ({ ...s, result: 'ok' })), ...data.failed.map((f) => ({ ...f, result: f.error }))] as never, ['worker_id', 'agent', 'iqn', 'result']));
    });
  const cred = workers.command('credential').description('NVMe-oF credential of a worker (never shows the secret)');
  verb(cred, 'show', 'host NQN, key hashes, push state per agent', 'kurrent workers credential show seat-01')
    .argument('<worker_id>')
    .action(async (id: string) => {
      const data = await call(api().GET('/workers/{worker_id}/credential', { params: { path: { worker_id: id } } }));
      print(data, () => fields(data as never, ['worker_id', 'hostnqn', 'dhchap_key_sha256', 'tls_psk_sha256', 'issued_at', 'revoked']) + table(data.agents as never, ['agent', 'state', 'attempts', 'last_error', 'next_attempt_at']));
    });
  verb(cred, 'set', 'rotate in place (--generate) or set a given DHHC-1 secret (--key-file, - for stdin)', 'kurrent workers credential set seat-01 --generate')
    .argument('<worker_id>')
    .option('--generate', 'a new random secret')
    .option('--key-file <file>', 'read the secret from a file (not the command line: it would land in shell history)')
    .action(async (id: string, o: { generate?: boolean; keyFile?: string }) => {
      if (!!o.generate === !!o.keyFile) throw new CliError('give exactly one of --generate or --key-file', EXIT.usage);
      const body = o.generate ? { generate: true as const } : { dhchap_key: fs.readFileSync(o.keyFile === '-' ? 0 : o.keyFile!, 'utf8').trim() };
      const data = await call(api().PUT('/workers/{worker_id}/credential', { params: { path: { worker_id: id } }, body }));
      print(data, () => fields(data as never, ['worker_id', 'hostnqn', 'dhchap_key_sha256', 'tls_psk_sha256', 'revoked']) + table(data.agents as never, ['agent', 'state', 'attempts', 'last_error']));
    });
  verb(cred, 'revoke', 'revoke: the next boot of the worker is refused', 'kurrent workers credential revoke seat-01 --yes')
    .argument('<worker_id>')
    .action(async (id: string) => {
      await confirm(`revoke the NVMe credential of ${id}`);
      const data = await call(api().DELETE('/workers/{worker_id}/credential', { params: { path: { worker_id: id } } }));
      print(data, () => `${id}: revoked (${data.hostnqn})\n`);
    });

  // ---- settings, reconcile ----
  const settings = program.command('settings').description('global switches');
  const onOff = (v: string) => {
    if (v !== 'on' && v !== 'off') throw new CliError(`expected on or off, got ${JSON.stringify(v)}`, EXIT.usage);
    return v === 'on';
  };
  verb(settings, 'auto-register', 'show, or turn on/off, pooling of new MACs (open mode)', 'kurrent settings auto-register off')
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

  // ---- ops ----
  const ops = program.command('ops').description('the audit trail (GET /operations)');
  verb(ops, 'list', 'operations, oldest first; --follow keeps printing new ones', 'kurrent ops list --mac 52:54:00:12:34:56 --follow')
    .option('--since <id>', 'only after this id', int('--since'))
    .option('--limit <n>', 'at most this many per page', int('--limit'))
    .option('--mac <mac>', 'only about this device')
    .option('--follow', 'tail new operations (Ctrl-C stops)')
    .option('--interval <ms>', 'poll interval with --follow', int('--interval'), 1000)
    .action(async (o: { since?: number; limit?: number; mac?: string; follow?: boolean; interval: number }) => {
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
      for (;;) {
        const page = await call(api().GET('/operations', { params: { query: { since, ...(o.limit ? { limit: o.limit } : {}), ...(o.mac ? { mac: o.mac } : {}) } } }));
        show(page.entries);
        since = page.next_cursor;
        if (!o.follow) return;
        if (page.entries.length) continue; // more may be waiting
        await new Promise((r) => setTimeout(r, o.interval));
      }
    });

  // ---- completion ----
  verb(program, 'completion', 'print a bash completion script: source <(kurrent completion)', 'source <(kurrent completion)').action(() => {
    io.out(completionScript(program));
  });
  return program;
}

/** mac[,serial,product,manufacturer,uuid] lines (a header line is skipped), or a JSON array. */
export function parseDevices(text: string): { mac: string; serial?: string; product?: string; manufacturer?: string; uuid?: string }[] {
  const t = text.trim();
  if (t.startsWith('[')) return JSON.parse(t);
  return t
    .split('\n')
    .map((l) => l.split(',').map((s) => s.trim()))
    .filter((c) => c[0] && !/^mac$/i.test(c[0]) && !c[0].startsWith('#'))
    .map(([mac, serial, product, manufacturer, uuid]) => ({ mac, ...(serial ? { serial } : {}), ...(product ? { product } : {}), ...(manufacturer ? { manufacturer } : {}), ...(uuid ? { uuid } : {}) }));
}

/** "mac,worker_id" lines, or a JSON array of {mac, worker_id}. */
export function parsePairs(text: string): { mac: string; worker_id: string }[] {
  const t = text.trim();
  if (t.startsWith('[')) return JSON.parse(t);
  return t
    .split('\n')
    .map((l) => l.split(',').map((s) => s.trim()))
    .filter((c) => c[0] && c[1] && !/^mac$/i.test(c[0]) && !c[0].startsWith('#'))
    .map(([mac, worker_id]) => ({ mac, worker_id }));
}

/** Counts of every array in a batch answer, then the failures. */
function summary(data: Record<string, unknown>): string {
  const counts = Object.entries(data)
    .filter(([, v]) => Array.isArray(v))
    .map(([k, v]) => `${k} ${(v as unknown[]).length}`)
    .join(', ');
  const failed = (data.failed as { error?: string; worker_id?: string; mac?: string }[] | undefined) ?? [];
  return `${counts}\n${failed.map((f) => `  failed ${f.mac ?? f.worker_id ?? ''}: ${f.error ?? ''}\n`).join('')}`;
}

/** bash completion from the command tree (commands, sub-commands and their options). */
export function completionScript(program: Command): string {
  const words = (c: Command): string[] => [...c.commands.map((s) => s.name()), ...c.options.map((o) => o.long!).filter(Boolean)];
  const cases: string[] = [];
  const walk = (c: Command, path: string[]) => {
    cases.push(`    "${path.join(' ')}") opts="${words(c).join(' ')}" ;;`);
    for (const s of c.commands) walk(s, [...path, s.name()]);
  };
  walk(program, []);
  return `# bash completion for kurrent: source <(kurrent completion)
_kurrent() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path="" w opts
  for w in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do [[ $w == -* ]] || path="\${path:+$path }$w"; done
  case "$path" in
${cases.join('\n')}
    *) opts="" ;;
  esac
  COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
}
complete -F _kurrent kurrent
`;
}

/** Runs the CLI; resolves to the exit code (never calls process.exit itself). */
export async function run(argv: string[], io: Io = { out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s), isTTY: !!process.stdin.isTTY, stdin: process.stdin }): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help') return EXIT.ok;
      return EXIT.usage; // commander printed the message and the help
    }
    if (e instanceof CliError) {
      io.err(`kurrent: ${e.message}\n`);
      return e.code;
    }
    io.err(`kurrent: ${(e as Error).message}\n`);
    return EXIT.failed;
  }
}

if (require.main === module) {
  void run(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
