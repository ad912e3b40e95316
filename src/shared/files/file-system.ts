import { Injectable } from '@nestjs/common';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { isAscii } from 'node:buffer';

export interface FileStamp {
  mtimeMs: number;
  size: number;
  ino: number;
}

export function sameStamp(a: FileStamp | null, b: FileStamp | null): boolean {
  if (a === null || b === null) return a === b;
  return a.mtimeMs === b.mtimeMs && a.size === b.size && a.ino === b.ino;
}

/** The file changed (a hand edit) between the caller's check and the write: nothing was replaced. */
export class FileChangedError extends Error {
  constructor(readonly file: string) {
    super(`${file} changed while it was being rewritten (a hand edit); not replaced`);
  }
}

/**
 * Every disk access of the control plane goes through here, so tests can replace or break it.
 * Writes are atomic (temp file in the same directory, fsync, rename, fsync of the directory)
 * unless `writeInPlace` is asked for.
 */
/** Names of our temp files: `.<file>.<pid>.<seq>.tmp` (swept at start, see removeStaleTemps). */
export const TEMP_FILE = /^\..+\.\d+\.\d+\.tmp$/;

/** See FileSystem.openAtomic. */
export interface AtomicCommitOptions {
  durable?: boolean;
  unchangedSince?: FileStamp | null;
  beforeRename?: (stamp: FileStamp) => void;
}

export interface AtomicFileWriter {
  /** Appends to the temp file. */
  write(data: string | Buffer): Promise<void>;
  /** Overwrites bytes already written (a header whose content is known only at the end). */
  writeAt(offset: number, data: Buffer): Promise<void>;
  /**
   * Renames the temp file over the file. With `durable`, fsyncs it first and the directory after,
   * as writeAtomic does; `unchangedSince` and `beforeRename` as writeAtomic's.
   */
  commit(opts?: AtomicCommitOptions): Promise<void>;
  abort(): Promise<void>;
}

@Injectable()
export class FileSystem {
  private tmpSeq = 0;
  /**
   * The fault-injection seam: called after each durable step with a point name such as
   * `rename:devices.yml` or `append:ledger.wal`. Nothing in production sets it; in-process tests
   * set `faultHook`, and the crash test preloads test/support/fault-preload.js into a production
   * process, which sets `testFaultHook` before any FileSystem exists.
   */
  static testFaultHook: ((point: string) => void) | null = null;
  faultHook: ((point: string) => void) | null = FileSystem.testFaultHook;

  private fault(point: string): void {
    if (this.faultHook) this.faultHook(point);
  }

  readTextSync(file: string): string | null {
    const bytes = this.readBytesSync(file);
    return bytes === null ? null : decodeText(bytes);
  }

  readBytesSync(file: string): Buffer | null {
    try {
      return fs.readFileSync(file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  /**
   * Reads the file front to back into one reused buffer, handing each chunk to onChunk (which
   * must copy what it keeps). False when the file does not exist.
   */
  readChunksSync(file: string, onChunk: (bytes: Buffer) => void, chunkBytes = 1 << 20): boolean {
    const fd = openIfExistsSync(file);
    if (fd === null) return false;
    try {
      const buf = Buffer.allocUnsafeSlow(chunkBytes);
      for (let n = fs.readSync(fd, buf, 0, chunkBytes, null); n > 0; n = fs.readSync(fd, buf, 0, chunkBytes, null)) onChunk(buf.subarray(0, n));
      return true;
    } finally {
      fs.closeSync(fd);
    }
  }

  /** readChunksSync off the event loop (each read is awaited; the buffer is reused between chunks), from byte `start`. */
  async readChunks(file: string, onChunk: (bytes: Buffer) => void, chunkBytes = 1 << 20, start = 0): Promise<boolean> {
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(file, 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
    try {
      const buf = Buffer.allocUnsafeSlow(chunkBytes);
      for (let at = start; ; ) {
        const { bytesRead } = await handle.read(buf, 0, chunkBytes, at);
        if (bytesRead === 0) return true;
        at += bytesRead;
        onChunk(buf.subarray(0, bytesRead));
      }
    } finally {
      await handle.close();
    }
  }

  async readText(file: string): Promise<string | null> {
    try {
      return await fsp.readFile(file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  statSync(file: string): FileStamp | null {
    try {
      const s = fs.statSync(file);
      return { mtimeMs: s.mtimeMs, size: s.size, ino: s.ino };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  /** statSync without blocking the event loop (the boot path's checks for hand edits). */
  async stat(file: string): Promise<FileStamp | null> {
    try {
      const st = await fsp.stat(file);
      return { mtimeMs: st.mtimeMs, size: st.size, ino: st.ino };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  mkdirpSync(dir: string): void {
    fs.mkdirSync(dir, { recursive: true });
  }

  /**
   * Writes a temp file and renames it over `file`. `durable: false` skips the fsyncs (for derived
   * files that are re-derived at start). With `unchangedSince`, the file must still have that
   * stamp right before the rename (null: must not exist), else nothing is replaced and
   * FileChangedError is thrown: an edit made while the new content was written is never lost.
   * `beforeRename` gets the stamp the file will have, right before the rename. `data` may be a
   * list of Buffers, written in order.
   */
  async writeAtomic(
    file: string,
    data: string | Buffer | readonly Buffer[],
    mode = 0o644,
    opts: { durable?: boolean; unchangedSince?: FileStamp | null; beforeRename?: (stamp: FileStamp) => void } = {},
  ): Promise<void> {
    const durable = opts.durable ?? true;
    const dir = path.dirname(file);
    const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${++this.tmpSeq}.tmp`);
    try {
      const fh = await fsp.open(tmp, 'w', mode);
      let stamp: FileStamp;
      try {
        await writeParts(fh, data);
        if (durable) await fh.sync();
        // What the file will stat as once renamed (a rename keeps mtime, size and inode).
        const st = await fh.stat();
        stamp = { mtimeMs: st.mtimeMs, size: st.size, ino: st.ino };
      } finally {
        await fh.close();
      }
      this.fault(`written:${path.basename(file)}`);
      if (opts.unchangedSince !== undefined && !sameStamp(this.statSync(file), opts.unchangedSince)) throw new FileChangedError(file);
      opts.beforeRename?.(stamp);
      await fsp.rename(tmp, file);
    } catch (e) {
      // A failed write (ENOSPC, EROFS, ...) leaves nothing behind: a leftover temp file could
      // hold the last free blocks that a rollback needs.
      await fsp.rm(tmp, { force: true }).catch(() => undefined);
      // Name the file the caller asked for, not our temp file (messages quote it).
      if (e && typeof e === 'object') (e as NodeJS.ErrnoException).path = file;
      throw e;
    }
    this.fault(`rename:${path.basename(file)}`);
    if (durable) await this.syncDir(dir);
  }

  /**
   * A file written piece by piece into a temp file and renamed over `file` by commit() (fsynced
   * only when commit is asked for `durable`: derived files a start can do without are not), for
   * content too large to build as one string or Buffer. abort() removes the temp file; so does a
   * failed write or commit.
   */
  async openAtomic(file: string, mode = 0o644): Promise<AtomicFileWriter> {
    const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${++this.tmpSeq}.tmp`);
    const fh = await fsp.open(tmp, 'w', mode);
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      await fh.close();
    };
    const abort = async () => {
      await close().catch(() => undefined);
      await fsp.rm(tmp, { force: true }).catch(() => undefined);
    };
    const guarded = async (step: () => Promise<unknown>) => {
      try {
        await step();
      } catch (e) {
        await abort();
        if (e && typeof e === 'object') (e as NodeJS.ErrnoException).path = file;
        throw e;
      }
    };
    return {
      write: (data) => guarded(() => writeParts(fh, data)),
      writeAt: (offset, data) => guarded(() => fh.write(data, 0, data.length, offset)),
      commit: (opts = {}) =>
        guarded(async () => {
          if (opts.durable) await fh.sync();
          const st = opts.beforeRename ? await fh.stat() : null;
          await close();
          this.fault(`written:${path.basename(file)}`);
          if (opts.unchangedSince !== undefined && !sameStamp(this.statSync(file), opts.unchangedSince)) throw new FileChangedError(file);
          // What the file will stat as once renamed (a rename keeps mtime, size and inode).
          if (st) opts.beforeRename!({ mtimeMs: st.mtimeMs, size: st.size, ino: st.ino });
          await fsp.rename(tmp, file);
          this.fault(`rename:${path.basename(file)}`);
          if (opts.durable) await this.syncDir(path.dirname(file));
        }),
      abort,
    };
  }

  /**
   * Appends data and makes it durable (fdatasync) before resolving. On any failure the file is
   * cut back to its previous length, so a later append never continues a partial line.
   */
  appendDurable(file: string, data: string | Buffer | readonly Buffer[], mode = 0o644): Promise<void> {
    return this.append(file, data, true, mode);
  }

  /**
   * Appends data without fdatasync: it survives a crash of the process (the kernel has it), not a
   * power cut. For telemetry whose fsync would compete with the ledger's (boot events). A failure
   * cuts the file back as appendDurable does.
   */
  appendBuffered(file: string, data: string | Buffer | readonly Buffer[], mode = 0o644): Promise<void> {
    return this.append(file, data, false, mode);
  }

  /** `mode` applies when the append creates the file. */
  private async append(file: string, data: string | Buffer | readonly Buffer[], sync: boolean, mode: number): Promise<void> {
    const fh = await fsp.open(file, 'a', mode);
    let size = -1;
    try {
      size = (await fh.stat()).size;
      await writeParts(fh, data);
      if (sync) await fh.datasync();
    } catch (e) {
      if (size >= 0) await fh.truncate(size).catch(() => undefined);
      throw e;
    } finally {
      await fh.close();
    }
    this.fault(`append:${path.basename(file)}`);
  }

  /** Names in a directory (empty when it does not exist). */
  async listDir(dir: string): Promise<string[]> {
    try {
      return await fsp.readdir(dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
  }

  /** Renames within one directory and makes the rename durable (fsync of the directory). */
  async renameDurable(from: string, to: string): Promise<void> {
    await fsp.rename(from, to);
    await this.syncDir(path.dirname(to));
    this.fault(`rename:${path.basename(to)}`);
  }

  /** Removes a file (gone already is fine) and makes that durable. */
  async removeDurable(file: string): Promise<void> {
    await fsp.rm(file, { force: true });
    await this.syncDir(path.dirname(file));
  }

  /** Cuts a file to `length` bytes and makes that durable. */
  async truncate(file: string, length: number): Promise<void> {
    const fh = await fsp.open(file, 'r+');
    try {
      await fh.truncate(length);
      await fh.datasync();
    } finally {
      await fh.close();
    }
  }

  truncateSync(file: string, length: number): void {
    const fd = fs.openSync(file, 'r+');
    try {
      fs.ftruncateSync(fd, length);
      fs.fdatasyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  }

  /**
   * Takes the lock file of a state directory for this process: a second process on the same
   * directory is refused (returns the holder's pid); a lock left by a dead process is taken over.
   */
  lockSync(file: string): number | null {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const fd = fs.openSync(file, 'wx', 0o644);
        fs.writeSync(fd, `${process.pid}\n`);
        fs.closeSync(fd);
        return null;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      const pid = Number((this.readTextSync(file) ?? '').trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && processAlive(pid)) return pid;
      fs.rmSync(file, { force: true }); // stale: its process is gone
    }
    return null;
  }

  unlockSync(file: string): void {
    const pid = Number((this.readTextSync(file) ?? '').trim());
    if (pid === process.pid) fs.rmSync(file, { force: true });
  }

  /** Removes temp files that a killed process left in dir; returns their names. */
  removeStaleTemps(dir: string): string[] {
    return this.sweep(dir, (n) => TEMP_FILE.test(n));
  }

  /** Removes the temp files of `file` alone that another (killed) process left; returns their names. */
  removeStaleTempsOf(file: string): string[] {
    const base = `.${path.basename(file)}.`;
    return this.sweep(path.dirname(file), (n) => TEMP_FILE.test(n) && n.startsWith(base) && !n.startsWith(`${base}${process.pid}.`));
  }

  /** Removes the files of dir whose name `stale` accepts; one that cannot be removed is left for the next start (it is never read). */
  private sweep(dir: string, stale: (name: string) => boolean): string[] {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      return [];
    }
    const removed: string[] = [];
    for (const n of names) {
      if (!stale(n)) continue;
      try {
        fs.rmSync(path.join(dir, n), { force: true });
        removed.push(n);
      } catch {
        // Left for the next start.
      }
    }
    return removed;
  }

  /**
   * Replaces a derived file that nobody needs durable (it is re-derived at every start) without
   * renaming over it: the content goes to a new data file `.<name>.<pid>.<seq>.data`, then
   * `file` becomes a relative symlink to it (a symlink renamed over the old one), then the
   * previous data file is removed. Readers see the old content or the new, never half.
   * Why not writeAtomic without fsync: ext4 (auto_da_alloc) forces the data of a file renamed
   * over another to disk at the next journal commit, so the next fsync anywhere on the
   * filesystem (the ledger's change log) waited for a 2.6 MB `dhcp-hosts.conf` at 100,000 seats
   * (bench:scale, bind p50 3.8x its 1,000-seat figure). Kubernetes' projected volumes swap a
   * symlink the same way.
   */
  async replaceViaLink(file: string, data: Buffer): Promise<void> {
    const dir = path.dirname(file);
    const base = path.basename(file);
    const seq = ++this.tmpSeq;
    const dataName = `.${base}.${process.pid}.${seq}.data`;
    const link = path.join(dir, `.${base}.${process.pid}.${seq}.tmp`);
    const before = await fsp.readlink(file).catch(() => null);
    try {
      const fh = await fsp.open(path.join(dir, dataName), 'w', 0o644);
      try {
        await writeParts(fh, data);
      } finally {
        await fh.close();
      }
      await fsp.symlink(dataName, link);
      this.fault(`written:${base}`);
      await fsp.rename(link, file);
    } catch (e) {
      await fsp.rm(link, { force: true }).catch(() => undefined);
      await fsp.rm(path.join(dir, dataName), { force: true }).catch(() => undefined);
      if (e && typeof e === 'object') (e as NodeJS.ErrnoException).path = file;
      throw e;
    }
    this.fault(`rename:${base}`);
    if (before !== null && linkData(base).test(before)) await fsp.rm(path.join(dir, before), { force: true }).catch(() => undefined);
  }

  /** Makes the current content of a file written by replaceViaLink durable (its data file, then the directory). */
  async syncLinked(file: string): Promise<void> {
    let fh: fsp.FileHandle | undefined;
    try {
      fh = await fsp.open(file, 'r');
      await fh.datasync();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    } finally {
      await fh?.close();
    }
    await this.syncDir(path.dirname(file));
  }

  /** At start: removes data files of replaceViaLink that `file` no longer points at (a kill between the steps). */
  removeStaleLinkData(file: string): string[] {
    const pattern = linkData(path.basename(file));
    let current: string | null = null;
    try {
      current = fs.readlinkSync(file);
    } catch {
      // A regular file (an older release, or in-place mode) or none: every data file is stale.
    }
    return this.sweep(path.dirname(file), (n) => n !== current && pattern.test(n));
  }

  /** Rewrites the file keeping its inode (a single-file bind mount keeps seeing it). */
  async writeInPlace(file: string, data: string): Promise<void> {
    const fh = await fsp.open(file, fs.constants.O_WRONLY | fs.constants.O_CREAT, 0o644);
    try {
      const buf = Buffer.from(data, 'utf8');
      await fh.write(buf, 0, buf.length, 0);
      await fh.truncate(buf.length);
      await fh.sync();
    } finally {
      await fh.close();
    }
  }


  /** Reads the file line by line (for the audit log, which can grow large). */
  /** Lines from byte `start` on (a start inside a line yields the rest of that line first). */
  async *readLines(file: string, start = 0): AsyncGenerator<string> {
    let stream: fs.ReadStream;
    try {
      await fsp.access(file);
      stream = fs.createReadStream(file, { encoding: 'utf8', start });
    } catch {
      return;
    }
    let rest = '';
    for await (const chunk of stream) {
      rest += chunk as string;
      let nl: number;
      while ((nl = rest.indexOf('\n')) >= 0) {
        yield rest.slice(0, nl);
        rest = rest.slice(nl + 1);
      }
    }
    if (rest) yield rest;
  }

  /** Up to `length` bytes from `offset` (fewer at the end of the file; empty when it does not exist). */
  async readRange(file: string, offset: number, length: number): Promise<Buffer> {
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(file, 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return Buffer.alloc(0);
      throw e;
    }
    try {
      const buf = Buffer.alloc(length);
      const { bytesRead } = await fh.read(buf, 0, length, offset);
      return buf.subarray(0, bytesRead);
    } finally {
      await fh.close();
    }
  }

  /** The last `bytes` of a file (to find the last audit id without reading everything). */
  readTailSync(file: string, bytes: number): string | null {
    const fd = openIfExistsSync(file);
    if (fd === null) return null;
    try {
      const size = fs.fstatSync(fd).size;
      const len = Math.min(size, bytes);
      const buf = Buffer.alloc(len);
      fs.readSync(fd, buf, 0, len, size - len);
      return buf.toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  }

  private async syncDir(dir: string): Promise<void> {
    let fh: fsp.FileHandle | undefined;
    try {
      fh = await fsp.open(dir, 'r');
      await fh.sync();
    } catch {
      // Some filesystems refuse fsync on a directory; the rename is still atomic.
    } finally {
      await fh?.close();
    }
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Names of replaceViaLink's data files for the file named base: `.<base>.<pid>.<seq>.data`. */
function linkData(base: string): RegExp {
  return new RegExp(`^\\.${base.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.\\d+\\.\\d+\\.data$`);
}

/**
 * UTF-8 text of a file's bytes. Ledger files are ASCII in practice, and a one-byte string is
 * made without decoding (a 100,000-seat ledger is 70 MB: ~60 ms less at start).
 */
export function decodeText(bytes: Buffer): string {
  return bytes.toString(isAscii(bytes) ? 'latin1' : 'utf8');
}

/** A descriptor to read the file, or null when it does not exist. */
function openIfExistsSync(file: string): number | null {
  try {
    return fs.openSync(file, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/**
 * Writes every byte of `data` at the file position. One write for a string or Buffer, as large as
 * the kernel takes (FileHandle.writeFile cuts at 512 KiB: six trips through the thread pool for
 * dhcp-hosts.conf at 100,000 bindings, ~0.2 ms of every bind); parts (a checkpoint's chunks, a
 * storm's telemetry records) by writev, 64 at a time, never joined into one copy.
 */
async function writeParts(fh: fsp.FileHandle, data: string | Buffer | readonly Buffer[]): Promise<void> {
  if (typeof data === 'string' || Buffer.isBuffer(data)) {
    const buf = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    let off = 0;
    while (off < buf.length) off += (await fh.write(buf, off, buf.length - off)).bytesWritten;
  } else for (let i = 0; i < data.length; i += 64) await writevAll(fh, data.slice(i, i + 64));
}

/** Writes every byte of `parts` at the file position (writev may write less than asked). */
async function writevAll(fh: fsp.FileHandle, parts: Buffer[]): Promise<void> {
  let rest = parts.filter((p) => p.length > 0);
  while (rest.length) {
    let { bytesWritten } = await fh.writev(rest);
    while (rest.length && bytesWritten >= rest[0].length) bytesWritten -= rest.shift()!.length;
    if (bytesWritten > 0) rest[0] = rest[0].subarray(bytesWritten);
  }
}
