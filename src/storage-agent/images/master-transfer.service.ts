import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { AgentConfig } from '../agent-config';
import type { ExtentDto, MasterExtentsDto, MasterTransferDto, StartTransferDto } from '../../shared/agent-contract/transfers.dto';
import { ApiError, badRequest, conflict } from '../../shared/http/api-error';
import { checkVersionRef } from '../../shared/master-version-ref';
import { humanSize } from '../../shared/size';
import { AgentClock } from '../agent-clock';
import { ImageFs } from './image-fs';
import { MasterStoreService } from './master-store.service';
import { PeerAgent, PeerAgentClient, PeerError } from './peer-agent-client';

/** Bytes per request to the sender. */
const CHUNK = 16 << 20;
/** Bytes written between two checkpoints (data synced, then the progress file). */
const CHECKPOINT = 64 << 20;

/** What `.<n>.transfer.json` keeps: enough to resume against the same bytes (never the ticket). */
interface TransferState {
  version: number;
  size: number;
  sha256: string;
  created: number;
  note: string;
  source: string;
  /** Every data range below this offset is on disk here (fdatasync'd before this was written). */
  done_below: number;
  /** For the listing after a restart: the data to move, and how much of it is here. */
  data_bytes: number;
  bytes_done: number;
}

/**
 * Versions pulled from another agent: the control plane names the sender and passes a read
 * ticket for that one version (signed with the sender's token, which stays with the control
 * plane). Only the data ranges move (a 40 GiB image with 6 GiB of data moves 6 GiB), in 16 MiB
 * requests (one ahead of the write), with zero blocks left as holes, synced and checkpointed every
 * 64 MiB, so a transfer cut by a restart resumes after its last checkpoint when the control plane
 * asks again. The file becomes a version only after its SHA-256 matches the sender's; until then
 * it is a dot-file no disk can be cloned from.
 */
@Injectable()
export class MasterTransferService implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Transfers');
  private readonly transfers = new Map<string, MasterTransferDto>();
  private readonly running = new Map<string, Promise<void>>();
  private readonly starting = new Map<string, Promise<MasterTransferDto>>();
  private readonly stop = new AbortController();

  constructor(
    private readonly config: AgentConfig,
    private readonly images: ImageFs,
    private readonly store: MasterStoreService,
    private readonly peers: PeerAgentClient,
    private readonly clock: AgentClock,
  ) {}

  /** Transfers an earlier run left: listed as interrupted with their progress, resumed by the next POST. */
  async onModuleInit(): Promise<void> {
    for (const [name, version] of await this.store.pendingTransfers()) {
      const paths = this.store.transferPaths(name, version);
      const st = await this.readState(paths.state);
      if (!st) {
        await this.images.remove(paths.state);
        await this.images.remove(paths.data);
        continue;
      }
      this.transfers.set(key(name, version), {
        name,
        version,
        source: st.source,
        state: 'interrupted',
        size: st.size,
        sha256: st.sha256,
        data_bytes: st.data_bytes,
        bytes_done: st.bytes_done,
        moved_bytes: 0,
        started: 0,
        finished: null,
        error: `interrupted by a restart after ${humanSize(st.bytes_done)} of ${humanSize(st.data_bytes)}; asking for the transfer again resumes it`,
      });
    }
  }

  async onApplicationShutdown(): Promise<void> {
    this.stop.abort();
    await Promise.allSettled([...this.running.values()]);
  }

  list(): MasterTransferDto[] {
    return [...this.transfers.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.version - b.version));
  }

  /**
   * POST /masters/{name}/transfers. Idempotent: a transfer under way is answered as it is, a
   * version already here with the sender's checksum is `done` at once, an interrupted one resumes.
   */
  start(rawName: string, dto: StartTransferDto): Promise<MasterTransferDto> {
    const [name, version] = checkVersionRef(rawName, dto.version);
    const source = sourceUrl(dto.source_url);
    const k = key(name, version);
    const cur = this.transfers.get(k);
    if (cur?.state === 'running') return Promise.resolve({ ...cur });
    // Two calls at once start one transfer: the second waits for the first's answer.
    let p = this.starting.get(k);
    if (!p) {
      p = this.begin(name, version, source, dto.source_ticket).finally(() => this.starting.delete(k));
      this.starting.set(k, p);
    }
    return p;
  }

  private async begin(name: string, version: number, source: string, ticket: string): Promise<MasterTransferDto> {
    const k = key(name, version);
    const peer: PeerAgent = { url: source, ticket };
    let ext: MasterExtentsDto;
    try {
      ext = await this.peers.extents(peer, name, version, this.stop.signal);
    } catch (e) {
      const err = e as PeerError;
      throw new ApiError(err.status === 404 ? 404 : 502, `source_url: the sending agent could not give version ${version} of ${name}: ${err.message}`);
    }
    const had = await this.store.recordOf(name, version);
    if (had && !had.deleted) {
      if (had.sha256 !== ext.sha256) throw conflict(`version: ${name} has another version ${version} here (sha256 ${had.sha256.slice(0, 12)}, the sender's ${ext.sha256.slice(0, 12)}); nothing was copied`);
      return { ...this.record(k, { ...this.fresh(name, version, source, ext), state: 'done', bytes_done: ext.data_bytes, finished: this.now() }) };
    }
    if (had && had.sha256 !== ext.sha256) throw conflict(`version: ${name} had another version ${version} here (deleted; its number is not given to other bytes); nothing was copied`);

    const paths = this.store.transferPaths(name, version);
    const prev = await this.readState(paths.state);
    const resume = prev && prev.sha256 === ext.sha256 && prev.size === ext.size ? prev.done_below : 0;
    const left = remaining(ext.extents, resume);
    const free = await this.images.freeBytes();
    if (left > free) throw new ApiError(507, `DISK_DIR is too full for version ${version} of ${name}: ${humanSize(left)} of data still to copy, ${humanSize(free)} free; nothing was copied`);

    await this.images.mkdirpInside(paths.dir);
    const state: TransferState = { version, size: ext.size, sha256: ext.sha256, created: ext.created, note: ext.note, source, done_below: resume, data_bytes: ext.data_bytes, bytes_done: ext.data_bytes - left };
    // The progress file first: it reserves the number here (a drop meanwhile takes the next one).
    await this.images.writeTextAtomic(paths.state, JSON.stringify(state) + '\n');
    // Not resumed: whatever an earlier attempt left is not the start of this one.
    if (!resume) await this.images.remove(paths.data);
    await this.images.ensureSparse(paths.data, ext.size);
    const t = this.record(k, { ...this.fresh(name, version, source, ext), bytes_done: ext.data_bytes - left });
    this.log.log(`${name}: pulling version ${version} from ${source} (${humanSize(left)} of data${resume ? `, resumed at ${humanSize(resume)}` : ''})`);
    const job = this.run(t, peer, ext, state).finally(() => this.running.delete(k));
    this.running.set(k, job);
    return { ...t };
  }

  private async run(t: MasterTransferDto, peer: PeerAgent, ext: MasterExtentsDto, state: TransferState): Promise<void> {
    const paths = this.store.transferPaths(t.name, t.version);
    const rate = this.config.transferMaxBytesPerSec;
    const t0 = this.clock.nowMs();
    try {
      const chunks: [number, number][] = [];
      for (const e of ext.extents) for (let at = Math.max(e.offset, state.done_below); at < e.offset + e.length; at += CHUNK) chunks.push([at, Math.min(CHUNK, e.offset + e.length - at)]);
      // One range ahead: the next is on the wire while this one is written.
      let next: Promise<Buffer> | null = chunks.length ? this.fetchChunk(peer, t, chunks[0][0], chunks[0][1]) : null;
      let unsynced = 0;
      for (let i = 0; i < chunks.length; i++) {
        if (this.stop.signal.aborted) throw new PeerError('stopped', null);
        const [at, len] = chunks[i];
        const buf = await next!;
        next = i + 1 < chunks.length ? this.fetchChunk(peer, t, chunks[i + 1][0], chunks[i + 1][1]) : null;
        next?.catch(() => undefined); // awaited (and its error thrown) in the next round
        await this.images.writeDataAt(paths.data, at, buf);
        t.bytes_done += len;
        t.moved_bytes += len;
        unsynced += len;
        if (unsynced >= CHECKPOINT || i === chunks.length - 1) {
          // What the progress file says is written is on disk.
          await this.images.syncData(paths.data);
          state.done_below = at + len;
          state.bytes_done = t.bytes_done;
          await this.images.writeTextAtomic(paths.state, JSON.stringify(state) + '\n');
          unsynced = 0;
        }
        if (rate > 0) {
          // Bandwidth cap: never ahead of rate * elapsed (a boot storm shares this network).
          const ahead = (t.moved_bytes / rate) * 1000 - (this.clock.nowMs() - t0);
          if (ahead > 0) await this.clock.sleep(ahead, this.stop.signal).catch(() => undefined);
        }
      }
      const sha = await this.images.sha256(paths.data, this.stop.signal);
      if (sha !== ext.sha256) {
        await this.images.remove(paths.data);
        await this.images.remove(paths.state);
        throw new PeerError(`checksum mismatch: received ${sha.slice(0, 12)}, the sender's version is ${ext.sha256.slice(0, 12)}; the copy was thrown away`, null);
      }
      await this.store.adoptTransfer(t.name, t.version, paths.data, { sha256: ext.sha256, created: ext.created, note: ext.note });
      await this.images.remove(paths.state);
      t.state = 'done';
      t.finished = this.now();
      this.log.log(`${t.name}: version ${t.version} received from ${t.source}: ${humanSize(t.moved_bytes)} moved in ${((this.clock.nowMs() - t0) / 1000).toFixed(1)} s`);
    } catch (e) {
      t.finished = this.now();
      // What is kept is what the last checkpoint says (a retry resumes there).
      t.bytes_done = state.bytes_done;
      if (this.stop.signal.aborted) {
        t.state = 'interrupted';
        t.error = 'interrupted by a shutdown; asking for the transfer again resumes it';
        return;
      }
      t.state = 'failed';
      t.error = (e as Error).message;
      this.log.error(`${t.name}: transfer of version ${t.version} from ${t.source} failed after ${humanSize(t.bytes_done)}: ${t.error}`);
    }
  }

  /**
   * One range from the sender, tried again after 0.5, 1, 2 and 4 s when the network or the sender
   * failed (a dropped keep-alive connection, a restart): a blip does not fail a 40 GiB transfer.
   * A refusal (4xx: the ticket expired, the version was deleted) fails at once.
   */
  private async fetchChunk(peer: PeerAgent, t: MasterTransferDto, at: number, len: number): Promise<Buffer> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.peers.content(peer, t.name, t.version, at, len, this.stop.signal);
      } catch (e) {
        const status = (e as PeerError).status ?? null;
        if (attempt >= 4 || this.stop.signal.aborted || (status !== null && status < 500)) throw e;
        this.log.warn(`${t.name}: version ${t.version} at ${humanSize(at)}: ${(e as Error).message}; trying again`);
        await this.clock.sleep(500 * 2 ** attempt, this.stop.signal).catch(() => undefined);
      }
    }
  }

  private fresh(name: string, version: number, source: string, ext: MasterExtentsDto): MasterTransferDto {
    return { name, version, source, state: 'running', size: ext.size, sha256: ext.sha256, data_bytes: ext.data_bytes, bytes_done: 0, moved_bytes: 0, started: this.now(), finished: null, error: null };
  }

  private record(k: string, t: MasterTransferDto): MasterTransferDto {
    this.transfers.set(k, t);
    return t;
  }

  private async readState(path: string): Promise<TransferState | null> {
    const text = await this.images.readTextInside(path);
    try {
      const st = JSON.parse(text ?? '') as TransferState;
      return Number.isInteger(st.done_below) && Number.isInteger(st.bytes_done) && typeof st.sha256 === 'string' ? st : null;
    } catch {
      return null;
    }
  }

  private now(): number {
    return Math.floor(this.clock.nowMs() / 1000);
  }
}

function key(name: string, version: number): string {
  return `${name}\n${version}`;
}

/** Data bytes at or after `from`. */
function remaining(extents: ExtentDto[], from: number): number {
  return extents.reduce((n, e) => n + Math.max(0, e.offset + e.length - Math.max(e.offset, from)), 0);
}

/** `http(s)://host[:port]`: no credentials, path, query or fragment (the ticket goes in a header). */
function sourceUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw badRequest(`source_url: must be http(s)://host[:port], got ${JSON.stringify(raw)}`);
  }
  if (!/^https?:$/.test(u.protocol) || u.username || u.password || u.search || u.hash || u.pathname !== '/') {
    throw badRequest(`source_url: must be http(s)://host[:port] without credentials, path or query, got ${JSON.stringify(raw)}`);
  }
  return u.origin;
}
