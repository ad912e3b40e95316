import { Injectable } from '@nestjs/common';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';

const FS_TYPES: Record<number, string> = {
  0x9123683e: 'btrfs',
  0xef53: 'ext4',
  0x58465342: 'xfs',
  0x01021994: 'tmpfs',
  0x2fc12fc2: 'zfs',
  0x794c7630: 'overlayfs',
  0x6969: 'nfs',
  0x65735546: 'fuse',
};

export interface ImageStat {
  size: number;
  mtimeMs: number;
  /** Bytes actually allocated (st_blocks * 512): how sparse the file is. */
  allocated: number;
  /** Inode and device: a file replaced under the same name is another file. */
  ino: number;
  dev: number;
}

/**
 * All disk-image I/O of the agent. Names are resolved inside one directory and never through a
 * symlink that leaves it.
 */
/** Names of images being built: dot-prefixed, so neither scans nor masters ever see them. */
const PARTIAL = /^\..+\.creating-\d+-\d+$/;
const MAX_PROBE = 64 * 2 ** 40;

@Injectable()
export class ImageFs {
  private maxSize: Promise<number> | null = null;
  private seq = 0;

  constructor(readonly dir: string) {}

  /**
   * The largest file the filesystem of the directory can hold (up to 64 TiB), probed once by
   * growing a sparse file: ext4 with 4 KiB blocks stops just under 16 TiB, with 1 KiB blocks at
   * 16 GiB. Checked before a disk is created, so a size the filesystem refuses is a clear 400
   * instead of an EFBIG half-way.
   */
  maxFileSize(): Promise<number> {
    return (this.maxSize ??= this.probeMaxFileSize());
  }

  private async probeMaxFileSize(): Promise<number> {
    const probe = this.pathOf(`.size-probe-${process.pid}`);
    const fh = await fsp.open(probe, 'w');
    const fits = async (n: number) => {
      try {
        await fh.truncate(n);
        return true;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'EFBIG' || code === 'EINVAL') return false;
        throw e;
      }
    };
    try {
      if (await fits(MAX_PROBE)) return MAX_PROBE;
      let lo = 0; // in 512-byte sectors: lo fits, hi does not
      let hi = MAX_PROBE / 512;
      while (hi - lo > 1) {
        const mid = Math.floor((lo + hi) / 2);
        if (await fits(mid * 512)) lo = mid;
        else hi = mid;
      }
      return lo * 512;
    } finally {
      await fh.close();
      await fsp.rm(probe, { force: true });
    }
  }

  /** Bytes a non-root writer can still allocate in the directory's filesystem. */
  async freeBytes(): Promise<number> {
    const st = await fsp.statfs(this.dir);
    return st.bavail * st.bsize;
  }

  /** Size, use and room of the directory's filesystem (statfs), in bytes. */
  async space(): Promise<{ total: number; used: number; free: number }> {
    const st = await fsp.statfs(this.dir);
    return { total: st.blocks * st.bsize, used: (st.blocks - st.bfree) * st.bsize, free: st.bavail * st.bsize };
  }

  /**
   * Builds an image under a dot-name and links it to `name` only once it is complete (link fails
   * with EEXIST, so nothing is overwritten). Whatever fails, the partial file is removed, so no
   * half-made image ever appears under a name a scan would export.
   */
  async buildThenPublish(name: string, build: (tmpName: string) => Promise<void>): Promise<void> {
    const tmp = `.${name}.creating-${process.pid}-${++this.seq}`;
    try {
      await build(tmp);
      await fsp.link(this.pathOf(tmp), this.pathOf(name));
    } finally {
      await this.remove(tmp);
    }
  }

  /** Removes partial images a killed agent left behind; returns their names. */
  async sweepPartial(): Promise<string[]> {
    const names = (await fsp.readdir(this.dir)).filter((n) => PARTIAL.test(n) || n.startsWith('.size-probe-'));
    for (const n of names) await this.remove(n);
    return names;
  }

  /** Absolute path of a plain name inside the directory (the name is validated by the caller). */
  pathOf(name: string): string {
    return path.join(this.dir, name);
  }

  /** Stat of an existing regular file that really lives inside the directory (no symlink escape). */
  async statInside(name: string): Promise<ImageStat | null> {
    const p = this.pathOf(name);
    let st: fs.Stats;
    try {
      st = await fsp.lstat(p);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    if (st.isSymbolicLink()) {
      const real = await fsp.realpath(p).catch(() => null);
      const dirReal = await fsp.realpath(this.dir);
      if (!real || path.dirname(real) !== dirReal) return null;
      st = await fsp.stat(real);
    }
    if (!st.isFile()) return null;
    return { size: st.size, mtimeMs: st.mtimeMs, allocated: st.blocks * 512, ino: st.ino, dev: st.dev };
  }

  async exists(name: string): Promise<boolean> {
    try {
      await fsp.lstat(this.pathOf(name));
      return true;
    } catch {
      return false;
    }
  }

  async list(): Promise<string[]> {
    return (await fsp.readdir(this.dir, { withFileTypes: true })).filter((d) => d.isFile()).map((d) => d.name);
  }

  /** Reflink clone; fails (EEXIST) if dst exists, (ENOTSUP/EXDEV/EINVAL) without reflink. */
  async reflink(src: string, dst: string): Promise<void> {
    await fsp.copyFile(this.pathOf(src), this.pathOf(dst), fs.constants.COPYFILE_FICLONE_FORCE | fs.constants.COPYFILE_EXCL);
  }

  /**
   * Reflink `src` over the existing `dst`, in place: the same inode (a target holding it open
   * reads the new content at once), its data replaced by src's extents. Fails (ENOTSUP, EXDEV,
   * EINVAL) without reflink; never falls back to a copy.
   */
  async reflinkOver(src: string, dst: string): Promise<void> {
    await fsp.copyFile(this.pathOf(src), this.pathOf(dst), fs.constants.COPYFILE_FICLONE_FORCE);
  }

  /**
   * Copy that keeps holes: coreutils cp finds the data with SEEK_DATA/SEEK_HOLE (a 10 GiB master
   * with little data copies in milliseconds, where reading the holes would take seconds) and
   * turns zero runs into holes. Fails with EEXIST when dst exists.
   */
  async sparseCopy(src: string, dst: string): Promise<void> {
    const to = this.pathOf(dst);
    if (await this.exists(dst)) throw Object.assign(new Error(`file exists: ${dst}`), { code: 'EEXIST' });
    await new Promise<void>((resolve, reject) => {
      execFile('cp', ['--sparse=always', '--reflink=never', '--', this.pathOf(src), to], (err, _o, stderr) =>
        err ? reject(new Error(`copy failed: ${String(stderr).trim() || err.message}`)) : resolve(),
      );
    });
    const fh = await fsp.open(to, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  }

  /** New sparse file of the given size; fails if it exists. */
  async createSparse(name: string, size: number): Promise<void> {
    const fh = await fsp.open(this.pathOf(name), 'wx', 0o644);
    try {
      await fh.truncate(size);
    } finally {
      await fh.close();
    }
  }

  async remove(name: string): Promise<void> {
    await fsp.rm(this.pathOf(name), { force: true });
  }

  async fsType(): Promise<string> {
    const st = await fsp.statfs(this.dir);
    return FS_TYPES[st.type] ?? `0x${st.type.toString(16)}`;
  }

  /** Whether FICLONE works here: clone a probe file once at start. */
  async probeReflink(): Promise<boolean> {
    const a = `.reflink-probe-${process.pid}-a`;
    const b = `.reflink-probe-${process.pid}-b`;
    try {
      await fsp.writeFile(this.pathOf(a), 'kurrent');
      await this.reflink(a, b);
      return true;
    } catch {
      return false;
    } finally {
      await this.remove(a);
      await this.remove(b);
    }
  }

  mkdirp(): void {
    fs.mkdirSync(this.dir, { recursive: true });
  }

  // ---- paths below DISK_DIR (the master version store, `.masters/<name>/`) ----

  async mkdirpInside(sub: string): Promise<void> {
    await fsp.mkdir(this.pathOf(sub), { recursive: true });
  }

  /** Entries of a sub-directory (names only); [] when it does not exist. */
  async listInside(sub: string): Promise<string[]> {
    try {
      return await fsp.readdir(this.pathOf(sub));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
  }

  async readTextInside(name: string): Promise<string | null> {
    try {
      return await fsp.readFile(this.pathOf(name), 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  /** Written to a temp name, fsynced, renamed: a reader sees the old or the new text, never half. */
  async writeTextAtomic(name: string, text: string): Promise<void> {
    const tmp = `${name}.tmp-${process.pid}-${++this.seq}`;
    const fh = await fsp.open(this.pathOf(tmp), 'w', 0o644);
    try {
      await fh.writeFile(text);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await fsp.rename(this.pathOf(tmp), this.pathOf(name));
  }

  async rename(from: string, to: string): Promise<void> {
    await fsp.rename(this.pathOf(from), this.pathOf(to));
  }

  /** Read-only for everyone: a version's bytes are not to be written (root can, nobody should). */
  async makeReadOnly(name: string): Promise<void> {
    await fsp.chmod(this.pathOf(name), 0o444);
  }

  /**
   * The byte ranges of a file that hold data (FIEMAP, by e2fsprogs' `filefrag`), merged where
   * less than `gap` bytes of hole lie between them, sorted. Null where the filesystem cannot say
   * (no FIEMAP): the caller then treats the whole file as data.
   */
  dataExtents(name: string, gap = 1 << 20): Promise<{ offset: number; length: number }[] | null> {
    return new Promise((resolve) => {
      execFile('filefrag', ['-e', '-s', this.pathOf(name)], { maxBuffer: 64 << 20 }, (err, out) => {
        if (err) return resolve(null);
        const text = String(out);
        const bs = /blocks of (\d+) bytes/.exec(text);
        const size = /^File size of .* is (\d+) \(/m.exec(text);
        if (!bs || !size) return resolve(null);
        const block = Number(bs[1]);
        const end = Number(size[1]);
        const ranges: { offset: number; length: number }[] = [];
        for (const m of text.matchAll(/^\s*\d+:\s+(\d+)\.\.\s*(\d+):/gm)) {
          const offset = Number(m[1]) * block;
          const length = Math.min((Number(m[2]) + 1) * block, end) - offset;
          if (length > 0) ranges.push({ offset, length });
        }
        ranges.sort((a, b) => a.offset - b.offset);
        const merged: { offset: number; length: number }[] = [];
        for (const r of ranges) {
          const last = merged[merged.length - 1];
          if (last && r.offset <= last.offset + last.length + gap) last.length = Math.max(last.length, r.offset + r.length - last.offset);
          else merged.push({ ...r });
        }
        resolve(merged);
      });
    });
  }

  /** A stream of `length` bytes of the file from `offset` (holes read as zeros). */
  readRange(name: string, offset: number, length: number): fs.ReadStream {
    return fs.createReadStream(this.pathOf(name), { start: offset, end: offset + length - 1, highWaterMark: 1 << 20 });
  }

  /** A sparse file of `size` bytes, kept as it is when it exists already (a transfer resumed). */
  async ensureSparse(name: string, size: number): Promise<void> {
    const fh = await fsp.open(this.pathOf(name), fs.constants.O_WRONLY | fs.constants.O_CREAT, 0o644);
    try {
      const st = await fh.stat();
      if (st.size !== size) await fh.truncate(size);
    } finally {
      await fh.close();
    }
  }

  /**
   * Writes `buf` at `offset`, leaving every all-zero 64 KiB block of it a hole (the file is sparse
   * where the source was). Not synced: see syncData.
   */
  async writeDataAt(name: string, offset: number, buf: Buffer): Promise<void> {
    const BLOCK = 64 << 10;
    const fh = await fsp.open(this.pathOf(name), fs.constants.O_WRONLY);
    try {
      // Runs of non-zero blocks are written; the last block may be short.
      let run = -1;
      for (let at = 0; at < buf.length + BLOCK; at += BLOCK) {
        const zero = at >= buf.length || isZero(buf.subarray(at, Math.min(at + BLOCK, buf.length)));
        if (!zero && run < 0) run = at;
        if (zero && run >= 0) {
          const part = buf.subarray(run, Math.min(at, buf.length));
          await fh.write(part, 0, part.length, offset + run);
          run = -1;
        }
      }
    } finally {
      await fh.close();
    }
  }

  /** fdatasync: what was written to the file is on disk. */
  async syncData(name: string): Promise<void> {
    const fh = await fsp.open(this.pathOf(name), fs.constants.O_WRONLY);
    try {
      await fh.datasync();
    } finally {
      await fh.close();
    }
  }

  /**
   * SHA-256 of the whole file, holes read as zeros (what `sha256sum` prints), by OpenSSL: off the
   * event loop, and about 5x coreutils' speed here (SHA-NI), 1 s per GiB.
   */
  sha256(name: string, signal?: AbortSignal): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile('openssl', ['dgst', '-sha256', '-r', this.pathOf(name)], { maxBuffer: 1 << 16, signal }, (err, out, stderr) => {
        if (err) return reject(new Error(`openssl dgst failed: ${String(stderr).trim() || err.message}`));
        const hex = /^([0-9a-f]{64}) /.exec(String(out));
        return hex ? resolve(hex[1]) : reject(new Error(`openssl dgst: unexpected output ${JSON.stringify(String(out).slice(0, 80))}`));
      });
    });
  }
}

const ZEROS = Buffer.alloc(64 << 10);
function isZero(b: Buffer): boolean {
  return b.length <= ZEROS.length ? b.equals(ZEROS.subarray(0, b.length)) : false;
}
