import { Command } from 'commander';
import type { Schemas } from '../../client';
import { call, CliContext, list } from '../context';
import { CliError, EXIT, fields, table } from '../output';

/** `kurrent agents ...` and `kurrent masters`: the storage agents and their master images. */
export function agentCommands(ctx: CliContext): void {
  const { program, api, print, verb } = ctx;
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
  const masters = verb(program, 'masters', 'master images of every agent, with their latest version (subcommands: versions, distribute, distribution, rollout, promote, rollback, maintenance, note, delete-version)', 'kurrent masters').action(async () => {
    const data = await call(api().GET('/masters'));
    print(data, () => table(data.agents.flatMap((a) => a.masters.map((m) => ({ agent: a.agent, ...m }))), ['agent', 'name', 'size', 'mtime', 'latest']));
  });
  verb(masters, 'versions', 'the versions of each master over all agents: checksum, agents holding it, disks on it', 'kurrent masters versions _tpl_ubuntu_2204.img')
    .argument('[name]', 'only this master')
    .action(async (name: string | undefined) => {
      const data = await call(api().GET('/masters'));
      const catalog = data.catalog.filter((m) => !name || m.name === name);
      if (name && !catalog.length) throw new CliError(`404: no agent holds a master named ${name}`, EXIT.notFound);
      print(name ? catalog[0] : data.catalog, () =>
        table(
          catalog.flatMap((m) =>
            m.versions.map((v) => ({
              master: m.name,
              version: v.version,
              size: v.size,
              sha256: v.sha256.slice(0, 12),
              created: new Date(v.created * 1000).toISOString().slice(0, 19).replace('T', ' '),
              origin: v.origin,
              agents: v.agents.join(','),
              disks: v.disks,
              conflict: v.conflicting_agents?.join(',') ?? '',
              note: v.note,
            })),
          ),
          ['master', 'version', 'size', 'sha256', 'created', 'origin', 'agents', 'disks', 'conflict', 'note'],
        ),
      );
    });
  const distributionText = (d: Schemas['VersionDistributionDto']) =>
    `${d.name} version ${d.version} (sha256 ${d.sha256.slice(0, 12)}): ${d.complete ? 'on every agent holding the master' : 'not on every agent yet'}\n` +
    table(
      d.agents.map((a) => ({
        agent: a.agent,
        state: a.state,
        source: a.source ?? '',
        progress: a.data_bytes ? `${Math.floor(((a.bytes_done ?? 0) * 100) / a.data_bytes)}% of ${(a.data_bytes / 2 ** 20).toFixed(0)} MiB` : '',
        error: a.error ?? '',
      })),
      ['agent', 'state', 'source', 'progress', 'error'],
    );
  verb(masters, 'distribute', 'copy a version to every agent that holds its master without it (agent to agent, resumable; again: resumes or retries)', 'kurrent masters distribute _tpl_ubuntu_2204.img 3 --wait')
    .argument('<name>')
    .argument('<version>')
    .option('--wait', 'wait until every agent holds it (or a transfer stops), printing progress')
    .action(async (name: string, version: string, o: { wait?: boolean }) => {
      let data = await call(api().POST('/masters/{name}/versions/{version}/distribute', { params: { path: { name, version } } }));
      while (o.wait && data.agents.some((a) => a.state === 'running')) {
        await new Promise((r) => setTimeout(r, 1000));
        data = await call(api().GET('/masters/{name}/versions/{version}/distribution', { params: { path: { name, version } } }));
      }
      print(data, () => distributionText(data));
      if (o.wait && !data.complete) throw new CliError(`${name} version ${version} is not on every agent: ${data.agents.filter((a) => a.state !== 'present').map((a) => `${a.agent} ${a.state}${a.error ? ` (${a.error})` : ''}`).join('; ')}`, EXIT.failed);
    });
  verb(masters, 'distribution', 'where a version is: per agent holding the master, present, its transfer, or missing', 'kurrent masters distribution _tpl_ubuntu_2204.img 3')
    .argument('<name>')
    .argument('<version>')
    .action(async (name: string, version: string) => {
      const data = await call(api().GET('/masters/{name}/versions/{version}/distribution', { params: { path: { name, version } } }));
      print(data, () => distributionText(data));
    });
  const canaryOptions = (c: Command) => c.option('--canary <workers>', 'these workers first', list).option('--canary-percent <n>', 'this percent of the workers first (1-100)');
  const canaryOf = (o: { canary?: string[]; canaryPercent?: string }) => {
    if (o.canaryPercent !== undefined && !/^[1-9][0-9]*$/.test(o.canaryPercent)) throw new CliError(`--canary-percent: a whole number from 1 to 100, got ${JSON.stringify(o.canaryPercent)}`, EXIT.usage);
    return { ...(o.canary ? { canary_workers: o.canary } : {}), ...(o.canaryPercent ? { canary_percent: Number(o.canaryPercent) } : {}) };
  };
  const rolloutText = (r: Schemas['RolloutDto']) =>
    `${r.name}: ${r.rollback ? 'rollback' : 'rollout'} to version ${r.version} (from ${r.previous ?? 'none'}), phase ${r.phase}${r.canary.length ? `, canary ${r.canary.join(', ')}` : ''}\n` +
    `${r.summary.on_target}/${r.summary.disks} on target, ${r.summary.at_next_boot} at next boot, ${r.summary.needs_rebase} need a rebase, ${r.summary.not_reached} not reached; booted ${r.summary.booted}, failed ${r.summary.failed}\n` +
    table(r.disks.map((d) => ({ ...d, boot: d.boot_since?.outcome ?? '' })) as never, ['worker_id', 'os', 'os_tag', 'mode', 'version', 'target', 'state', 'boot']);
  canaryOptions(verb(masters, 'rollout', "move a master's disks to a version: the canary first (--canary or --canary-percent), then `masters promote`", 'kurrent masters rollout _tpl_ubuntu_2204.img 3 --canary seat-01,seat-02'))
    .argument('<name>')
    .argument('[version]', 'omitted: show the rollout')
    .action(async (name: string, version: string | undefined, o: { canary?: string[]; canaryPercent?: string }) => {
      if (version === undefined) {
        const data = await call(api().GET('/masters/{name}/rollout', { params: { path: { name } } }));
        return print(data, () => rolloutText(data));
      }
      if (!/^[1-9][0-9]*$/.test(version)) throw new CliError(`version: a whole number from 1, got ${JSON.stringify(version)}`, EXIT.usage);
      const data = await call(api().POST('/masters/{name}/rollout', { params: { path: { name } }, body: { version: Number(version), ...canaryOf(o) } }));
      print(data, () => rolloutText(data));
    });
  verb(masters, 'promote', "extend a master's rollout from the canary to every disk", 'kurrent masters promote _tpl_ubuntu_2204.img')
    .argument('<name>')
    .action(async (name: string) => {
      const data = await call(api().POST('/masters/{name}/rollout/promote', { params: { path: { name } } }));
      print(data, () => rolloutText(data));
    });
  canaryOptions(verb(masters, 'rollback', "roll a master's disks back to the version before the current rollout", 'kurrent masters rollback _tpl_ubuntu_2204.img'))
    .argument('<name>')
    .action(async (name: string, o: { canary?: string[]; canaryPercent?: string }) => {
      const data = await call(api().POST('/masters/{name}/rollout/rollback', { params: { path: { name } }, body: canaryOf(o) }));
      print(data, () => rolloutText(data));
    });
  const maintenance = masters.command('maintenance').description("a master's maintenance writer: one worker boots a writable clone of the latest version, promote makes it the next version");
  verb(maintenance, 'show', 'who has the master in maintenance', 'kurrent masters maintenance show _tpl_ubuntu_2204.img')
    .argument('<name>')
    .action(async (name: string) => {
      const data = await call(api().GET('/masters/{name}/maintenance', { params: { path: { name } } }));
      print(data, () => fields(data as never));
    });
  verb(maintenance, 'start', 'give one worker a writable clone of the latest version (as a disk of --os)', 'kurrent masters maintenance start _tpl_ubuntu_2204.img super-01 --os windows')
    .argument('<name>')
    .argument('<worker_id>')
    .requiredOption('--os <os>', 'the menu item the disk boots as (the worker has no disk of it yet)')
    .option('--agent <id>', 'pin the agent')
    .action(async (name: string, workerId: string, o: { os: string; agent?: string }) => {
      const data = await call(api().POST('/masters/{name}/maintenance', { params: { path: { name } }, body: { worker_id: workerId, os: o.os as Schemas['StartMaintenanceDto']['os'], ...(o.agent ? { disk_agent: o.agent } : {}) } }));
      print(data, () => fields(data as never));
    });
  verb(maintenance, 'promote', 'make the maintenance disk the next version (shut the worker down first); the disk is then deleted', 'kurrent masters maintenance promote _tpl_ubuntu_2204.img --note "December updates"')
    .argument('<name>')
    .option('--note <text>', 'what changed')
    .action(async (name: string, o: { note?: string }) => {
      const data = await call(api().POST('/masters/{name}/maintenance/promote', { params: { path: { name } }, body: o.note ? { note: o.note } : {} }));
      print(data, () => `${name}: version ${data.version} (sha256 ${data.sha256.slice(0, 12)}) on ${data.agent}${data.disk_deleted ? '; maintenance disk deleted' : '; the maintenance disk could not be deleted, delete it by hand'}\n`);
    });
  verb(maintenance, 'discard', 'throw the maintenance disk away (the master is unchanged)', 'kurrent masters maintenance discard _tpl_ubuntu_2204.img --yes')
    .argument('<name>')
    .action(async (name: string) => {
      await ctx.confirm(`throw away the maintenance disk of ${name}`);
      const data = await call(api().DELETE('/masters/{name}/maintenance', { params: { path: { name } } }));
      print(data, () => `${name}: maintenance disk of ${data.worker_id} discarded\n`);
    });
  verb(masters, 'note', "set a version's note on every agent holding it", 'kurrent masters note _tpl_ubuntu_2204.img 3 "security updates, December"')
    .argument('<name>')
    .argument('<version>')
    .argument('<note>')
    .action(async (name: string, version: string, note: string) => {
      const data = await call(api().PUT('/masters/{name}/versions/{version}/note', { params: { path: { name, version } }, body: { note } }));
      print(data, () => `${name} version ${data.version}: ${data.note}\n`);
    });
  verb(masters, 'delete-version', 'delete a version on every agent holding it (refused while a disk holds it)', 'kurrent masters delete-version _tpl_ubuntu_2204.img 2 --yes')
    .argument('<name>')
    .argument('<version>')
    .action(async (name: string, version: string) => {
      await ctx.confirm(`delete version ${version} of ${name} on every agent`);
      const data = await call(api().DELETE('/masters/{name}/versions/{version}', { params: { path: { name, version } } }));
      print(data, () => `${name} version ${data.version}: deleted on ${data.deleted_on.join(', ')}\n`);
    });

}
