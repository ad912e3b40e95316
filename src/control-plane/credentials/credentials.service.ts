import { Injectable, Logger } from '@nestjs/common';
import { badRequest, notFound } from '../../shared/http/api-error';
import { Clock } from '../common/clock';
import { normalizeId } from '../../shared/mac';
import { deriveCtrlKey, deriveTlsPsk, dhchapKeyError, generateDhchapKey, secretSha12 } from '../../shared/nvme-keys';
import { AgentGateway, AgentHttpError } from '../storage-nodes/agent-gateway';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { AuditService } from '../audit/audit.service';
import { AppConfig } from '../config/app-config';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { Mutex } from '../../shared/files/mutex';
import { DiskRecord } from '../repositories/ledger/records';
import { CredentialRecord, CredentialRepository, FileShape, issuedTo, newPush, PushRecord, RemovalRecord } from '../repositories/credentials/credential.repository';
import type { CredentialDto, SetCredentialDto } from './dto/credential.dto';

/** A value derived from a host's secret, cached by (secret, host): /boot-vars asks on every boot; dropped whole past 50,000. */
function derived(cache: Map<string, string>, c: CredentialRecord, derive: (key: string, hostnqn: string) => string): string {
  const k = c.dhchap_key + c.hostnqn;
  let v = cache.get(k);
  if (!v) {
    if (cache.size > 50_000) cache.clear();
    v = derive(c.dhchap_key, c.hostnqn);
    cache.set(k, v);
  }
  return v;
}

/** DH-HMAC-CHAP parameters written with every host (nvmet hosts/<hostnqn>/dhchap_*). */
export const DHCHAP_HASH = 'hmac(sha256)';
export const DHCHAP_DHGROUP = 'ffdhe2048';
/** Retry backoff: base * 2^(attempts-1), at most this, plus up to 25% jitter. */
const BACKOFF_CAP_MS = 15 * 60_000;

/** What the agent's GET /nvme/hosts says about one host. */
export interface AgentHostView {
  hostnqn: string;
  dhchap_key_sha256: string;
  subsystems?: string[];
}

export type PushReason = 'create' | 'rotate' | 'retry' | 'drift' | 'delete';

export interface PushOutcome {
  worker_id: string;
  agent: string;
  hostnqn: string;
  reason: string;
  ok: boolean;
  error?: string;
}

/**
 * Per-worker NVMe-oF credentials (seed 004 section 6): a host NQN, a DH-HMAC-CHAP secret and the
 * TLS PSK derived from it, pushed to every agent that holds one of the worker's NVMe disks. The
 * secret lives only in CredentialRepository's 0600 file and in the agents' state; responses, logs and
 * audit records carry 12-hex hash prefixes.
 */
/** What a worker's iPXE needs for an NVMe/TCP disk (TLS PSK, DH-HMAC-CHAP both ways). */
export interface BootCredential {
  hostnqn: string;
  tls_psk: string;
  dhchap_secret: string;
  dhchap_ctrl_secret: string;
}

@Injectable()
export class CredentialsService {
  private readonly log = new Logger('Credentials');
  /** One push or removal at a time per (hostnqn, agent): the last one sent is the current key. */
  private readonly locks = new Map<string, Mutex>();
  /** Derived PSKs by secret (derivation costs two HMACs; /boot-vars asks on every boot). */
  private readonly pskCache = new Map<string, string>();
  private readonly ctrlCache = new Map<string, string>();
  /** Told of each rotation and revocation (IscsiAccessService: the CHAP of iSCSI disks). */
  private readonly changeObservers: ((id: string, reason: PushReason) => Promise<unknown>)[] = [];

  constructor(
    private readonly creds: CredentialRepository,
    private readonly store: LedgerRepository,
    private readonly registry: StorageNodeRegistry,
    private readonly gateway: AgentGateway,
    private readonly audit: AuditService,
    private readonly clock: Clock,
    private readonly config: AppConfig,
  ) {}

  hostNqnOf(workerId: string): string {
    return `${this.config.hostNqnBase}:host.${workerId}`;
  }

  /**
   * The credential of the worker as it exists now: undefined when there is none, or when the one
   * stored was issued to a deleted worker of the same id (a kill between the delete's commit and
   * the credential's removal leaves it; it is never handed out, pushed or inherited, and the
   * reconciler removes it).
   */
  current(id: string): CredentialRecord | undefined {
    const c = this.creds.get(id);
    return c && issuedTo(c, this.store.read().workers.get(id)) ? c : undefined;
  }

  /** A stored credential whose worker is gone or was re-created since. */
  isLeftover(c: CredentialRecord): boolean {
    return !issuedTo(c, this.store.read().workers.get(c.worker_id));
  }

  /** Inside a change: drops a leftover credential of id, queueing its host's removal from its agents. */
  private dropLeftover(d: FileShape, id: string): void {
    const cur = d.credentials[id];
    if (!cur || !this.isLeftover(cur)) return;
    delete d.credentials[id];
    for (const agent of Object.keys(cur.agents)) {
      d.removals.push({ worker_id: id, hostnqn: cur.hostnqn, agent, attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null });
    }
  }

  private incarnationOf(id: string): string | null {
    return this.store.read().workers.get(id)?.incarnation ?? null;
  }

  /** The host NQNs this control plane makes (so orphans on agents can be told from others' hosts). */
  isOurHostNqn(hostnqn: string): boolean {
    return hostnqn.startsWith(`${this.config.hostNqnBase}:host.`);
  }

  tlsPsk(c: CredentialRecord): string {
    return derived(this.pskCache, c, deriveTlsPsk);
  }

  /** The controller's secret of a host (derived; cached like the PSK). */
  ctrlKey(c: CredentialRecord): string {
    return derived(this.ctrlCache, c, deriveCtrlKey);
  }

  view(rawId: string): CredentialDto {
    const id = this.parseId(rawId);
    if (!this.store.read().workers.has(id)) throw notFound(`worker not found: ${id}`);
    const c = this.current(id);
    if (!c) throw notFound(`worker ${id} has no NVMe credential (it is issued with the first NVMe or iSCSI disk, or by PUT)`);
    return this.toDto(c);
  }

  /** PUT: rotates in place (or issues) with a generated or a given secret; un-revokes. */
  async set(rawId: string, dto: SetCredentialDto, client: string): Promise<CredentialDto> {
    const id = this.parseId(rawId);
    if ((dto.generate === true) === (dto.dhchap_key !== undefined)) throw badRequest('exactly one of generate: true or dhchap_key is required');
    if (dto.dhchap_key !== undefined) {
      const err = dhchapKeyError(dto.dhchap_key);
      if (err) throw badRequest(`dhchap_key: ${err}`);
    }
    if (!this.store.read().workers.has(id)) throw notFound(`worker not found: ${id}`);
    const key = dto.dhchap_key ?? generateDhchapKey();
    const had = await this.creds.change((d, audit) => {
      const now = this.clock.isoNow();
      this.dropLeftover(d, id);
      const cur = d.credentials[id];
      const next: CredentialRecord = cur
        ? { ...cur, dhchap_key: key, revoked: false, revoked_at: null }
        : { worker_id: id, hostnqn: this.hostNqnOf(id), dhchap_key: key, issued_at: now, revoked: false, revoked_at: null, agents: {}, worker_incarnation: this.incarnationOf(id) };
      if (cur) next.issued_at = now;
      d.credentials[id] = next;
      audit(cur ? 'credential.rotate' : 'credential.issue', { worker_id: id, hostnqn: next.hostnqn, source: dto.generate ? 'generated' : 'given', ...this.hashes(next), client });
      return !!cur;
    });
    await this.syncWorker(id, had ? 'rotate' : 'create');
    await this.notifyChange(id, 'rotate');
    return this.toDto(this.current(id)!);
  }

  /** DELETE: revokes; /boot-vars stops handing out the PSK at once, and the hosts leave the agents. */
  async revoke(rawId: string, client: string): Promise<CredentialDto> {
    const id = this.parseId(rawId);
    if (!this.store.read().workers.has(id)) throw notFound(`worker not found: ${id}`);
    if (!this.current(id)) throw notFound(`worker ${id} has no NVMe credential`);
    await this.creds.change((d, audit) => {
      const cur = d.credentials[id];
      if (!cur.revoked) {
        cur.revoked = true;
        cur.revoked_at = this.clock.isoNow();
      }
      for (const p of Object.values(cur.agents)) Object.assign(p, { state: 'removing', attempts: 0, next_attempt_at: null, last_error: null });
      audit('credential.revoke', { worker_id: id, hostnqn: cur.hostnqn, ...this.hashes(cur), client });
    });
    await this.syncWorker(id, 'delete');
    await this.notifyChange(id, 'delete');
    return this.toDto(this.current(id)!);
  }

  /** Called after a rotation or a revocation is committed and pushed to the NVMe agents (the iSCSI CHAP of LIO and stgt disks follows). */
  onCredentialChange(fn: (id: string, reason: PushReason) => Promise<unknown>): void {
    this.changeObservers.push(fn);
  }

  private async notifyChange(id: string, reason: PushReason): Promise<void> {
    for (const fn of this.changeObservers) await fn(id, reason);
  }

  /** Issues the credential of a worker that has none (first NVMe disk). Revoked ones stay revoked. */
  async ensureIssued(id: string, client: string, reason = 'first NVMe disk'): Promise<void> {
    if (this.current(id)) return;
    await this.creds.change((d, audit) => {
      this.dropLeftover(d, id);
      if (d.credentials[id]) return;
      const rec: CredentialRecord = {
        worker_id: id,
        hostnqn: this.hostNqnOf(id),
        dhchap_key: generateDhchapKey(),
        issued_at: this.clock.isoNow(),
        revoked: false,
        revoked_at: null,
        agents: {},
        worker_incarnation: this.incarnationOf(id),
      };
      d.credentials[id] = rec;
      audit('credential.issue', { worker_id: id, hostnqn: rec.hostnqn, source: 'generated', reason, ...this.hashes(rec), client });
    });
  }

  /**
   * Worker deleted: its credential goes, and its host is queued for removal from every agent.
   * Never throws: the delete is committed; whatever fails here the reconciler finishes (it treats
   * a credential without a worker the same way).
   */
  async workerDeleted(id: string, client: string): Promise<void> {
    const c = this.creds.get(id);
    if (!c) return;
    try {
      const deleted = await this.creds.change((d, audit) => {
        const cur = d.credentials[id];
        if (!cur) return false; // someone else (the reconciler) got here first
        if (!this.isLeftover(cur)) return false; // issued to a worker of this id that exists now
        delete d.credentials[id];
        for (const agent of Object.keys(cur.agents)) {
          d.removals.push({ worker_id: id, hostnqn: cur.hostnqn, agent, attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null });
        }
        audit('credential.delete', { worker_id: id, hostnqn: cur.hostnqn, agents: Object.keys(cur.agents).sort(), client });
        return true;
      });
      if (!deleted) return;
      await Promise.all(this.creds.removals().filter((r) => r.worker_id === id).map((r) => this.removeQueued(r)));
    } catch (e) {
      this.log.error(`credential cleanup of deleted worker ${id} failed, left to the reconciler: ${(e as Error).message}`);
    }
  }

  /** Agent -> the NQNs of the worker's NVMe disks there (what the host must be allowed on). */
  desired(id: string): Map<string, string[]> {
    const out = new Map<string, string[]>();
    const w = this.store.read().workers.get(id);
    for (const d of w?.disks ?? []) {
      if (d.transport !== 'nvme-tcp' || !d.nqn) continue;
      out.set(d.agent, [...(out.get(d.agent) ?? []), d.nqn].sort());
    }
    return out;
  }

  /**
   * Brings one worker's agents in line now (after a disk create/delete, a rotation or a revoke):
   * every agent that should have the host gets a push, every other one a removal. Failures stay
   * recorded for the reconciler; nothing here throws for an unreachable agent.
   */
  async syncWorker(id: string, reason: PushReason): Promise<PushOutcome[]> {
    try {
      await this.markDesired(id);
      const c = this.current(id);
      if (!c) return [];
      return await Promise.all(
        Object.entries(c.agents).map(([agent, p]) => (p.state === 'removing' ? this.removeFrom(id, agent, reason) : this.pushTo(id, agent, reason))),
      );
    } catch (e) {
      // The change that asked for this is committed; the reconciler converges from the ledger.
      this.log.error(`credential sync of ${id} failed, left to the reconciler: ${(e as Error).message}`);
      return [];
    }
  }

  /** Adds push records for new agents and marks records of agents without a disk as removing. */
  async markDesired(id: string): Promise<void> {
    const c = this.current(id);
    if (!c) return;
    const want = this.desired(id);
    const changes = [...want.keys()].some((a) => !c.agents[a] || c.agents[a].state === 'removing') ||
      Object.entries(c.agents).some(([a, p]) => p.state !== 'removing' && (c.revoked || !want.has(a))) ||
      [...want].some(([a, s]) => c.agents[a] && c.agents[a].state === 'pushed' && s.join() !== c.agents[a].subsystems.join());
    if (!changes) return;
    await this.creds.note((d) => {
      const cur = d.credentials[id];
      if (!cur) return;
      for (const [a, s] of want) {
        if (cur.revoked) break;
        const p = cur.agents[a];
        if (!p || p.state === 'removing') cur.agents[a] = newPush();
        else if (p.state === 'pushed' && s.join() !== p.subsystems.join()) Object.assign(p, { state: 'pending', next_attempt_at: null });
      }
      for (const [a, p] of Object.entries(cur.agents)) {
        if (p.state !== 'removing' && (cur.revoked || !want.has(a))) Object.assign(p, { state: 'removing', attempts: 0, next_attempt_at: null, last_error: null });
      }
    });
  }

  /** PUT /nvme/hosts/{hostnqn} on one agent with the current secret, PSK and exact subsystems. */
  pushTo(id: string, agentId: string, reason: PushReason): Promise<PushOutcome> {
    const hostnqn = this.hostNqnOf(id);
    return this.serial(hostnqn, agentId, async () => {
      const c = this.current(id);
      if (!c || c.revoked) return { worker_id: id, agent: agentId, hostnqn, reason, ok: false, error: 'no live credential' };
      const subsystems = this.desired(id).get(agentId) ?? [];
      const a = this.registry.get(agentId);
      let error: string | null = null;
      let rejected = false;
      if (!a) error = `agent not found: ${agentId}`;
      else {
        try {
          await this.gateway.call(a, 'PUT', `/nvme/hosts/${encodeURIComponent(c.hostnqn)}`, {
            body: { dhchap_key: c.dhchap_key, dhchap_ctrl_key: this.ctrlKey(c), dhchap_hash: DHCHAP_HASH, dhchap_dhgroup: DHCHAP_DHGROUP, tls_psk: this.tlsPsk(c), subsystems },
            timeoutMs: this.config.agentProbeTimeoutMs * 2,
          });
        } catch (e) {
          error = (e as Error).message;
          rejected = e instanceof AgentHttpError;
        }
      }
      const keyHash = secretSha12(c.dhchap_key);
      const p = await this.recordAttempt(id, agentId, error, rejected, { key_sha256: keyHash, subsystems });
      await this.audit.record('credential.push', {
        ...(error ? { status: 'failed', error } : {}),
        worker_id: id,
        hostnqn: c.hostnqn,
        agent: agentId,
        reason,
        attempts: p?.attempts ?? null,
        dhchap_key_sha256: keyHash,
        subsystems,
        client: 'reconciler',
      });
      return { worker_id: id, agent: agentId, hostnqn: c.hostnqn, reason, ok: !error, ...(error ? { error } : {}) };
    });
  }

  /** DELETE /nvme/hosts/{hostnqn} for a record in state removing (404 counts as done). */
  removeFrom(id: string, agentId: string, reason: PushReason): Promise<PushOutcome> {
    const hostnqn = this.hostNqnOf(id);
    return this.serial(hostnqn, agentId, async () => {
      const c = this.current(id);
      const why = c?.revoked ? 'revoked' : 'no NVMe disk of the worker left on the agent';
      const error = await this.deleteHost(agentId, hostnqn);
      await this.creds.note((d) => {
        const cur = d.credentials[id];
        const p = cur?.agents[agentId];
        if (!p || p.state !== 'removing') return;
        if (!error) delete cur.agents[agentId];
        else this.fail(p, error, false);
      });
      await this.audit.record('credential.remove', { ...(error ? { status: 'failed', error } : {}), worker_id: id, hostnqn, agent: agentId, reason: why, client: 'reconciler' });
      return { worker_id: id, agent: agentId, hostnqn, reason, ok: !error, ...(error ? { error } : {}) };
    });
  }

  /** A queued removal (deleted worker): DELETE, then drop it from the queue. */
  removeQueued(r: RemovalRecord, why = 'worker deleted'): Promise<PushOutcome> {
    return this.serial(r.hostnqn, r.agent, async () => {
      // A worker re-created under the same id wants this host on this agent again: never remove it.
      const live = this.current(r.worker_id);
      const error = live && !live.revoked && this.desired(r.worker_id).has(r.agent) ? null : await this.deleteHost(r.agent, r.hostnqn);
      await this.creds.note((d) => {
        const i = d.removals.findIndex((x) => x.hostnqn === r.hostnqn && x.agent === r.agent);
        if (i < 0) return;
        if (!error) d.removals.splice(i, 1);
        else this.fail(d.removals[i], error, false);
      });
      await this.audit.record('credential.remove', { ...(error ? { status: 'failed', error } : {}), worker_id: r.worker_id, hostnqn: r.hostnqn, agent: r.agent, reason: why, client: 'reconciler' });
      return { worker_id: r.worker_id, agent: r.agent, hostnqn: r.hostnqn, reason: 'delete', ok: !error, ...(error ? { error } : {}) };
    });
  }

  /** Records a failed attempt that never reached the agent (its listing failed in a pass). */
  async recordUnreachable(id: string, agentId: string, error: string): Promise<void> {
    await this.recordAttempt(id, agentId, error, false);
  }

  /**
   * The NVMe boot credential of a worker for a disk, or null when it must not boot: no or revoked
   * credential, or the disk's agent does not (yet) hold this secret with a link to the disk.
   */
  /** Changes with every credential or push-state change (cached boot answers depend on both). */
  get revision(): number {
    return this.creds.revision;
  }

  bootCredential(workerId: string, disk: DiskRecord): BootCredential | null {
    const c = this.bootCredentialOrBlocker(workerId, disk);
    return typeof c === 'string' ? null : c;
  }

  /** What bootCredential gives, or why it gives nothing (a worker's boot readiness says it). */
  bootCredentialOrBlocker(workerId: string, disk: DiskRecord): BootCredential | 'credential-missing' | 'credential-revoked' | 'credential-not-pushed' {
    const c = this.current(workerId);
    if (!c || !disk.nqn) return 'credential-missing';
    if (c.revoked) return 'credential-revoked';
    const p = c.agents[disk.agent];
    if (!p || p.state !== 'pushed' || p.key_sha256 !== secretSha12(c.dhchap_key) || !p.subsystems.includes(disk.nqn)) return 'credential-not-pushed';
    return { hostnqn: c.hostnqn, tls_psk: this.tlsPsk(c), dhchap_secret: c.dhchap_key, dhchap_ctrl_secret: this.ctrlKey(c) };
  }

  /** Whether the push record is due (never attempted, or its backoff has passed). */
  isDue(p: { next_attempt_at: string | null }, now = this.clock.now().getTime()): boolean {
    return p.next_attempt_at === null || Date.parse(p.next_attempt_at) <= now;
  }

  // ---- internals ----

  private async deleteHost(agentId: string, hostnqn: string): Promise<string | null> {
    const a = this.registry.get(agentId);
    if (!a) return null; // the agent is gone from the registry: nothing left to remove from
    try {
      await this.gateway.call(a, 'DELETE', `/nvme/hosts/${encodeURIComponent(hostnqn)}`, { timeoutMs: this.config.agentProbeTimeoutMs * 2 });
      return null;
    } catch (e) {
      if (e instanceof AgentHttpError && e.upstreamStatus === 404) return null;
      return (e as Error).message;
    }
  }

  private async recordAttempt(id: string, agentId: string, error: string | null, rejected: boolean, ok?: Pick<PushRecord, 'key_sha256' | 'subsystems'>): Promise<PushRecord | null> {
    return this.creds.note((d) => {
      const p = d.credentials[id]?.agents[agentId];
      if (!p || p.state === 'removing') return null;
      if (error) this.fail(p, error, rejected);
      else Object.assign(p, { state: 'pushed', attempts: 0, last_error: null, last_attempt_at: this.clock.isoNow(), next_attempt_at: null, rejected: false, ...ok });
      return { ...p };
    });
  }

  private fail(p: PushRecord | RemovalRecord, error: string, rejected: boolean): void {
    p.attempts += 1;
    p.last_error = error.slice(0, 300);
    p.last_attempt_at = this.clock.isoNow();
    const base = (this.config.reconcileSeconds || 30) * 1000;
    const delay = Math.min(base * 2 ** (p.attempts - 1), BACKOFF_CAP_MS) * (1 + Math.random() * 0.25);
    // Whole seconds, rounded up: the record shows the same form as every other timestamp.
    p.next_attempt_at = new Date(Math.ceil((this.clock.now().getTime() + delay) / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, '+00:00');
    if ('state' in p) {
      if (p.state !== 'removing') p.state = 'failed';
      p.rejected = rejected;
    }
  }

  /** Runs fn after every earlier push or removal of this host on this agent (the lock goes when idle). */
  private serial<R>(hostnqn: string, agent: string, fn: () => Promise<R>): Promise<R> {
    const k = `${hostnqn}\0${agent}`;
    let m = this.locks.get(k);
    if (!m) this.locks.set(k, (m = new Mutex()));
    const lock = m;
    return lock.run(fn).finally(() => {
      if (!lock.busy) this.locks.delete(k);
    });
  }

  private hashes(c: CredentialRecord): Record<string, string> {
    return { dhchap_key_sha256: secretSha12(c.dhchap_key), tls_psk_sha256: secretSha12(this.tlsPsk(c)) };
  }

  private toDto(c: CredentialRecord): CredentialDto {
    return {
      worker_id: c.worker_id,
      hostnqn: c.hostnqn,
      ...(this.hashes(c) as { dhchap_key_sha256: string; tls_psk_sha256: string }),
      issued_at: c.issued_at,
      revoked: c.revoked,
      revoked_at: c.revoked_at,
      agents: Object.entries(c.agents)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([agent, p]) => ({ agent, state: p.state, attempts: p.attempts, last_error: p.last_error, last_attempt_at: p.last_attempt_at, next_attempt_at: p.next_attempt_at })),
    };
  }

  private parseId(raw: string): string {
    const id = normalizeId(raw);
    if (!id) throw badRequest(`worker_id: invalid worker id ${JSON.stringify(raw)}`);
    return id;
  }
}
