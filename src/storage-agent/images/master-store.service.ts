import type { Readable } from 'node:stream';
import { UNSAFE_NAME_CHARS } from '../../shared/grammars';
import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { AgentConfig } from '../agent-config';
import type { DeletedMasterVersionDto, MasterDto, MasterVersionDto } from '../../shared/agent-contract/luns.dto';
import { ApiError, badRequest, conflict, notFound } from '../../shared/http/api-error';
import type { MasterExtentsDto } from '../../shared/agent-contract/transfers.dto';
import { humanSize } from '../../shared/size';
import { checkVersionRef } from '../../shared/master-version-ref';
import { Mutex } from '../../shared/files/mutex';
import { TargetManifest } from '../luns/manifest';
import { ImageFs, ImageStat } from './image-fs';

/** Versions live beside the images, in a directory no scan exports: DISK_DIR/.masters/<master>/<n>.img + <n>.json. */
const STORE = '.masters';
const META = /^([1-9][0-9]{0,8})\.json$/;
const TRANSFER_STATE = /^\.([1-9][0-9]{0,8})\.transfer\.json$/;

/** The `_tpl_` file a drop version was taken from: changed (another file, size or mtime) means a new version. */
interface SourceIdentity {
  size: number;
  mtimeMs: number;
  ino: number;
  dev: number;
}

/** `<n>.json`: written after `<n>.img` is complete, so a version exists only once its bytes do. */
interface VersionRecord extends MasterVersionDto {
  source?: SourceIdentity;
  /** A deleted version keeps its record: its number is never given again, and its file is not taken again. */
  deleted?: boolean;
}

/** A version a disk can be cloned from or restored to. */
export interface ResolvedVersion {
  version: number;
  /** Path inside DISK_DIR. */
  file: string;
  allocated: number;
}

/**
 * Master images and their immutable versions. A `_tpl_` file placed in DISK_DIR is the operator's
 * drop box: once it has settled (IPXE_AGENT_MASTER_SETTLE_SECONDS unchanged) the background scan
 * (IPXE_AGENT_MASTER_SCAN_SECONDS) snapshots it by reflink (a sparse copy without reflink) into the
 * version store, checksummed, read-only. Disks are cloned from and restored to versions, never from
 * the drop file, so replacing or editing it never changes a disk that exists.
 */
@Injectable()
export class MasterStoreService implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Masters');
  private masters: MasterDto[] = [];
  private timer: NodeJS.Timeout | null = null;
  /** One change of a master's versions at a time (a scan, a create's import, a delete). */
  private readonly locks = new Map<string, Mutex>();
  /** Scans under way, and the signal that stops their checksums at shutdown (a mount must be free then). */
  private readonly running = new Set<Promise<unknown>>();
  private readonly stop = new AbortController();

  constructor(
    private readonly config: AgentConfig,
    private readonly images: ImageFs,
    private readonly manifest: TargetManifest,
  ) {}

  async onModuleInit(): Promise<void> {
    this.images.mkdirp();
    await this.images.mkdirpInside(STORE);
    await this.sweepPartial();
    // Listed at once; new files become versions in the background (a checksum of a large image
    // takes seconds per GiB: start-up never waits for it).
    await this.rescan(false);
    this.background();
    this.timer = setInterval(() => this.background(), this.config.masterScanMs);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.stop.abort();
    await Promise.allSettled([...this.running]);
  }

  private background(): void {
    const p = this.rescan().catch((err) => {
      if (!this.stop.signal.aborted) this.log.error({ err }, 'master scan failed');
    });
    this.running.add(p);
    void p.finally(() => this.running.delete(p));
  }

  list(): MasterDto[] {
    return this.masters;
  }

  async rescan(takeVersions = true): Promise<MasterDto[]> {
    const names = new Set<string>();
    for (const name of await this.images.list()) if (isMasterName(name)) names.add(name);
    for (const name of await this.images.listInside(STORE)) if (isMasterName(name)) names.add(name);
    const out: MasterDto[] = [];
    for (const name of [...names].sort()) {
      if (this.stop.signal.aborted) break;
      const dto = await this.lock(name).run(async () => {
        if (takeVersions) await this.importIfChanged(name, false).catch((err) => this.log.error(`version of ${name} not taken: ${(err as Error).message}`));
        return this.describe(name);
      });
      if (dto) out.push(dto);
    }
    this.masters = out;
    return out;
  }

  /**
   * The version a new disk is cloned from: the one asked for, else the latest, after taking a
   * `_tpl_` file changed since its last version as a new one (the operator who names a master for
   * a disk means the file as it is now; no settle time then).
   */
  async resolveForClone(name: string, version: number | undefined): Promise<ResolvedVersion> {
    if (version !== undefined) return this.pick(name, await this.live(name), version, 'master_version');
    return this.lock(name).run(async () => {
      await this.importIfChanged(name, true);
      return this.pick(name, await this.live(name), undefined, 'master_version');
    });
  }

  /**
   * The version a reset restores: the one asked for, else the latest there is. Never waits for an
   * import under way (a checksum of a large file takes seconds per GiB, and a boot waits for its
   * reset): records are complete once they exist, so no lock is needed to read them. Only a
   * master without any version yet is taken now.
   */
  async resolveForReset(name: string, version: number | undefined): Promise<ResolvedVersion> {
    const live = await this.live(name);
    if (live.length || version !== undefined) return this.pick(name, live, version, 'version');
    return this.lock(name).run(async () => {
      await this.importIfChanged(name, true);
      return this.pick(name, await this.live(name), undefined, 'version');
    });
  }

  /** Refused while a disk of this agent was cloned from it, or while the `_tpl_` file is this version (the next scan would take it again). */
  deleteVersion(rawName: string, rawVersion: string | number): Promise<DeletedMasterVersionDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    return this.lock(name).run(async () => {
      const rec = (await this.live(name)).find((v) => v.version === version);
      if (!rec) throw notFound(`version not found: ${name} has no version ${version}`);
      const users = this.manifest
        .all()
        .filter(([, e]) => e.master === name && e.master_version === version)
        .map(([iqn]) => iqn);
      if (users.length) throw conflict(`version ${version} of ${name} is in use by ${users.length} disk(s) (${users.slice(0, 5).join(', ')}${users.length > 5 ? ', ...' : ''}); nothing was deleted`);
      const st = await this.images.statInside(name);
      const newestDrop = (await this.records(name)).filter((v) => v.origin === 'drop').pop();
      if (st && newestDrop?.version === version && sameSource(newestDrop.source, st)) {
        throw conflict(`version ${version} of ${name} is the ${name} file in DISK_DIR as it is now; remove or replace that file first (the scan would take it again); nothing was deleted`);
      }
      await this.images.writeTextAtomic(metaPath(name, version), JSON.stringify({ ...rec, deleted: true }, null, 2) + '\n');
      await this.images.remove(imagePath(name, version));
      this.log.log(`version ${version} of ${name} deleted`);
      await this.refresh(name);
      return { name, version };
    });
  }

  setNote(rawName: string, rawVersion: string | number, note: string): Promise<MasterVersionDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    return this.lock(name).run(async () => {
      const rec = (await this.live(name)).find((v) => v.version === version);
      if (!rec) throw notFound(`version not found: ${name} has no version ${version}`);
      const next = { ...rec, note };
      await this.images.writeTextAtomic(metaPath(name, version), JSON.stringify(next, null, 2) + '\n');
      await this.refresh(name);
      return publicVersion(next);
    });
  }

  // ---- transfers between agents (MasterTransferService) ----

  /** The sending side: a version's data ranges and identity. */
  async extentsOf(rawName: string, rawVersion: string | number): Promise<MasterExtentsDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    const rec = (await this.live(name)).find((v) => v.version === version);
    if (!rec) throw notFound(`version not found: ${name} has no version ${version} here`);
    const extents = (await this.images.dataExtents(imagePath(name, version))) ?? (rec.size ? [{ offset: 0, length: rec.size }] : []);
    return { name, version, size: rec.size, sha256: rec.sha256, created: rec.created, note: rec.note, data_bytes: extents.reduce((n, e) => n + e.length, 0), extents };
  }

  /** The sending side: `length` bytes of a version from `offset` (holes read as zeros). */
  async contentOf(rawName: string, rawVersion: string | number, offset: number, length: number): Promise<Readable> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    const rec = (await this.live(name)).find((v) => v.version === version);
    if (!rec) throw notFound(`version not found: ${name} has no version ${version} here`);
    if (offset + length > rec.size) throw badRequest(`length: offset + length (${offset + length}) is past the end of the version (${rec.size} bytes)`);
    return this.images.readRange(imagePath(name, version), offset, length);
  }

  /** Any record under this number, a deleted one too (a transfer must not take a number used for other bytes). */
  async recordOf(name: string, version: number): Promise<{ sha256: string; deleted: boolean } | null> {
    const rec = (await this.records(name)).find((v) => v.version === version);
    return rec ? { sha256: rec.sha256, deleted: !!rec.deleted } : null;
  }

  /** Where a transfer writes and keeps its progress: dot-names a scan never takes, kept at start (resumed). */
  transferPaths(name: string, version: number): { dir: string; data: string; state: string } {
    const dir = `${STORE}/${name}`;
    return { dir, data: `${dir}/.${version}.img.transfer`, state: `${dir}/.${version}.transfer.json` };
  }

  /** Transfers left by an earlier run: [name, version] of each progress file. */
  async pendingTransfers(): Promise<[string, number][]> {
    const out: [string, number][] = [];
    for (const name of await this.images.listInside(STORE)) {
      if (!isMasterName(name)) continue;
      for (const f of await this.images.listInside(`${STORE}/${name}`)) {
        const m = TRANSFER_STATE.exec(f);
        if (m) out.push([name, Number(m[1])]);
      }
    }
    return out;
  }

  /**
   * A transferred file, its checksum verified by the caller, becomes version `version` here
   * (origin transfer): read-only, renamed, the record last. Refused when the number is taken by
   * other bytes meanwhile (a drop or a promote here).
   */
  adoptTransfer(name: string, version: number, file: string, meta: { sha256: string; created: number; note: string }): Promise<MasterVersionDto> {
    return this.lock(name).run(async () => {
      const had = (await this.records(name)).find((v) => v.version === version);
      if (had && !(had.deleted && had.sha256 === meta.sha256)) throw conflict(`version: ${name} has (or had) another version ${version} here (sha256 ${had.sha256.slice(0, 12)})`);
      const st = await this.images.statInside(file);
      if (!st) throw notFound(`file not found: ${file}`);
      await this.images.makeReadOnly(file);
      await this.images.rename(file, imagePath(name, version));
      const rec: VersionRecord = { version, size: st.size, allocated: st.allocated, sha256: meta.sha256, created: meta.created, note: meta.note, origin: 'transfer' };
      await this.images.writeTextAtomic(metaPath(name, version), JSON.stringify(rec, null, 2) + '\n');
      this.log.log(`${name}: version ${version} received (sha256 ${meta.sha256.slice(0, 12)})`);
      await this.refresh(name);
      return publicVersion(rec);
    });
  }

  // ---- internals (callers hold the master's lock) ----

  private lock(name: string): Mutex {
    let m = this.locks.get(name);
    if (!m) this.locks.set(name, (m = new Mutex()));
    return m;
  }

  /** The highest number used here: records (deleted too) and transfers under way (they keep the sender's number). */
  private async highestNumber(name: string, all: VersionRecord[]): Promise<number> {
    let n = all[all.length - 1]?.version ?? 0;
    for (const f of await this.images.listInside(`${STORE}/${name}`)) {
      const m = TRANSFER_STATE.exec(f);
      if (m) n = Math.max(n, Number(m[1]));
    }
    return n;
  }

  private pick(name: string, live: VersionRecord[], version: number | undefined, field: string): ResolvedVersion {
    if (!live.length) throw notFound(`master not found: ${name}`);
    const v = version === undefined ? live[live.length - 1] : live.find((x) => x.version === version);
    if (!v) throw notFound(`${field}: ${name} has no version ${version} (versions: ${live.map((x) => x.version).join(', ')})`);
    return { version: v.version, file: imagePath(name, v.version), allocated: v.allocated };
  }

  /** Every record, deleted ones too, by version. */
  private async records(name: string): Promise<VersionRecord[]> {
    const out: VersionRecord[] = [];
    for (const f of await this.images.listInside(`${STORE}/${name}`)) {
      const m = META.exec(f);
      if (!m) continue;
      const text = await this.images.readTextInside(`${STORE}/${name}/${f}`);
      try {
        const rec = JSON.parse(text ?? '') as VersionRecord;
        if (rec.version === Number(m[1])) out.push(rec);
      } catch {
        this.log.error(`unreadable version record ${STORE}/${name}/${f}: ignored`);
      }
    }
    return out.sort((a, b) => a.version - b.version);
  }

  private async live(name: string): Promise<VersionRecord[]> {
    return (await this.records(name)).filter((v) => !v.deleted);
  }

  /** Takes the `_tpl_` file as a new version when it is not the one the newest drop version came from. */
  private async importIfChanged(name: string, force: boolean): Promise<void> {
    const st = await this.images.statInside(name);
    if (!st) return;
    const all = await this.records(name);
    const newestDrop = all.filter((v) => v.origin === 'drop').pop();
    if (newestDrop && sameSource(newestDrop.source, st)) return;
    // A file still being copied in must not become a version: it has to have settled first.
    if (!force && Date.now() - st.mtimeMs < this.config.masterSettleMs) return;
    const version = (await this.highestNumber(name, all)) + 1;
    await this.takeVersion(name, name, version, { note: '', origin: 'drop', source: { size: st.size, mtimeMs: st.mtimeMs, ino: st.ino, dev: st.dev } });
  }

  /**
   * A maintenance disk (a file in DISK_DIR) becomes the master's next version (origin promote):
   * the number the control plane gives (the next over all agents), else the next here. The
   * caller has checked that no initiator is logged in to the disk.
   */
  promoteFrom(rawName: string, file: string, version: number | undefined, note: string): Promise<MasterVersionDto> {
    const [name] = checkVersionRef(rawName, 1);
    return this.lock(name).run(async () => {
      const last = await this.highestNumber(name, await this.records(name));
      if (version !== undefined && version <= last) throw conflict(`version: ${name} has (or had) version ${last} here; a new version must be numbered above it`);
      const rec = await this.takeVersion(name, file, version ?? last + 1, { note, origin: 'promote' });
      return publicVersion(rec);
    });
  }

  /** Snapshot of `from` as version n: partial copy, checksum, read-only, renamed; the record last. */
  private async takeVersion(name: string, from: string, version: number, meta: Pick<VersionRecord, 'note' | 'origin' | 'source'>): Promise<VersionRecord> {
    const dir = `${STORE}/${name}`;
    const partial = `${dir}/.${version}.img.partial`;
    await this.images.mkdirpInside(dir);
    await this.images.remove(partial);
    try {
      const st = await this.images.statInside(from);
      if (!st) throw notFound(`file not found: ${from}`);
      const how = await this.snapshot(from, partial, st.allocated);
      const [sha256, vst] = await Promise.all([this.images.sha256(partial, this.stop.signal), this.images.statInside(partial)]);
      await this.images.makeReadOnly(partial);
      await this.images.rename(partial, imagePath(name, version));
      const rec: VersionRecord = { version, size: vst!.size, allocated: vst!.allocated, sha256, created: Math.floor(Date.now() / 1000), note: meta.note, origin: meta.origin, ...(meta.source ? { source: meta.source } : {}) };
      await this.images.writeTextAtomic(metaPath(name, version), JSON.stringify(rec, null, 2) + '\n');
      this.log.log(`${name}: version ${version} taken from ${from} (${how}, sha256 ${sha256.slice(0, 12)})`);
      await this.refresh(name);
      return rec;
    } finally {
      await this.images.remove(partial);
    }
  }

  /** Reflink where DISK_DIR can (instant, shares extents), else a sparse copy, refused up front when it cannot fit. */
  private async snapshot(name: string, partial: string, allocated: number): Promise<'reflink' | 'copy'> {
    try {
      await this.images.reflink(name, partial);
      return 'reflink';
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') throw e;
    }
    await this.images.remove(partial);
    const free = await this.images.freeBytes();
    if (allocated > free) {
      throw new ApiError(507, `DISK_DIR is too full for a copy of ${name}: it needs ${humanSize(allocated)}, ${humanSize(free)} free (no reflink here, so each version of a master is a copy); nothing was created`);
    }
    await this.images.sparseCopy(name, partial);
    return 'copy';
  }

  private async describe(name: string): Promise<MasterDto | null> {
    const live = await this.live(name);
    const st = await this.images.statInside(name);
    const latest = live[live.length - 1];
    if (!st && !latest) return null;
    return {
      name,
      size: st ? st.size : latest.size,
      mtime: st ? Math.floor(st.mtimeMs / 1000) : latest.created,
      latest: latest?.version ?? null,
      versions: live.map(publicVersion),
    };
  }

  private async refresh(name: string): Promise<void> {
    const dto = await this.describe(name);
    const rest = this.masters.filter((m) => m.name !== name);
    this.masters = (dto ? [...rest, dto] : rest).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** A killed import leaves `.<n>.img.partial`, or an image without its record: neither is a version. */
  private async sweepPartial(): Promise<void> {
    for (const name of await this.images.listInside(STORE)) {
      if (!isMasterName(name)) continue;
      const dir = `${STORE}/${name}`;
      const files = await this.images.listInside(dir);
      for (const f of files) {
        const img = /^([1-9][0-9]*)\.img$/.exec(f);
        if (f.endsWith('.partial') || f.includes('.tmp-') || (img && !files.includes(`${img[1]}.json`))) {
          await this.images.remove(`${dir}/${f}`);
          this.log.warn(`removed ${dir}/${f}, left by an import that did not finish`);
        }
      }
    }
  }
}

function isMasterName(name: string): boolean {
  // A name with control or format characters (a bidi override) would show as another one.
  return name.includes('_tpl_') && !name.startsWith('.') && !UNSAFE_NAME_CHARS.test(name);
}

function imagePath(name: string, version: number): string {
  return `${STORE}/${name}/${version}.img`;
}

function metaPath(name: string, version: number): string {
  return `${STORE}/${name}/${version}.json`;
}

function sameSource(a: SourceIdentity | undefined, st: ImageStat): boolean {
  return !!a && a.size === st.size && a.mtimeMs === st.mtimeMs && a.ino === st.ino && a.dev === st.dev;
}

function publicVersion(v: VersionRecord): MasterVersionDto {
  return { version: v.version, size: v.size, allocated: v.allocated, sha256: v.sha256, created: v.created, note: v.note, origin: v.origin };
}
