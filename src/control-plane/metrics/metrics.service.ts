import { Injectable, OnModuleInit } from '@nestjs/common';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import { AuditService } from '../audit/audit.service';
import { CredentialRepository } from '../repositories/credentials/credential.repository';
import { ReconcilerService } from '../reconciler/reconciler.service';
import { SettingsService } from '../settings/settings.service';
import { CacheFreshness } from '../repositories/cache-freshness';
import { BootService } from '../boot/boot.service';
import { BootSessionsService } from '../boots/boot-sessions.service';
import { ChangeFeed } from '../changes/change-feed';
import { BOOT_OUTCOMES } from '../boots/boot-timeline';
import { BOOT_STAGES } from '../repositories/boot-events/boot-event.repository';
import { logWriteFailures } from '../../shared/http/log-destination';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';

interface RouteStats {
  statuses: Map<number, number>;
  buckets: Float64Array;
  sum: number;
  count: number;
}

/** One observation into a histogram of fixed buckets (no allocation). */
function countInto(st: RouteStats, buckets: number[], seconds: number): void {
  st.sum += seconds;
  st.count++;
  for (let i = 0; i < buckets.length; i++) {
    if (seconds <= buckets[i]) {
      st.buckets[i]++;
      return;
    }
  }
}

const STAGE_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Prometheus metrics of one control plane (GET /metrics). Labels are bounded sets only: route
 * templates (never a URL, so never a MAC), methods, status codes, states, agent ids. Counters
 * come from the request hooks, the store's commit observer and the audit tap; gauges are read
 * from memory at scrape time (no I/O, no agent call). One Registry per app (tests run several).
 */
@Injectable()
export class MetricsService implements OnModuleInit {
  readonly registry = new Registry();
  private readonly commits = new Histogram({ name: 'kurrent_store_commit_duration_seconds', help: 'Durable store writes (change-log append + fsync): commits and telemetry flushes.', labelNames: ['kind'], buckets: LATENCY_BUCKETS, registers: [this.registry] });
  private readonly passes = new Counter({ name: 'kurrent_reconciler_passes_total', help: 'Reconciler passes, by outcome (failed: at least one push or removal failed).', labelNames: ['status'], registers: [this.registry] });
  private readonly passTime = new Histogram({ name: 'kurrent_reconciler_pass_duration_seconds', help: 'Duration of reconciler passes.', buckets: [0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60], registers: [this.registry] });
  private readonly unreachable = new Gauge({ name: 'kurrent_reconciler_agents_unreachable', help: 'Agents the last reconciler pass could not list.', registers: [this.registry] });
  private readonly pushes = new Counter({ name: 'kurrent_credential_pushes_total', help: 'NVMe-oF credential pushes and removals, by agent, operation and outcome.', labelNames: ['agent', 'op', 'status'], registers: [this.registry] });
  /** Boots ended and stage times: counted here like the request series (two observations per boot in a storm). */
  private readonly bootsEnded = new Map<string, number>();
  /** Boot-route requests the boot front answered, and connections it handed to node:http. */
  readonly bootFront = { answered: 0, handedOver: 0 };
  private readonly bootStages = new Map<string, RouteStats>();
  private readonly operations = new Counter({ name: 'kurrent_audit_operations_total', help: 'Audited operations, by operation and status.', labelNames: ['op', 'status'], registers: [this.registry] });
  /**
   * The request series are kept here, not in prom-client: its observe() allocates label objects
   * and hash strings on every call, and at boot-storm rates that garbage halved /boot-vars
   * throughput and put its p99 at ~40 ms (bench:boot). method -> route -> counts, no allocation
   * per request; rendered in the exposition format at scrape time.
   */
  private readonly http = new Map<string, Map<string, RouteStats>>();

  constructor(
    private readonly store: LedgerRepository,
    private readonly settings: SettingsService,
    private readonly storageNodeRegistry: StorageNodeRegistry,
    private readonly storageNodes: StorageNodesService,
    private readonly creds: CredentialRepository,
    private readonly audit: AuditService,
    private readonly reconciler: ReconcilerService,
    private readonly freshness: CacheFreshness,
    private readonly boot: BootService,
    private readonly sessions: BootSessionsService,
    private readonly feed: ChangeFeed,
  ) {}

  onModuleInit(): void {
    this.store.onCommitted((s, kind) => this.commits.labels(kind).observe(s));
    this.reconciler.onPass((r, seconds) => {
      this.passes.labels(r.failed.length ? 'failed' : 'ok').inc();
      this.passTime.observe(seconds);
      this.unreachable.set(r.agents_unreachable.length);
    });
    for (const o of BOOT_OUTCOMES) if (o !== 'in_progress') this.bootsEnded.set(o, 0);
    for (const st of BOOT_STAGES) if (st !== 'report') this.bootStages.set(st, { statuses: new Map(), buckets: new Float64Array(STAGE_BUCKETS.length), sum: 0, count: 0 });
    this.sessions.onEnded((o) => this.bootsEnded.set(o, (this.bootsEnded.get(o) ?? 0) + 1));
    this.sessions.onStage((stage, seconds) => {
      const st = this.bootStages.get(stage);
      if (st) countInto(st, STAGE_BUCKETS, seconds);
    });
    this.audit.tap((e) => {
      this.operations.labels(e.op, e.status).inc();
      if ((e.op === 'credential.push' || e.op === 'credential.remove') && typeof e.agent === 'string') this.pushes.labels(e.agent, e.op.slice(11), e.status).inc();
    });
    this.gauges();
  }

  /** One answered request: route is the template (`/workers/:worker_id`), `unmatched` for 404s. */
  observe(method: string, route: string, status: number, seconds: number): void {
    let byRoute = this.http.get(method);
    if (!byRoute) this.http.set(method, (byRoute = new Map()));
    let st = byRoute.get(route);
    if (!st) byRoute.set(route, (st = { statuses: new Map(), buckets: new Float64Array(LATENCY_BUCKETS.length), sum: 0, count: 0 }));
    st.statuses.set(status, (st.statuses.get(status) ?? 0) + 1);
    countInto(st, LATENCY_BUCKETS, seconds);
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: this.renderHttp() + this.renderBoots() + (await this.registry.metrics()) };
  }

  private renderBoots(): string {
    const out = [
      '# HELP kurrent_boot_front_total Boot-route requests the boot front answered off the socket (answered), and connections it handed to node:http at a request of another kind (handed_over).',
      '# TYPE kurrent_boot_front_total counter',
      `kurrent_boot_front_total{result="answered"} ${this.bootFront.answered}`,
      `kurrent_boot_front_total{result="handed_over"} ${this.bootFront.handedOver}`,'# HELP kurrent_boots_total Boots this control plane saw end, by outcome (booted, failed, stuck, superseded, waiting, held).', '# TYPE kurrent_boots_total counter'];
    for (const [o, n] of this.bootsEnded) out.push(`kurrent_boots_total{outcome="${o}"} ${n}`);
    out.push("# HELP kurrent_boot_stage_seconds Time from a boot's report to each later stage it reached, by stage.", '# TYPE kurrent_boot_stage_seconds histogram');
    for (const [stage, st] of this.bootStages) {
      let cum = 0;
      STAGE_BUCKETS.forEach((b, i) => {
        cum += st.buckets[i];
        out.push(`kurrent_boot_stage_seconds_bucket{stage="${stage}",le="${b}"} ${cum}`);
      });
      out.push(`kurrent_boot_stage_seconds_bucket{stage="${stage}",le="+Inf"} ${st.count}`);
      out.push(`kurrent_boot_stage_seconds_sum{stage="${stage}"} ${st.sum}`);
      out.push(`kurrent_boot_stage_seconds_count{stage="${stage}"} ${st.count}`);
    }
    return out.join('\n') + '\n\n';
  }

  private renderHttp(): string {
    const esc = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
    const req = ['# HELP kurrent_http_requests_total HTTP requests answered, by route template and status.', '# TYPE kurrent_http_requests_total counter'];
    const lat = ['# HELP kurrent_http_request_duration_seconds HTTP request duration, by route template.', '# TYPE kurrent_http_request_duration_seconds histogram'];
    for (const [method, byRoute] of this.http) {
      for (const [route, st] of byRoute) {
        const l = `method="${esc(method)}",route="${esc(route)}"`;
        for (const [status, n] of st.statuses) req.push(`kurrent_http_requests_total{${l},status="${status}"} ${n}`);
        let cum = 0;
        LATENCY_BUCKETS.forEach((b, i) => {
          cum += st.buckets[i];
          lat.push(`kurrent_http_request_duration_seconds_bucket{${l},le="${b}"} ${cum}`);
        });
        lat.push(`kurrent_http_request_duration_seconds_bucket{${l},le="+Inf"} ${st.count}`);
        lat.push(`kurrent_http_request_duration_seconds_sum{${l}} ${st.sum}`);
        lat.push(`kurrent_http_request_duration_seconds_count{${l}} ${st.count}`);
      }
    }
    return `${req.join('\n')}\n\n${lat.join('\n')}\n\n`;
  }

  private gauges(): void {
    const r = [this.registry];
    // Process figures read at scrape time. Not prom-client's collectDefaultMetrics: its GC and
    // event-loop observers run all the time, and under a 100,000-request flood they were seen to
    // hold hundreds of MB until the next scrape (device-identity memory-bound test).
    const started = Date.now() / 1000 - process.uptime();
    new Gauge({
      name: 'kurrent_process_resident_memory_bytes',
      help: 'Resident memory of the process.',
      registers: r,
      collect() {
        this.set(process.memoryUsage.rss());
      },
    });
    new Gauge({
      name: 'kurrent_process_heap_used_bytes',
      help: 'V8 heap in use.',
      registers: r,
      collect() {
        this.set(process.memoryUsage().heapUsed);
      },
    });
    new Gauge({
      name: 'kurrent_process_cpu_seconds_total',
      help: 'User and system CPU time of the process.',
      registers: r,
      collect() {
        const u = process.cpuUsage();
        this.set((u.user + u.system) / 1e6);
      },
    });
    new Gauge({
      name: 'kurrent_process_start_time_seconds',
      help: 'Start of the process, Unix time.',
      registers: r,
      collect() {
        this.set(started);
      },
    });
    const boot = this.boot;
    new Gauge({
      name: 'kurrent_boot_answer_cache_total',
      help: 'Boot answers (/boot-vars, /boot-menu) served from the answer cache (hit) or rendered (miss).',
      labelNames: ['result'],
      registers: r,
      collect() {
        this.set({ result: 'hit' }, boot.cacheStats.hits);
        this.set({ result: 'miss' }, boot.cacheStats.misses);
      },
    });
    new Gauge({
      name: 'kurrent_log_write_failures_total',
      help: 'Log lines that could not be written (a full or failing log disk): dropped, never fatal.',
      registers: r,
      collect() {
        this.set(logWriteFailures());
      },
    });
    const freshness = this.freshness;
    new Gauge({
      name: 'kurrent_store_staleness_seconds',
      help: 'Age of this control plane\'s last completed catch-up with the database (0 on the file store); /healthz fails past IPXE_CP_STALENESS_MAX_MS.',
      registers: r,
      collect() {
        this.set(freshness.stalenessMs() / 1000);
      },
    });
    const sessions = this.sessions;
    new Gauge({
      name: 'kurrent_devices_looping',
      help: 'Devices marked looping (boots that never reach their disk; GET /settings/boot-policy).',
      registers: r,
      collect() {
        this.set(sessions.loopingMacs().length);
      },
    });
    const feed = this.feed;
    new Gauge({
      name: 'kurrent_change_feed_waiting',
      help: 'GET /changes long-polls waiting now (open web UI tabs, `kurrent ops list --follow`).',
      registers: r,
      collect() {
        this.set(feed.waiting);
      },
    });
    const store = this.store;
    new Gauge({
      name: 'kurrent_devices',
      help: 'Devices in the ledger, by state.',
      labelNames: ['state'],
      registers: r,
      collect() {
        const n: Record<string, number> = { pooled: 0, bound: 0, revoked: 0 };
        for (const d of store.read().devices.values()) n[d.state] = (n[d.state] ?? 0) + 1;
        for (const [state, v] of Object.entries(n)) this.set({ state }, v);
      },
    });
    new Gauge({
      name: 'kurrent_devices_key_claimed',
      help: 'Devices that have claimed a device key (seed 004).',
      registers: r,
      collect() {
        let n = 0;
        for (const d of store.read().devices.values()) if (d.key_hash) n++;
        this.set(n);
      },
    });
    new Gauge({
      name: 'kurrent_workers',
      help: 'Workers, by readiness (ready: bound and with a disk; partial: one of both; idle: neither).',
      labelNames: ['readiness'],
      registers: r,
      collect() {
        const bound = store.read().boundMacByWorker();
        const n = { ready: 0, partial: 0, idle: 0 };
        for (const w of store.read().workers.values()) {
          const mac = bound.has(w.worker_id);
          const disk = w.disks.length > 0;
          n[mac && disk ? 'ready' : mac || disk ? 'partial' : 'idle']++;
        }
        for (const [readiness, v] of Object.entries(n)) this.set({ readiness }, v);
      },
    });
    const settings = this.settings;
    new Gauge({
      name: 'kurrent_registration_window_open',
      help: '1 while the registration window is open.',
      registers: r,
      collect() {
        this.set(settings.getWindow().open ? 1 : 0);
      },
    });
    new Gauge({
      name: 'kurrent_registration_window_seconds_remaining',
      help: 'Seconds until the open registration window closes (0 when closed).',
      registers: r,
      collect() {
        const w = settings.getWindow();
        this.set(w.open && w.expires_at ? Math.max(0, (Date.parse(w.expires_at) - Date.now()) / 1000) : 0);
      },
    });
    new Gauge({
      name: 'kurrent_registration_window_seats_remaining',
      help: 'Devices the open window still admits (-1: no quota; 0 when closed).',
      registers: r,
      collect() {
        const w = settings.getWindow();
        this.set(!w.open ? 0 : w.remaining === null ? -1 : w.remaining);
      },
    });
    new Gauge({
      name: 'kurrent_settings_enabled',
      help: 'Admission switches: auto_register, signature_enforcement (1 on, 0 off).',
      labelNames: ['setting'],
      registers: r,
      collect() {
        this.set({ setting: 'auto_register' }, settings.autoRegister ? 1 : 0);
        this.set({ setting: 'signature_enforcement' }, settings.signatureEnforcement ? 1 : 0);
      },
    });
    const creds = this.creds;
    new Gauge({
      name: 'kurrent_credential_push_queue',
      help: 'Credential pushes not yet done, by state (pending, failed, removing): the reconciler queue.',
      labelNames: ['state'],
      registers: r,
      collect() {
        const n = { pending: 0, failed: 0, removing: 0 };
        for (const c of creds.all()) for (const p of Object.values(c.agents)) if (p.state in n) n[p.state as keyof typeof n]++;
        n.removing += creds.removals().length;
        for (const [state, v] of Object.entries(n)) this.set({ state }, v);
      },
    });
    const registry = this.storageNodeRegistry;
    const agents = this.storageNodes;
    new Gauge({
      name: 'kurrent_agent_up',
      help: 'Last probe of each enabled agent: 1 answered, 0 did not; absent until first probed.',
      labelNames: ['agent'],
      registers: r,
      collect() {
        this.reset();
        for (const a of registry.all()) {
          const p = agents.lastProbe.get(a.id);
          if (a.enabled && p) this.set({ agent: a.id }, p.up ? 1 : 0);
        }
      },
    });
    new Gauge({
      name: 'kurrent_agent_enabled',
      help: 'Agents of agents.yml: 1 enabled, 0 drained.',
      labelNames: ['agent'],
      registers: r,
      collect() {
        this.reset();
        for (const a of registry.all()) this.set({ agent: a.id }, a.enabled ? 1 : 0);
      },
    });
  }
}
