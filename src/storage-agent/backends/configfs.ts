import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';

/**
 * configfs I/O under a root (real /sys/kernel/config/... or a test directory of the same shape).
 * On real configfs a mkdir creates the attribute files and an rmdir drops them; on a plain
 * directory the attribute files are ours, so rmdir removes them first.
 */
export class ConfigFs {
  readonly real: boolean;

  constructor(readonly root: string) {
    this.real = isConfigfsMount(root);
    // A test root stands in for the mounted subsystem directory, which always exists.
    if (!this.real) fs.mkdirSync(root, { recursive: true });
  }

  p(...parts: string[]): string {
    return path.join(this.root, ...parts);
  }

  /** mkdir of each missing level (on real configfs some levels are default groups that exist). */
  async mkdir(...parts: string[]): Promise<void> {
    for (let i = 1; i <= parts.length; i++) {
      if (!(await this.exists(...parts.slice(0, i)))) await fsp.mkdir(this.p(...parts.slice(0, i)));
    }
  }

  async write(value: string, ...parts: string[]): Promise<void> {
    // On real configfs attribute groups (attrib/, ...) exist once their parent does.
    if (!this.real) await fsp.mkdir(path.dirname(this.p(...parts)), { recursive: true });
    await fsp.writeFile(this.p(...parts), value.endsWith('\n') ? value : `${value}\n`);
  }

  /**
   * A value written exactly, without the newline write() adds: some attributes keep what they
   * are given byte for byte (LIO's auth/userid and auth/password keep a trailing newline, and a
   * CHAP_N then never matches).
   */
  async writeExact(value: string, ...parts: string[]): Promise<void> {
    if (!this.real) await fsp.mkdir(path.dirname(this.p(...parts)), { recursive: true });
    await fsp.writeFile(this.p(...parts), value);
  }

  async read(...parts: string[]): Promise<string | null> {
    try {
      return (await fsp.readFile(this.p(...parts), 'utf8')).trim();
    } catch {
      return null;
    }
  }

  async exists(...parts: string[]): Promise<boolean> {
    try {
      await fsp.lstat(this.p(...parts));
      return true;
    } catch {
      return false;
    }
  }

  async list(...parts: string[]): Promise<string[]> {
    try {
      return await fsp.readdir(this.p(...parts));
    } catch {
      return [];
    }
  }

  /**
   * `ln -s target link`. The kernel resolves a configfs symlink's target like any path (relative
   * to the process's cwd, not to the link), so on real configfs it is absolute, as targetcli
   * writes it; in a test directory relative to the link's directory, so the tree can move.
   */
  async link(target: string[], link: string[]): Promise<void> {
    const linkPath = this.p(...link);
    await fsp.symlink(this.real ? this.p(...target) : path.relative(path.dirname(linkPath), this.p(...target)), linkPath);
  }

  async readlink(...parts: string[]): Promise<string | null> {
    try {
      return path.resolve(path.dirname(this.p(...parts)), await fsp.readlink(this.p(...parts)));
    } catch {
      return null;
    }
  }

  async unlink(...parts: string[]): Promise<void> {
    await fsp.unlink(this.p(...parts)).catch((e) => {
      if (e.code !== 'ENOENT') throw e;
    });
  }

  /** Default groups (lun, np, attrib, namespaces...) vanish with their parent on real configfs. */
  async rmdirDefaultGroup(...parts: string[]): Promise<void> {
    if (!this.real) await this.rmdir(...parts);
  }

  async rmdir(...parts: string[]): Promise<void> {
    const dir = this.p(...parts);
    if (!this.real) {
      for (const e of await fsp.readdir(dir, { withFileTypes: true }).catch(() => [])) {
        if (e.isFile()) await fsp.unlink(path.join(dir, e.name));
      }
    }
    await fsp.rmdir(dir).catch((e) => {
      if (e.code !== 'ENOENT') throw e;
    });
  }
}

function isConfigfsMount(root: string): boolean {
  try {
    return fs
      .readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .some((l) => {
        const [, mnt, type] = l.split(' ');
        return type === 'configfs' && (root === mnt || root.startsWith(`${mnt}/`));
      });
  } catch {
    return false;
  }
}
