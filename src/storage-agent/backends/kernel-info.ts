import * as fs from 'node:fs';

/** What /proc says about the running kernel and its processes (an I/O class; tests replace it). */
export class KernelInfo {
  constructor(private readonly proc = '/proc') {}

  release(): string {
    try {
      return fs.readFileSync(`${this.proc}/sys/kernel/osrelease`, 'utf8').trim();
    } catch {
      return 'unknown';
    }
  }

  processRunning(comm: string): boolean {
    for (const pid of fs.readdirSync(this.proc)) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        if (fs.readFileSync(`${this.proc}/${pid}/comm`, 'utf8').trim() === comm) return true;
      } catch {
        // gone meanwhile
      }
    }
    return false;
  }
}
