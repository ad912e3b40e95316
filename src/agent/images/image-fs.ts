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
}

/**
 * All disk-image I/O of the agent. Names are resolved inside one directory and never through a
 * symlink that leaves it.
 */
@Injectable()
export class ImageFs {
  constructor(readonly dir: string) {}

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
    return { size: st.size, mtimeMs: st.mtimeMs, allocated: st.blocks * 512 };
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
}
