import { Injectable, OnApplicationBootstrap } from '@nestjs/common';
import { ApiError, badRequest, conflict, notFound } from '../../shared/http/api-error';
import { AuditService } from '../audit/audit.service';
import { AppConfig } from '../config/app-config';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import type { AgentUsageDto } from '../../shared/agent-contract/capabilities.dto';
import type { MasterTransferDto } from '../../shared/agent-contract/transfers.dto';
import { signTransferTicket, TRANSFER_TICKET_SECONDS } from '../../shared/transfer-ticket';
import { Clock } from '../common/clock';
import type { CreatedLunDto, CreateCdDto, CreateLunDiskDto, DeletedMasterVersionDto, MasterDto, MasterVersionDto, ResetLunDto, ResetLunResultDto, ScanResultDto, LunTargetDto } from '../../shared/agent-contract/luns.dto';
import { AgentGateway, AgentHttpError } from './agent-gateway';
import { AgentRecord, StorageNodeRegistry, BASE_URL_RULE, normalizeBaseUrl } from './storage-node-registry';
import type {
  AgentCapabilitiesDto,
  AgentDeletedDto,
  AgentDto,
  CreateAgentDto,
  PassthroughDeletedDto,
  ProbeAgentDto,
  ProbeResultDto,
  UpdateAgentDto,
} from './dto/storage-node.dto';

export type Capabilities = AgentCapabilitiesDto;

/** Agents registry, liveness, LUN passthrough and the masters view. */
@Injectable()
export class StorageNodesService implements OnApplicationBootstrap {
  /** Last capabilities seen per agent: /boot-vars reads the backend from here, never from the network. */
  private readonly caps = new Map<string, Capabilities>();
  /** Bumped when a cached capability set changes (not on every probe): cached boot answers depend on them. */
  capsRevision = 0;

  constructor(
    private readonly registry: StorageNodeRegistry,
    private readonly gateway: AgentGateway,
    private readonly config: AppConfig,
    private readonly store: LedgerRepository,
    private readonly audit: AuditService,
    private readonly clock: Clock,
  ) {}

  /** Warm the capabilities cache in the background, so /boot-vars knows each backend early. */
  onApplicationBootstrap(): void {
    for (const a of this.registry.all()) if (a.enabled) void this.capabilities(a).catch(() => undefined);
  }

  /** Data-plane address: iscsi_server, else the host of base_url. */
  dataAddress(a: AgentRecord): string {
    return a.iscsi_server ?? new URL(a.base_url).hostname;
  }

  /** The outcome of the last probe of each agent (GET /agents?live, start-up, placement): for /metrics. */
  readonly lastProbe = new Map<string, { up: boolean; at: number }>();

  /** The agent's backend: its lio/stgt tag, else its cached capabilities (undefined before a probe). */
  backendOf(a: AgentRecord): string | undefined {
    return a.tags.includes('lio') ? 'lio' : a.tags.includes('stgt') ? 'stgt' : this.caps.get(a.id)?.backend;
  }

  cachedCapabilities(id: string): Capabilities | undefined {
    return this.caps.get(id);
  }

  view(a: AgentRecord): AgentDto {
    return { id: a.id, base_url: a.base_url, iscsi_server: this.dataAddress(a), role: { ...a.role }, enabled: a.enabled, tags: [...a.tags] };
  }

  find(id: string): AgentRecord {
    const a = this.registry.get(id.toLowerCase());
    if (!a) throw notFound(`agent not found: ${id}`);
    return a;
  }

  async list(live: boolean): Promise<AgentDto[]> {
    const agents = this.registry.all();
    if (!live) return agents.map((a) => this.view(a));
    // In parallel, each bounded by the probe timeout: one dead agent never stalls the list.
    return Promise.all(
      agents.map(async (a) => {
        if (!a.enabled) return { ...this.view(a), health: 'disabled', capabilities: null };
        // Usage beside the probe, not inside it: an agent older than GET /usage is still up.
        const usage = this.gateway.call<AgentUsageDto>(a, 'GET', '/usage', { timeoutMs: this.config.agentProbeTimeoutMs }).catch(() => null);
        try {
          const caps = await this.capabilities(a);
          return { ...this.view(a), health: 'ok', capabilities: caps, usage: await usage };
        } catch (e) {
          const unreachable = !(e instanceof AgentHttpError);
          await usage;
          return { ...this.view(a), health: unreachable ? 'unreachable' : 'error', capabilities: null, usage: null, error: (e as Error).message };
        }
      }),
    );
  }

  /** /healthz (no auth) then /capabilities (token); cached for /boot-vars. */
  async capabilities(a: Pick<AgentRecord, 'id' | 'base_url' | 'token'>, timeoutMs = this.config.agentProbeTimeoutMs): Promise<Capabilities> {
    let caps: Capabilities;
    try {
      caps = await this.fetchCapabilities(a, timeoutMs);
    } catch (e) {
      this.lastProbe.set(a.id, { up: false, at: Date.now() });
      throw e;
    }
    this.lastProbe.set(a.id, { up: true, at: Date.now() });
    const before = this.caps.get(a.id);
    if (!before || JSON.stringify(before) !== JSON.stringify(caps)) this.capsRevision++;
    this.caps.set(a.id, caps);
    return caps;
  }

  private async fetchCapabilities(a: Pick<AgentRecord, 'id' | 'base_url' | 'token'>, timeoutMs: number): Promise<Capabilities> {
    await this.gateway.call(a, 'GET', '/healthz', { timeoutMs });
    return this.gateway.call<Capabilities>(a, 'GET', '/capabilities', { timeoutMs });
  }

  create(dto: CreateAgentDto, client: string): Promise<AgentDto> {
    return this.store.exclusive(async () => {
      const agents = this.registry.all();
      if (agents.some((a) => a.id === dto.id)) throw conflict(`agent already exists: ${dto.id}`);
      const rec = this.record(dto.id, dto, '');
      this.checkAddressFree(rec);
      await this.registry.save([...agents, rec], [{ op: 'agent.create', fields: { agent: rec.id, base_url: rec.base_url, client } }]);
      return this.view(rec);
    });
  }

  update(rawId: string, dto: UpdateAgentDto, client: string): Promise<AgentDto> {
    return this.store.exclusive(async () => {
      const cur = this.find(rawId);
      const rec = this.record(cur.id, dto, cur.token);
      this.checkAddressFree(rec);
      await this.registry.save(
        this.registry.all().map((a) => (a.id === cur.id ? rec : a)),
        [{ op: 'agent.update', fields: { agent: rec.id, base_url: rec.base_url, enabled: rec.enabled, token_changed: rec.token !== cur.token, client } }],
      );
      if (this.caps.delete(cur.id)) this.capsRevision++;
      return this.view(rec);
    });
  }

  /** Two registrations of one agent would place disks twice over one DISK_DIR. */
  private checkAddressFree(rec: AgentRecord): void {
    const other = this.registry.all().find((a) => a.id !== rec.id && a.base_url === rec.base_url);
    if (other) throw conflict(`base_url: ${rec.base_url} is already the address of agent ${other.id}`);
  }

  /** DELETE /agents/{id}: the registration only; refused while workers' disks or CDs live there, unless forced. */
  remove(rawId: string, force: boolean, client: string): Promise<AgentDeletedDto> {
    return this.store.exclusive(async () => {
      const cur = this.find(rawId);
      const left: string[] = [];
      for (const w of this.store.read().workers.values()) {
        for (const d of w.disks) if (d.agent === cur.id) left.push(`${w.worker_id}/${d.os}${d.os_version ? `@${d.os_version}` : ''}`);
        if (w.cd?.agent === cur.id) left.push(`${w.worker_id}/cd`);
      }
      left.sort();
      if (left.length && !force) {
        const shown = left.slice(0, 10).join(', ') + (left.length > 10 ? `, ... (${left.length} in all)` : '');
        throw conflict(`agent ${cur.id} holds ${left.length} disk(s)/CD(s) of workers: ${shown}; delete or move them first, or force=true to remove the registration and leave them unbootable`);
      }
      await this.registry.save(this.registry.all().filter((a) => a.id !== cur.id), [{ op: 'agent.delete', fields: { agent: cur.id, base_url: cur.base_url, force, targets_left: left.length, client } }]);
      if (this.caps.delete(cur.id)) this.capsRevision++;
      this.lastProbe.delete(cur.id);
      return { deleted: cur.id, force, targets_left: left };
    });
  }

  /** Read-only: derives registration parameters from a live agent (reference 6.2). */
  async probe(dto: ProbeAgentDto): Promise<ProbeResultDto> {
    const base = normalizeBaseUrl(dto.base_url);
    if (!base) throw badRequest(`base_url: ${BASE_URL_RULE.slice('base_url '.length)}`);
    let token = dto.token ?? '';
    if (!token && dto.agent_id) {
      // A stored token only ever goes to the URL it was stored for.
      const stored = this.find(dto.agent_id);
      if (stored.base_url !== base) {
        throw badRequest(`base_url: ${base} is not the registered address of ${stored.id} (${stored.base_url}); its stored token is sent only there, give token to probe another address`);
      }
      token = stored.token;
    }
    let caps: Capabilities;
    try {
      // Read-only: nothing is cached (the cache is what /boot-vars reads).
      caps = await this.fetchCapabilities({ id: dto.agent_id ?? 'probe', base_url: base, token }, this.config.agentProbeTimeoutMs);
    } catch (e) {
      throw new ApiError(502, `agent probe failed: ${(e as Error).message}`);
    }
    // What the answer promises (the spec) needs these: an agent that leaves one out is refused, not relayed.
    const missing = (['backend', 'fs_type', 'clone', 'empty_disk', 'persistent'] as const).filter((k) => typeof caps?.[k] !== 'string' || !caps[k]);
    if (missing.length) throw new ApiError(502, `agent probe failed: its /capabilities lacks ${missing.join(', ')}`);
    return {
      base_url: base,
      role: { disk: true, cd: caps.cd === true },
      tags: ['storage', caps.backend],
      iscsi_server: new URL(base).hostname,
      enabled: true,
      backend: caps.backend,
      fs_type: caps.fs_type,
      base_iqn: caps.base_iqn ?? caps.base_nqn ?? null,
      clone: caps.clone,
      empty_disk: caps.empty_disk,
      persistent: caps.persistent,
    };
  }

  // ---- LUN passthrough (reference 14): no ledger writes ----

  luns(id: string): Promise<LunTargetDto[]> {
    return this.gateway.call(this.find(id), 'GET', '/luns');
  }

  createDisk(id: string, dto: CreateLunDiskDto, client: string): Promise<CreatedLunDto> {
    const a = this.withRole(id, 'disk');
    return this.audited('agent.create_disk', a, { iqn: dto.iqn, client }, () => this.gateway.call(a, 'POST', '/luns/disk', { body: dto }));
  }

  /** POST /luns/reset on the disk's agent (not audited here: the caller records the outcome with its reason). */
  resetDisk(a: AgentRecord, dto: ResetLunDto, timeoutMs: number): Promise<ResetLunResultDto> {
    return this.gateway.call<ResetLunResultDto>(a, 'POST', '/luns/reset', { body: dto, timeoutMs });
  }

  createCd(id: string, dto: CreateCdDto, client: string): Promise<CreatedLunDto> {
    const a = this.withRole(id, 'cd');
    return this.audited('agent.create_cd', a, { iso: dto.iso, iqn: dto.iqn, client }, () => this.gateway.call(a, 'POST', '/luns/cd', { body: dto }));
  }

  deleteLun(id: string, iqn: string, deleteFile: boolean, ignoreMissing: boolean, client: string): Promise<PassthroughDeletedDto> {
    const a = this.find(id);
    return this.audited('agent.delete_lun', a, { iqn, delete_file: deleteFile, client }, () => this.deleteTarget(a, iqn, deleteFile, ignoreMissing));
  }

  scan(id: string, client: string): Promise<ScanResultDto> {
    const a = this.find(id);
    return this.audited('agent.scan', a, { client }, () => this.gateway.call(a, 'POST', '/luns/scan'));
  }

  /** DELETE /luns on an agent; a 404 `iqn not found` counts as done when ignoreMissing. */
  async deleteTarget(a: AgentRecord, iqn: string, deleteFile: boolean, ignoreMissing: boolean): Promise<PassthroughDeletedDto> {
    try {
      return await this.gateway.call<PassthroughDeletedDto>(a, 'DELETE', '/luns', { query: { iqn, delete_file: deleteFile } });
    } catch (e) {
      if (ignoreMissing && e instanceof AgentHttpError && e.upstreamStatus === 404) return { deleted: iqn, delete_file: deleteFile, ignored_missing: true };
      throw e;
    }
  }

  withRole(id: string, role: 'disk' | 'cd'): AgentRecord {
    const a = this.find(id);
    if (!a.role[role]) throw badRequest(`agent ${a.id} not configured for ${role} role`);
    return a;
  }

  mastersOf(a: AgentRecord): Promise<MasterDto[]> {
    return this.gateway.call<MasterDto[]>(a, 'GET', '/masters', { timeoutMs: this.config.agentProbeTimeoutMs });
  }

  /** DELETE /masters/{name}/versions/{version} on one agent (audited by the caller, once for all agents). */
  deleteMasterVersion(a: AgentRecord, name: string, version: number): Promise<DeletedMasterVersionDto> {
    return this.gateway.call<DeletedMasterVersionDto>(a, 'DELETE', `/masters/${encodeURIComponent(name)}/versions/${version}`);
  }

  /** POST /masters/{name}/versions on one agent: its disk `iqn` becomes version `version` (audited by the caller). */
  promoteMasterVersion(a: AgentRecord, name: string, body: { iqn: string; version: number; note: string }): Promise<MasterVersionDto> {
    return this.gateway.call<MasterVersionDto>(a, 'POST', `/masters/${encodeURIComponent(name)}/versions`, { body });
  }

  setMasterVersionNote(a: AgentRecord, name: string, version: number, note: string): Promise<MasterVersionDto> {
    return this.gateway.call<MasterVersionDto>(a, 'PUT', `/masters/${encodeURIComponent(name)}/versions/${version}/note`, { body: { note } });
  }

  /**
   * POST /masters/{name}/transfers on `to`: it pulls the version from `from` with a read ticket
   * for that version signed with `from`'s token (the token itself never leaves the control plane).
   */
  startMasterTransfer(to: AgentRecord, from: AgentRecord, name: string, version: number): Promise<MasterTransferDto> {
    const token = this.gateway.expandToken(from.token);
    const expires = Math.floor(this.clock.now().getTime() / 1000) + TRANSFER_TICKET_SECONDS;
    const body = { version, source_url: from.base_url, source_ticket: token ? signTransferTicket(token, name, version, expires) : '' };
    return this.gateway.call<MasterTransferDto>(to, 'POST', `/masters/${encodeURIComponent(name)}/transfers`, { body });
  }

  /** One agent's transfer of a version (GET /masters/transfers); null when it has none or cannot be asked. */
  async masterTransferOf(a: AgentRecord, name: string, version: number): Promise<MasterTransferDto | null> {
    const list = await this.gateway.call<MasterTransferDto[]>(a, 'GET', '/masters/transfers', { timeoutMs: this.config.agentProbeTimeoutMs }).catch(() => []);
    return list.find((t) => t.name === name && t.version === version) ?? null;
  }

  private async audited<R>(op: string, a: AgentRecord, fields: Record<string, unknown>, fn: () => Promise<R>): Promise<R> {
    try {
      const r = await fn();
      await this.audit.record(op, { agent: a.id, ...fields });
      return r;
    } catch (e) {
      await this.audit.record(op, { status: 'failed', agent: a.id, ...fields, error: (e as Error).message });
      throw e;
    }
  }

  private record(id: string, dto: UpdateAgentDto, oldToken: string): AgentRecord {
    const base = normalizeBaseUrl(dto.base_url);
    if (!base) throw badRequest(`base_url: ${BASE_URL_RULE.slice('base_url '.length)}`);
    return {
      id,
      base_url: base,
      token: dto.token ? dto.token : oldToken,
      iscsi_server: dto.iscsi_server?.trim() || null,
      role: { disk: dto.role?.disk === true, cd: dto.role?.cd === true },
      tags: dto.tags ?? [],
      enabled: dto.enabled !== false,
    };
  }
}
