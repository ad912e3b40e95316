import { Command } from 'commander';
import * as fs from 'node:fs';
import { call, CliContext, int, list, summary } from '../context';
import { CliError, EXIT, fields, table } from '../output';

/** `kurrent workers ...`: worker identities, their disks and credentials. */
export function workerCommands(ctx: CliContext): void {
  const { program, api, print, progress, confirm, verb } = ctx;
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
    print(data, () =>
      table(
        data.map((w) => ({ ...w, boots: bootsNow(w.boot_readiness), disks: w.disks.map((d) => d.os + (d.os_version ? `@${d.os_version}` : '')) })),
        ['worker_id', 'hostname', 'mac', 'readiness', 'boots', 'state', 'disks', 'default_os', 'default_disk'],
      ),
    );
  });
  verb(workers, 'show', 'one worker', 'kurrent workers show seat-01')
    .argument('<worker_id>')
    .action(async (id: string) => {
      const data = await call(api().GET('/workers/{worker_id}', { params: { path: { worker_id: id } } }));
      print(data, () => fields({ ...data, boot_readiness: bootsNow(data.boot_readiness, true) } as never));
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
      .option('--master-version <n>', 'clone this version of the master (default: the latest)', (v: string) => {
        if (!/^[1-9][0-9]*$/.test(v)) throw new CliError(`--master-version: a whole number from 1, got ${JSON.stringify(v)}`, EXIT.usage);
        return Number(v);
      })
      .option('--size <size>', 'an empty disk of this size, e.g. 40G')
      .option('--mode <mode>', 'persistent (default) | reset: restored to the master at every boot');
  const specOf = (o: { os: string; osVersion?: string; master?: string; masterVersion?: number; size?: string; mode?: string }) => {
    if (!!o.master === !!o.size) throw new CliError('give exactly one of --master or --size', EXIT.usage);
    if (o.masterVersion && !o.master) throw new CliError('--master-version needs --master', EXIT.usage);
    return {
      os: o.os,
      ...(o.osVersion ? { os_version: o.osVersion } : {}),
      ...(o.master ? { type: 'master' as const, name: o.master, ...(o.masterVersion ? { version: o.masterVersion } : {}) } : { type: 'empty' as const, size: o.size! }),
      ...(o.mode ? { mode: o.mode as 'persistent' | 'reset' } : {}),
    };
  };
  diskSpec(verb(disk, 'create', 'create a disk (placement picks the agent unless --agent)', 'kurrent workers disk create seat-01 --os ubuntu --master _tpl_ubuntu_2204.img'))
    .argument('<worker_id>')
    .option('--agent <id>', 'pin the agent')
    .action(async (id: string, o: { os: string; osVersion?: string; master?: string; size?: string; agent?: string }) => {
      const body = { ...specOf(o), ...(o.agent ? { disk_agent: o.agent } : {}) };
      const data = await call(api().POST('/workers/{worker_id}/luns/disk', { params: { path: { worker_id: id } }, body: body as never }));
      print(data, () => table(data.disks as never, ['os', 'os_version', 'os_tag', 'mode', 'agent', 'transport', 'iqn', 'nqn']));
    });
  verb(disk, 'mode', 'persistent, or reset: restored to its master at the start of every boot (from the next boot on)', 'kurrent workers disk mode seat-01 3f2a9c0d1e4b reset')
    .argument('<worker_id>')
    .argument('<os_tag>', "the disk's os_tag (kurrent workers show <id>)")
    .argument('<mode>', 'persistent | reset')
    .action(async (id: string, osTag: string, mode: string) => {
      const data = await call(api().PUT('/workers/{worker_id}/luns/disk/{os_tag}/mode', { params: { path: { worker_id: id, os_tag: osTag } }, body: { mode: mode as 'persistent' | 'reset' } }));
      print(data, () => table(data.disks as never, ['os', 'os_version', 'os_tag', 'mode', 'agent', 'iqn', 'nqn']));
    });
  verb(disk, 'rebase', "replace a disk's content with a master version (its rollout's target by default): what the worker wrote is discarded", 'kurrent workers disk rebase seat-01 3f2a9c0d1e4b --yes')
    .argument('<worker_id>')
    .argument('<os_tag>', "the disk's os_tag (kurrent workers show <id>)")
    .option('--master-version <n>', 'this version instead of the rollout target')
    .action(async (id: string, osTag: string, o: { masterVersion?: string }) => {
      if (o.masterVersion !== undefined && !/^[1-9][0-9]*$/.test(o.masterVersion)) throw new CliError(`--master-version: a whole number from 1, got ${JSON.stringify(o.masterVersion)}`, EXIT.usage);
      await ctx.confirm(`discard everything on ${id}'s disk ${osTag} and rebase it`);
      const body = { discard_data: true as const, ...(o.masterVersion ? { version: Number(o.masterVersion) } : {}) };
      const data = await call(api().POST('/workers/{worker_id}/luns/disk/{os_tag}/rebase', { params: { path: { worker_id: id, os_tag: osTag } }, body }));
      print(data, () => table(data.disks.map((d) => ({ ...d, version: d.source.version ?? '' })) as never, ['os', 'os_version', 'os_tag', 'mode', 'version', 'agent', 'iqn', 'nqn']));
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

}

/** A worker's boot readiness in a cell: `yes`, or `no` and the reason codes (with their messages when long). */
function bootsNow(r: { bootable: boolean; reasons: { code: string; message: string }[] }, long = false): string {
  if (r.bootable) return 'yes';
  return `no: ${r.reasons.map((x) => (long ? `${x.code} (${x.message})` : x.code)).join(', ')}`;
}
