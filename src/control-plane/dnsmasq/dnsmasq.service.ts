import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { ApiError } from '../../shared/http/api-error';
import { ProcessRunner } from '../../shared/process-runner';
import { Serving } from '../common/serving';
import { AppConfig } from '../config/app-config';
import { FileSystem } from '../../shared/files/file-system';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';

export interface DnsmasqSyncResult {
  /** The file content changed and was rewritten. */
  changed: boolean;
  /**
   * When it changed: the reload that will make dnsmasq read it, resolving to the error message if
   * it failed (the file is already updated then). Not awaited under the ledger lock: see reload.
   */
  reload: Promise<string | undefined>;
}

const NO_RELOAD: Promise<undefined> = Promise.resolve(undefined);

/**
 * dnsmasq/dhcp-hosts.conf is a projection of the device ledger: one `mac,hostname` line per bound
 * device. It is regenerated after every binding change and dnsmasq is told to re-read it. In the
 * default (atomic) mode it is a symlink to its current data file (FileSystem.replaceViaLink).
 */
@Injectable()
export class DnsmasqService implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Dnsmasq');
  readonly file: string;
  /** What the file on disk holds, read at start; null once the projection has been compared. */
  private onDisk: Buffer | null = null;
  /** The file on disk equals `buf`. */
  private written = false;
  /**
   * The projection, kept incrementally: worker_id -> its row; the rows' sort keys and line lengths
   * in file order; and the file's bytes in one buffer patched in place (a memmove per changed row),
   * so a binding change costs O(changed) plus writing the file, never a rebuild and sort.
   */
  private rows = new Map<string, { key: string; mac: string }>();
  private order: string[] = [];
  private lens: number[] = [];
  private buf = Buffer.alloc(64 * 1024);
  private len = 0;
  private workerByMac = new Map<string, string>();
  /**
   * The rows of the last full derivation (start, a hand edit), in file order, while the index
   * above is not built from them yet: a full derivation makes only the file's bytes, and the index
   * follows once the server listens (warmIndex, a slice per turn) or at the next incremental
   * change, whichever comes first. At 100,000 bound devices the index is ~0.3 s of Maps and arrays
   * (~30 MB) that no boot needs: not in the start-up's path, nor in one long turn after it.
   */
  private unindexed: BoundRow[] | null = null;
  private retryTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
    private readonly store: LedgerRepository,
    private readonly proc: ProcessRunner,
    private readonly serving: Serving,
  ) {
    this.file = path.join(config.dnsmasqDir, 'dhcp-hosts.conf');
  }

  async onModuleInit(): Promise<void> {
    this.fs.mkdirpSync(this.config.dnsmasqDir);
    this.fs.removeStaleTemps(this.config.dnsmasqDir);
    this.fs.removeStaleLinkData(this.file);
    const text = this.fs.readTextSync(this.file);
    this.onDisk = text === null ? null : Buffer.from(text);
    // Heal a projection left stale by a crash between the ledger write and this file.
    const r = await this.store.exclusive(() => this.sync());
    const err = await r.reload;
    if (err) this.log.warn(`dnsmasq reload at start failed: ${err}`);
    this.serving.whenListening(() => void this.warmIndex().catch((err) => this.log.warn(`dhcp-hosts.conf index not built ahead (${(err as Error).message}); the next change builds it`)));
    // A hand edit of the ledger that changes a binding reaches dnsmasq at once, not at the next
    // API change.
    this.store.onExternalChange(() => {
      this.store
        .exclusive(() => this.sync())
        .then(async (s) => {
          const err = await s.reload;
          if (err) this.log.warn(`dnsmasq reload after a hand edit failed: ${err}`);
        })
        .catch((err) => this.log.error({ err }, 'dhcp-hosts.conf could not be rewritten after a hand edit'));
    });
  }

  /** The file content the ledger implies: `mac,hostname` per bound device, sorted by hostname. */
  render(): string {
    this.update();
    return this.content().toString();
  }

  /**
   * Brings the rows up to date with the keys the store reports changed (all of them after a load
   * or a hand edit), so a binding change costs O(changed), not a scan and sort of the fleet.
   */
  private update(): void {
    const ch = this.store.takeChanges();
    if (ch.full) return this.rebuild();
    // The first change after a full derivation: the index of what the file holds, then the change.
    if (this.unindexed) {
      const idx = emptyIndex();
      indexRows(this.unindexed, this.unindexed.length, idx);
      this.install(idx);
    }
    const affected = new Set<string>(ch.w);
    for (const mac of ch.d) {
      const old = this.workerByMac.get(mac);
      if (old) affected.add(old);
      const d = this.store.devices.get(mac);
      if (d?.bound_worker_id) affected.add(d.bound_worker_id);
    }
    const bound = this.store.boundMacByWorker();
    for (const id of affected) {
      const w = this.store.workers.get(id);
      const mac = bound.get(id);
      const d = mac ? this.store.devices.get(mac) : undefined;
      const next = w && d && d.state === 'bound' && d.bound_worker_id === id ? { key: `${w.hostname}\0${id}`, mac: d.mac } : null;
      const prev = this.rows.get(id);
      if (prev && next && prev.key === next.key && prev.mac === next.mac) continue;
      this.written = false;
      if (prev) {
        this.rows.delete(id);
        this.workerByMac.delete(prev.mac);
        const i = lowerBound(this.order, prev.key);
        const off = this.offsetOf(i);
        const l = this.lens[i];
        this.buf.copyWithin(off, off + l, this.len);
        this.len -= l;
        this.order.splice(i, 1);
        this.lens.splice(i, 1);
      }
      if (next) {
        const line = Buffer.from(`${next.mac},${w!.hostname}\n`);
        this.rows.set(id, next);
        this.workerByMac.set(next.mac, id);
        const i = lowerBound(this.order, next.key);
        const off = this.offsetOf(i);
        if (this.len + line.length > this.buf.length) {
          const bigger = Buffer.alloc(Math.max(this.buf.length * 2, this.len + line.length));
          this.buf.copy(bigger, 0, 0, this.len);
          this.buf = bigger;
        }
        this.buf.copyWithin(off + line.length, off, this.len);
        line.copy(this.buf, off);
        this.len += line.length;
        this.order.splice(i, 0, next.key);
        this.lens.splice(i, 0, line.length);
      }
    }
  }

  /**
   * The index once the server listens, a slice of rows per turn of the event loop. No lock: every
   * change of the rows (update, rebuild) replaces `unindexed` first, and this stops when it sees that.
   */
  private async warmIndex(): Promise<void> {
    const rows = this.unindexed;
    const idx = emptyIndex();
    for (let done = 0; rows && this.unindexed === rows; await new Promise((r) => setImmediate(r))) {
      done = indexRows(rows, Math.min(rows.length, done + INDEX_SLICE), idx);
      if (done === rows.length) return this.install(idx);
    }
  }

  private install(idx: RowIndex): void {
    this.rows = idx.rows;
    this.workerByMac = idx.workerByMac;
    this.order = idx.order;
    this.lens = idx.lens;
    this.unindexed = null;
  }

  /** Derives every row from the ledger in one pass (start, hand edits): the file's bytes; the index follows (see unindexed). */
  private rebuild(): void {
    const rows: BoundRow[] = [];
    for (const d of this.store.devices.values()) {
      if (d.state !== 'bound' || !d.bound_worker_id) continue;
      const w = this.store.workers.get(d.bound_worker_id);
      if (w) rows.push({ mac: d.mac, hostname: w.hostname, id: w.worker_id });
    }
    // The order of the rows' keys (`hostname NUL worker_id`), without making a key per compare.
    rows.sort((a, b) => (a.hostname < b.hostname ? -1 : a.hostname > b.hostname ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    // One encode of the whole text (a Buffer per row cost ~200 ms at 100,000 rows).
    const content = Buffer.from(rows.map(lineOf).join(''));
    this.buf = Buffer.alloc(Math.max(64 * 1024, content.length * 2));
    content.copy(this.buf);
    this.len = content.length;
    this.written = false;
    this.install(emptyIndex());
    this.unindexed = rows;
  }

  /** Byte offset of row i: a sum over the line lengths (tens of microseconds at 50,000 rows). */
  private offsetOf(i: number): number {
    let off = 0;
    const lens = this.lens;
    for (let k = 0; k < i; k++) off += lens[k];
    return off;
  }

  private content(): Buffer {
    return this.buf.subarray(0, this.len);
  }

  /** Hostname -> MAC as the file on disk has it right now (for /workers/{id}/status). */
  async lookup(hostname: string): Promise<{ hostname: string; mac: string } | null> {
    const text = (await this.fs.readText(this.file)) ?? '';
    for (const line of text.split('\n')) {
      const [mac, host] = line.trim().split(',');
      if (host && host.trim() === hostname) return { hostname, mac: mac.trim() };
    }
    return null;
  }

  private durableTimer: NodeJS.Timeout | null = null;
  /** When the oldest change not yet made durable was written (performance.now), 0 when none. */
  private durableSince = 0;

  /**
   * The file made durable a second after the last change of a burst (at most 10 s after its first
   * change, however long the burst), off every answer's path: a power loss right after a change
   * could otherwise leave dnsmasq an empty file until the control plane starts and re-derives it.
   */
  private scheduleDurable(): void {
    const now = performance.now();
    if (!this.durableSince) this.durableSince = now;
    if (this.durableTimer) clearTimeout(this.durableTimer);
    this.durableTimer = setTimeout(
      () => {
        this.durableTimer = null;
        this.durableSince = 0;
        this.fs.syncLinked(this.file).catch((err) => this.log.warn(`dhcp-hosts.conf could not be made durable: ${(err as Error).message}`));
      },
      Math.max(0, Math.min(1000, this.durableSince + 10_000 - now)),
    );
    this.durableTimer.unref?.();
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.durableTimer) {
      clearTimeout(this.durableTimer);
      this.durableTimer = null;
      this.durableSince = 0;
      await this.fs.syncLinked(this.file).catch(() => undefined);
    }
  }

  /**
   * The file could not be written after a committed change (full or read-only disk): it is a
   * projection of the ledger, so it is re-derived and written again every 2 s until it is, never
   * by undoing the ledger. Any later sync (the next binding change) also writes it.
   */
  retryLater(): void {
    if (this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.store
        .exclusive(() => this.sync())
        .then(
          async (r) => {
            const err = await r.reload;
            this.log.log(`dhcp-hosts.conf written again after a failed write${err ? `; reload failed: ${err}` : ''}`);
          },
          (err) => {
            this.log.warn(`dhcp-hosts.conf still not writable (${(err as Error).message}); retrying`);
            this.retryLater();
          },
        );
    }, 2000);
    this.retryTimer.unref?.();
  }

  /**
   * Rewrites the file when the projection changed and asks for a reload (not awaited: the caller
   * waits for it after releasing the lock). Call under the ledger lock.
   */
  async sync(): Promise<DnsmasqSyncResult> {
    this.update();
    const content = this.content();
    if (this.onDisk) {
      // First sync after start: rewrite only if the file differs (a crash or a hand edit).
      this.written = content.equals(this.onDisk);
      this.onDisk = null;
    }
    if (this.written) return { changed: false, reload: NO_RELOAD };
    // Derived from the ledger and re-derived at every start, so no fsync in the answer's path:
    // the symlink swap (or the in-place rewrite) is what dnsmasq needs to never read a half file.
    if (this.config.dnsmasqWriteMode === 'inplace') await this.fs.writeInPlace(this.file, content.toString());
    else {
      await this.fs.replaceViaLink(this.file, content);
      this.scheduleDurable();
    }
    this.written = true;
    return { changed: true, reload: this.requestReload() };
  }

  /** The reload in progress, and the one queued behind it (shared by every change made meanwhile). */
  private reloading: Promise<string | undefined> | null = null;
  private queued: Promise<string | undefined> | null = null;

  /**
   * Reloads are coalesced and never hold the ledger lock: a reload can take seconds (`docker exec
   * ... killall -HUP` is bounded at 10 s), and binding changes go on meanwhile. A change made
   * while a reload runs may not be in the file that reload makes dnsmasq read, so it waits for
   * the next one, which every change made during the running one shares: at most two reloads
   * for any burst of changes.
   */
  requestReload(): Promise<string | undefined> {
    if (this.queued) return this.queued;
    if (this.reloading) {
      this.queued = this.reloading.then(() => {
        this.queued = null;
        return this.runReload();
      });
      return this.queued;
    }
    return this.runReload();
  }

  private runReload(): Promise<string | undefined> {
    const p = this.reload().then(
      () => undefined,
      (e: Error) => {
        this.log.error(`dnsmasq reload failed: ${e.message}`);
        return e.message;
      },
    );
    this.reloading = p;
    void p.then(() => {
      if (this.reloading === p) this.reloading = null;
    });
    return p;
  }

  private async reload(): Promise<void> {
    const r = this.config.dnsmasqReload;
    switch (r.kind) {
      case 'none':
        return;
      case 'pidfile': {
        const raw = (await this.fs.readText(r.path))?.trim();
        const pid = raw && /^\d+$/.test(raw) ? Number(raw) : NaN;
        if (!Number.isInteger(pid) || pid <= 1) throw new Error(`no valid pid in ${r.path}`);
        this.proc.signal(pid, 'SIGHUP');
        return;
      }
      case 'docker':
        await this.proc.run('docker', ['exec', r.container, 'killall', '-HUP', 'dnsmasq']);
        return;
      case 'command':
        await this.proc.run('/bin/sh', ['-c', r.command]);
        return;
    }
  }
}

/** The documented 500: the binding file is updated, the reload failed. */
export function reloadFailed(detail: string): ApiError {
  return new ApiError(500, `dnsmasq reload failed (dhcp-hosts.conf already updated): ${detail}`);
}

/** First index in the sorted array whose value is >= key (string order, as Array.sort). */
/** A bound device's row in dhcp-hosts.conf. */
type BoundRow = { mac: string; hostname: string; id: string };
type RowIndex = { rows: Map<string, { key: string; mac: string }>; workerByMac: Map<string, string>; order: string[]; lens: number[] };

/** Rows indexed per turn of the event loop after start (~15 ms each at 100,000 rows). */
const INDEX_SLICE = 5_000;

const lineOf = (r: BoundRow): string => `${r.mac},${r.hostname}\n`;
const emptyIndex = (): RowIndex => ({ rows: new Map(), workerByMac: new Map(), order: [], lens: [] });

/** Adds rows[idx.order.length .. to) to the index (rows in file order); returns `to`. */
function indexRows(rows: BoundRow[], to: number, idx: RowIndex): number {
  for (let i = idx.order.length; i < to; i++) {
    const r = rows[i];
    const key = `${r.hostname}\0${r.id}`;
    idx.rows.set(r.id, { key, mac: r.mac });
    idx.workerByMac.set(r.mac, r.id);
    idx.order.push(key);
    idx.lens.push(Buffer.byteLength(lineOf(r)));
  }
  return to;
}

function lowerBound(a: string[], key: string): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
