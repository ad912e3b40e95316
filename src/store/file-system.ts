import { Injectable } from '@nestjs/common';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';

export interface FileStamp {
  mtimeMs: number;
  size: number;
  ino: number;
}

/**
 * Every disk access of the control plane goes through here, so tests can replace or break it.
 * Writes are atomic (temp file in the same directory, fsync, rename, fsync of the directory)
 * unless `writeInPlace` is asked for.
 */
@Injectable()
export class FileSystem {
  private tmpSeq = 0;

  readTextSync(file: string): string | null {
    try {
      return fs.readFileSync(file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
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

  mkdirpSync(dir: string): void {
    fs.mkdirSync(dir, { recursive: true });
  }

  async writeAtomic(file: string, data: string | Buffer, mode = 0o644): Promise<void> {
    const dir = path.dirname(file);
    const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${++this.tmpSeq}.tmp`);
    const fh = await fsp.open(tmp, 'w', mode);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    try {
      await fsp.rename(tmp, file);
    } catch (e) {
      await fsp.rm(tmp, { force: true });
      throw e;
    }
    await this.syncDir(dir);
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

  async append(file: string, data: string): Promise<void> {
    await fsp.appendFile(file, data, 'utf8');
  }

  /** Reads the file line by line (for the audit log, which can grow large). */
  async *readLines(file: string): AsyncGenerator<string> {
    let stream: fs.ReadStream;
    try {
      await fsp.access(file);
      stream = fs.createReadStream(file, { encoding: 'utf8' });
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

  /** The last `bytes` of a file (to find the last audit id without reading everything). */
  readTailSync(file: string, bytes: number): string | null {
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
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
