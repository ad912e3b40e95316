import { HOST_NQN, INITIATOR_IQN } from '../../shared/grammars';
import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { ApiError, badRequest, conflict, notFound } from '../../shared/http/api-error';
import { humanSize } from '../../shared/size';
import { AgentConfig } from '../agent-config';
import { KernelFeatureError, TARGET_BACKEND, TargetBackend, TargetInfo } from '../backends/backend';
import { ImageFs } from '../images/image-fs';
import { checkFileName, checkTargetName, isoSuffix, parseSize, TARGET_SUFFIX } from '../images/names';
import { secretSha12 } from '../../shared/nvme-keys';
import type { MasterVersionDto, PromoteVersionDto, CreateCdDto, CreatedLunDto, CreateLunDiskDto, DeletedLunDto, InitiatorSessionsDto, ResetLunDto, ResetLunResultDto, ScanResultDto, LunTargetDto, SetLunAccessDto } from '../../shared/agent-contract/luns.dto';
import { ManifestEntry, TargetManifest } from './manifest';
import { NvmeHostsService } from '../nvme/nvme-hosts.service';
import { MasterStoreService } from '../images/master-store.service';

/** An iSCSI initiator name as iPXE sends it (`<base-iqn>:<hostname>` or `:<mac>`): no spaces, no slash. */

/** Targets and their backing files: the agent's data-plane management. */
@Injectable()
export class LunsService implements OnModuleInit {
  private readonly log = new Logger('Luns');
  /** Target names and file names being created right now: the loser of a race gets a 409. */
  private readonly busy = new Set<string>();
  readonly base: string;

  constructor(
    config: AgentConfig,
    @Inject(TARGET_BACKEND) private readonly backend: TargetBackend,
    private readonly images: ImageFs,
    private readonly manifest: TargetManifest,
    private readonly hosts: NvmeHostsService,
    private readonly masters: MasterStoreService,
  ) {
    this.base = backend.transport === 'nvme-tcp' ? config.baseNqn : config.baseIqn;
  }

  async onModuleInit(): Promise<void> {
    this.images.mkdirp();
    const partial = await this.images.sweepPartial();
    if (partial.length) this.log.warn(`removed ${partial.length} partial image(s) a killed create left: ${partial.join(', ')}`);
    await this.backend.start();
    await this.hosts.restore(); // before the scan: rebuilt subsystems link their allowed hosts
    const r = await this.scan();
    if (r.created.length) this.log.log(`rebuilt ${r.created.length} target(s) from ${this.images.dir}`);
  }

  async list(): Promise<LunTargetDto[]> {
    const nvme = this.backend.transport === 'nvme-tcp';
    return (await this.backend.list()).map((t) => ({
      ...(nvme ? { nqn: t.name } : { iqn: t.name }),
      ...(t.tid !== undefined ? { tid: t.tid } : {}),
      cd: t.cd,
      luns: [{ backing: t.backing }],
      ...(t.allowed_hosts ? { allowed_hosts: t.allowed_hosts } : {}),
      ...(t.allowed_initiators ? { allowed_initiators: t.allowed_initiators } : {}),
      ...(t.chap ? { chap_userid: t.chap.userid, ...(t.chap.secret ? { chap_secret_sha256: secretSha12(t.chap.secret) } : {}) } : {}),
    }));
  }

  async sessions(): Promise<InitiatorSessionsDto> {
    const list = await this.backend.sessions();
    return { supported: list !== null, sessions: list ?? [] };
  }

  /** PUT /luns/access: the initiator ACLs of a lio or stgt disk and the CHAP credential they require, in the target and the manifest. */
  async setAccess(dto: SetLunAccessDto): Promise<LunTargetDto> {
    if (!this.backend.setAccess) throw badRequest(`the ${this.backend.name} backend has no initiator ACLs or CHAP`);
    checkTargetName('iqn', dto.iqn, this.base);
    const e = this.manifest.get(dto.iqn);
    if (!e || e.cd) throw notFound(`disk target not found: ${dto.iqn}`);
    const initiators = [...new Set(dto.allowed_initiators)].sort();
    return this.claim([dto.iqn], async () => {
      try {
        await this.backend.setAccess!(dto.iqn, initiators, dto.chap);
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === 'ENOENT') throw notFound(`target not found: ${dto.iqn}`);
        if (code === 'EOPEN') throw conflict((err as Error).message);
        throw err;
      }
      await this.manifest.set(dto.iqn, { ...e, allowed_initiators: initiators, ...(dto.chap ? { chap: { userid: dto.chap.userid, secret: dto.chap.secret } } : { chap: undefined }) });
      return (await this.list()).find((t) => t.iqn === dto.iqn)!;
    });
  }

  async createDisk(dto: CreateLunDiskDto): Promise<CreatedLunDto> {
    const suffix = checkTargetName('iqn', dto.iqn, this.base);
    if ((dto.master === undefined) === (dto.size === undefined)) throw badRequest('exactly one of master or size is required');
    const filename = dto.filename === undefined ? `${suffix}.img` : checkFileName('filename', dto.filename);
    // A scan takes every `_tpl_` file for a master: a writable disk must never be named like one.
    if (filename.includes('_tpl_')) throw badRequest(`filename: ${filename} contains _tpl_, which marks master images; a disk may not be named so`);
    const size = dto.size === undefined ? 0 : parseSize('size', dto.size);
    const master = dto.master === undefined ? undefined : checkFileName('master', dto.master);
    if (master === filename) throw badRequest('filename: must differ from master');
    const hosts = dto.allowed_hosts ?? [];
    if (hosts.length && this.backend.name !== 'nvmet') throw badRequest(`allowed_hosts: only the nvmet backend has host NQNs`);
    for (const h of hosts) if (!HOST_NQN.test(h)) throw badRequest(`allowed_hosts: not a host NQN: ${JSON.stringify(h)}`);
    const initiators = dto.allowed_initiators ?? [];
    if (initiators.length && !this.backend.setAccess) throw badRequest(`allowed_initiators: the ${this.backend.name} backend has no initiator ACLs (lio and stgt have)`);
    for (const i of initiators) if (!INITIATOR_IQN.test(i)) throw badRequest(`allowed_initiators: not an initiator IQN: ${JSON.stringify(i)}`);
    if (dto.chap && !initiators.length) throw badRequest('chap: needs allowed_initiators (CHAP is required of the node ACLs of a closed target)');
    const chap = dto.chap ? { userid: dto.chap.userid, secret: dto.chap.secret } : undefined;
    const missing = this.backend.features().missing;
    if (missing.length) throw conflict(`this storage node cannot create disks: its kernel lacks ${missing.join('; ')}; nothing was created`);
    if (dto.master_version !== undefined && master === undefined) throw badRequest('master_version: only with master');
    if (master !== undefined && !master.includes('_tpl_')) throw badRequest(`master: ${master} is not a master image (_tpl_)`);
    const max = await this.images.maxFileSize();
    if (size > max) {
      throw badRequest(`size: ${dto.size} is larger than the largest file the ${await this.images.fsType()} filesystem of DISK_DIR can hold (${max} bytes, ${humanSize(max)})`);
    }
    return this.claim([dto.iqn, `file:${filename}`], async () => {
      if (await this.images.exists(filename)) throw conflict(`file exists: ${filename}`);
      // The disk is cloned from a version (immutable), never from the `_tpl_` file itself.
      const version = master === undefined ? null : await this.masters.resolveForClone(master, dto.master_version);
      try {
        await this.images.buildThenPublish(filename, (tmp) => (version ? this.clone(version.file, `version ${version.version} of ${master}`, tmp, version.allocated) : this.images.createSparse(tmp, size)));
      } catch (e) {
        throw this.mapImageError(e, filename);
      }
      const backing = this.images.pathOf(filename);
      try {
        await this.backend.createDisk(dto.iqn, backing, { allowedHosts: hosts, allowedInitiators: initiators, chap });
        await this.manifest.set(dto.iqn, {
          file: filename,
          cd: false,
          ...(hosts.length ? { allowed_hosts: hosts } : {}),
          ...(initiators.length ? { allowed_initiators: [...initiators].sort() } : {}),
          ...(chap ? { chap } : {}),
          ...(version ? { master, master_version: version.version } : {}),
        });
      } catch (e) {
        // A create that fails half-way removes what it made.
        await this.backend.remove(dto.iqn).catch(() => null);
        await this.images.remove(filename);
        const mapped = this.mapBackendError(e);
        if (mapped instanceof ApiError) throw mapped;
        throw new ApiError(500, `target creation failed, the image was removed again: ${(e as Error).message}`);
      }
      return { iqn: dto.iqn, backing, ...(version ? { master_version: version.version } : {}) };
    });
  }

  async createCd(dto: CreateCdDto): Promise<CreatedLunDto> {
    if (!this.backend.supportsCd) throw badRequest(`the ${this.backend.name} backend has no CD (ISO) support`);
    const iso = checkFileName('iso', dto.iso);
    // A CD is readable by any initiator: never a master or a worker's disk exported that way.
    if (!iso.toLowerCase().endsWith('.iso')) throw badRequest(`iso: must be an .iso file: ${JSON.stringify(iso)}`);
    if (iso.includes('_tpl_')) throw badRequest(`iso: ${iso} is a master image (_tpl_), not an ISO`);
    const iqn = dto.iqn ?? `${this.base}:${isoSuffix(iso)}`;
    checkTargetName('iqn', iqn, this.base);
    if (!(await this.images.statInside(iso))) throw notFound(`iso not found: ${iso}`);
    return this.claim([iqn], async () => {
      const disk = this.manifest.all().find(([, e]) => !e.cd && e.file === iso);
      if (disk) throw conflict(`iso: ${iso} is the disk of target ${disk[0]}, it cannot be a CD`);
      const backing = this.images.pathOf(iso);
      try {
        await this.backend.createCd(iqn, backing);
        await this.manifest.set(iqn, { file: iso, cd: true });
      } catch (e) {
        throw this.mapBackendError(e);
      }
      return { iqn, backing, cd: true };
    });
  }

  /**
   * POST /luns/reset: the disk's file restored to the master by reflink, in place. Checked
   * first, nothing changed on refusal: a disk target (not a CD), a master, reflink here, and no
   * initiator logged in to the target (a backend that cannot tell is refused: a reset under a
   * running OS would corrupt it).
   */
  async reset(dto: ResetLunDto): Promise<ResetLunResultDto> {
    checkTargetName('iqn', dto.iqn, this.base);
    const master = checkFileName('master', dto.master);
    if (!master.includes('_tpl_')) throw badRequest(`master: ${master} is not a master image (_tpl_)`);
    const t = (await this.backend.list()).find((x) => x.name === dto.iqn);
    if (!t) throw notFound(`disk target not found: ${dto.iqn}`);
    if (t.cd) throw badRequest(`iqn: ${dto.iqn} is a CD target, not a disk`);
    const file = this.manifest.get(dto.iqn)?.file ?? (t.backing?.startsWith(`${this.images.dir}/`) ? t.backing.slice(this.images.dir.length + 1) : null);
    if (!file) throw conflict(`the disk of ${dto.iqn} is not a file in DISK_DIR (${t.backing ?? 'no backing'}); it is not reset`);
    if (file === master || file.includes('_tpl_')) throw conflict(`the disk of ${dto.iqn} is a master (${file}); a master is never overwritten`);
    const entry = this.manifest.get(dto.iqn);
    const version = await this.masters.resolveForReset(master, dto.version ?? (entry?.master === master ? entry.master_version : undefined));
    const sessions = await this.backend.sessions();
    if (sessions === null) throw conflict(`the ${this.backend.name} backend cannot see initiator sessions here, so a reset could pull the disk from under a running worker; nothing changed`);
    const held = sessions.filter((x) => x.target === dto.iqn);
    if (held.length) throw conflict(`an initiator holds a session on ${dto.iqn} (${held.map((x) => x.initiator).join(', ')}): the disk is in use and was not reset`);
    if (this.busy.has(dto.iqn)) throw conflict(`another change of ${dto.iqn} is in progress`);
    return this.claim([dto.iqn], async () => {
      const t0 = performance.now();
      try {
        await this.images.reflinkOver(version.file, file);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'EXDEV' || code === 'EINVAL' || code === 'ENOSYS') {
          throw conflict(`DISK_DIR (${await this.images.fsType()}) cannot reflink, and a reset is only ever a reflink (a full copy would hold a boot for minutes); nothing changed`);
        }
        throw e;
      }
      const ms = Math.round((performance.now() - t0) * 10) / 10;
      const cur = this.manifest.get(dto.iqn);
      if (cur && (cur.master !== master || cur.master_version !== version.version)) await this.manifest.set(dto.iqn, { ...cur, master, master_version: version.version });
      return { iqn: dto.iqn, master, version: version.version, backing: this.images.pathOf(file), ms };
    });
  }

  /**
   * POST /masters/{name}/versions: the disk of `iqn` becomes the master's next version (a
   * maintenance disk promoted). Refused while an initiator holds a session on it (an OS still
   * running has writes not on disk yet) or where sessions cannot be seen.
   */
  async promote(name: string, dto: PromoteVersionDto): Promise<MasterVersionDto> {
    checkTargetName('iqn', dto.iqn, this.base);
    const t = (await this.backend.list()).find((x) => x.name === dto.iqn);
    if (!t || t.cd) throw notFound(`disk target not found: ${dto.iqn}`);
    const file = this.manifest.get(dto.iqn)?.file;
    if (!file) throw conflict(`the disk of ${dto.iqn} is not one this agent made; it is not promoted`);
    const sessions = await this.backend.sessions();
    if (sessions === null) throw conflict(`the ${this.backend.name} backend cannot see initiator sessions here, so the disk could still be written to; nothing was promoted`);
    const held = sessions.filter((x) => x.target === dto.iqn);
    if (held.length) throw conflict(`an initiator holds a session on ${dto.iqn} (${held.map((x) => x.initiator).join(', ')}): shut the maintenance worker down first; nothing was promoted`);
    return this.claim([dto.iqn], () => this.masters.promoteFrom(name, file, dto.version, dto.note ?? ''));
  }

  async remove(iqn: string, deleteFile: boolean): Promise<DeletedLunDto> {
    checkTargetName('iqn', iqn, this.base);
    return this.claim([iqn], async () => {
      // A file another target uses (a CD's ISO shared with a disk, several CDs) or a master is
      // never deleted through a LUN call: refused before anything changes.
      const known = this.manifest.get(iqn)?.file;
      if (deleteFile && known) this.checkDeletable(iqn, known);
      const t = await this.backend.remove(iqn);
      if (!t) throw notFound(`iqn not found: ${iqn}`);
      const file = known ?? (t.backing && t.backing.startsWith(`${this.images.dir}/`) ? t.backing.slice(this.images.dir.length + 1) : null);
      if (deleteFile && file && !known) {
        try {
          this.checkDeletable(iqn, file);
        } catch (e) {
          // Only known after the removal (a target the manifest never had): the file stays.
          await this.manifest.set(iqn, undefined);
          throw conflict(`target ${iqn} removed, its file kept: ${(e as Error).message}`);
        }
      }
      await this.manifest.set(iqn, undefined);
      if (deleteFile && file) await this.images.remove(file);
      return { deleted: iqn, delete_file: deleteFile };
    });
  }

  /**
   * A target that exists with other access than its manifest entry records gets the recorded
   * one again: an agent restarted beside a running tgtd (which never shows a CHAP secret) does
   * not know the secrets it set, and a target must never stay with less than it had.
   */
  private async restoreAccess(listed: TargetInfo[]): Promise<void> {
    if (!this.backend.setAccess) return;
    for (const t of listed) {
      const e = this.manifest.get(t.name);
      if (!e || e.cd || !e.allowed_initiators?.length) continue;
      const same = (t.allowed_initiators ?? []).join() === [...e.allowed_initiators].sort().join() && t.chap?.userid === e.chap?.userid && t.chap?.secret === e.chap?.secret;
      if (same) continue;
      try {
        await this.backend.setAccess(t.name, [...e.allowed_initiators].sort(), e.chap);
        this.log.log(`access of ${t.name} set again from the manifest`);
      } catch (err) {
        this.log.error(`access of ${t.name} could not be set again: ${(err as Error).message}`);
      }
    }
  }

  /**
   * Files are the truth: every manifest entry whose file exists, every `<name>.img` (not a master)
   * and, with CD support, every ISO gets its target back if the backend lost it.
   */
  async scan(): Promise<ScanResultDto> {
    const out: ScanResultDto = { created: [], skipped: [] };
    const listed = await this.backend.list();
    const existing = new Set(listed.map((t) => t.name));
    await this.restoreAccess(listed);
    const wanted = new Map<string, ManifestEntry>(this.manifest.all());
    const claimedFiles = new Set([...wanted.values()].map((e) => e.file));
    for (const f of await this.images.list()) {
      if (f.startsWith('.') || f.includes('_tpl_') || claimedFiles.has(f)) continue;
      let name: string | null = null;
      let cd = false;
      if (f.endsWith('.img') && TARGET_SUFFIX.test(f.slice(0, -4))) name = `${this.base}:${f.slice(0, -4)}`;
      else if (f.toLowerCase().endsWith('.iso') && this.backend.supportsCd && isoSuffix(f)) {
        name = `${this.base}:${isoSuffix(f)}`;
        cd = true;
      }
      if (name && !wanted.has(name)) wanted.set(name, { file: f, cd });
    }
    for (const [name, e] of wanted) {
      if (existing.has(name)) {
        out.skipped.push({ iqn: name, reason: 'exists' });
        continue;
      }
      const st = await this.images.statInside(e.file);
      if (!st) {
        out.skipped.push({ iqn: name, reason: `backing file missing: ${e.file}` });
        continue;
      }
      // No disk is smaller than 1 MiB: a smaller .img is debris (an old failed create), never exported.
      if (!e.cd && st.size < 2 ** 20) {
        out.skipped.push({ iqn: name, reason: `backing file smaller than 1 MiB (${st.size} bytes), not a disk: ${e.file}` });
        continue;
      }
      try {
        const backing = this.images.pathOf(e.file);
        if (e.cd) await this.backend.createCd(name, backing);
        // A host the agent no longer knows is left out: the subsystem comes back closed, and the
        // control plane's reconciler pushes the host and its link again.
        else await this.backend.createDisk(name, backing, { allowedHosts: e.allowed_hosts?.filter((h) => this.hosts.has(h)), allowedInitiators: e.allowed_initiators, chap: e.chap });
        if (!this.manifest.get(name)) await this.manifest.set(name, e);
        out.created.push({ iqn: name, cd: e.cd });
      } catch (err) {
        out.skipped.push({ iqn: name, reason: (err as Error).message });
      }
    }
    return out;
  }

  /** Reflink when the filesystem can, else a copy that keeps holes (refused up front if it cannot fit). */
  private async clone(versionFile: string, label: string, filename: string, allocated: number): Promise<void> {
    try {
      await this.images.reflink(versionFile, filename);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') throw e;
      await this.images.remove(filename).catch(() => undefined);
      const free = await this.images.freeBytes();
      if (allocated > free) {
        throw new ApiError(507, `DISK_DIR is too full for a copy of ${label}: it needs ${humanSize(allocated)}, ${humanSize(free)} free (no reflink here); nothing was created`);
      }
      await this.images.sparseCopy(versionFile, filename);
    }
  }

  /** Every way an image build can fail, as a documented status; the partial file is already gone. */
  private mapImageError(e: unknown, filename: string): Error {
    if (e instanceof ApiError) return e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return conflict(`file exists: ${filename}`);
    if (code === 'EFBIG') return badRequest(`size: the filesystem of DISK_DIR cannot hold a file that large (EFBIG); nothing was created`);
    if (code === 'ENOSPC' || code === 'EDQUOT') return new ApiError(507, `DISK_DIR is full (${code}) creating ${filename}; nothing was created`);
    if (code === 'EROFS' || code === 'EACCES' || code === 'EPERM') return new ApiError(503, `DISK_DIR is not writable (${code}); nothing was created`);
    return new Error(`creating ${filename} failed: ${(e as Error).message}`);
  }

  private async claim<R>(keys: string[], fn: () => Promise<R>): Promise<R> {
    for (const k of keys) {
      if (this.busy.has(k)) throw conflict(k.startsWith('file:') ? `file exists: ${k.slice(5)}` : `iqn exists: ${k}`);
    }
    keys.forEach((k) => this.busy.add(k));
    try {
      return await fn();
    } finally {
      keys.forEach((k) => this.busy.delete(k));
    }
  }

  private checkDeletable(iqn: string, file: string): void {
    if (file.includes('_tpl_')) throw conflict(`delete_file: ${file} is a master image; it is never deleted through a LUN call`);
    const other = this.manifest.all().find(([name, e]) => name !== iqn && e.file === file);
    if (other) throw conflict(`delete_file: ${file} is also used by target ${other[0]}; nothing was deleted`);
  }

  private mapBackendError(e: unknown): Error {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || e instanceof KernelFeatureError) return conflict((e as Error).message);
    if (code === 'ENOHOST') return badRequest((e as Error).message);
    return e as Error;
  }
}
