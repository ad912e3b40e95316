import { Logger } from '@nestjs/common';
import { ProcessRunner } from '../../shared/process-runner';
import { InitiatorSession, KernelFeatures, noKernelFeatures, TargetBackend, TargetInfo } from './backend';

/**
 * stgt (tgtd, userspace) through tgtadm. Disk at LUN 1, CD as `--device-type cd` made read-only,
 * ACL bound to ALL. tgtd keeps nothing across its own restarts: the LUN service rebuilds targets
 * from DISK_DIR at start and on /luns/scan.
 */
export class StgtBackend implements TargetBackend {
  readonly name = 'stgt' as const;
  readonly transport = 'iscsi' as const;
  readonly supportsCd = true;
  readonly persistence = 'auto-scan on startup (tgtd keeps no state: targets rebuilt from DISK_DIR)';
  private readonly log = new Logger('stgt');
  /** name -> tid as last seen or reserved; every list() refreshes it from tgtd. */
  private known = new Map<string, number>();
  private maxTid = 0;
  private loaded = false;

  constructor(
    private readonly proc: ProcessRunner,
    private readonly controlPort: number,
  ) {}

  private tgtadm(...args: string[]) {
    const base = this.controlPort ? ['-C', String(this.controlPort)] : [];
    return this.proc.run('tgtadm', [...base, '--lld', 'iscsi', ...args]);
  }

  /** Userspace tgtd: no kernel target features involved. */
  features(): KernelFeatures {
    return noKernelFeatures();
  }

  async start(): Promise<void> {
    await this.list(); // fails early and clearly when tgtd is not running
  }

  async sessions(): Promise<InitiatorSession[]> {
    const { stdout } = await this.tgtadm('--mode', 'target', '--op', 'show');
    return parseSessions(stdout);
  }

  async list(): Promise<TargetInfo[]> {
    const { stdout } = await this.tgtadm('--mode', 'target', '--op', 'show');
    const targets = parseShow(stdout);
    this.known = new Map(targets.map((t) => [t.name, t.tid!]));
    this.maxTid = targets.reduce((m, t) => Math.max(m, t.tid ?? 0), 0);
    this.loaded = true;
    return targets;
  }

  createDisk(name: string, backing: string): Promise<void> {
    return this.create(name, backing, false);
  }

  createCd(name: string, backing: string): Promise<void> {
    return this.create(name, backing, true);
  }

  /**
   * The tid is reserved synchronously in memory, so concurrent creates never collide and the
   * tgtadm calls of different targets run in parallel (a tgtadm spawn costs more than tgtd's work).
   */
  private async create(name: string, backing: string, cd: boolean, retried = false): Promise<void> {
    if (!this.loaded) await this.list();
    if (this.known.has(name)) throw Object.assign(new Error(`iqn exists: ${name}`), { code: 'EEXIST' });
    const tidNum = ++this.maxTid;
    const tid = String(tidNum);
    this.known.set(name, tidNum);
    try {
      await this.tgtadm('--mode', 'target', '--op', 'new', '--tid', tid, '--targetname', name);
    } catch (e) {
      this.known.delete(name);
      if (retried) throw e;
      // Our view was stale (tgtd restarted, or a target made by hand): reload and try once more.
      await this.list();
      return this.create(name, backing, cd, true);
    }
    try {
      await this.tgtadm('--mode', 'logicalunit', '--op', 'new', '--tid', tid, '--lun', '1', '--backing-store', backing, ...(cd ? ['--device-type', 'cd'] : []));
      if (cd) await this.tgtadm('--mode', 'logicalunit', '--op', 'update', '--tid', tid, '--lun', '1', '--params', 'readonly=1');
      await this.tgtadm('--mode', 'target', '--op', 'bind', '--tid', tid, '--initiator-address', 'ALL');
    } catch (e) {
      // Leave no half-made target behind.
      await this.tgtadm('--mode', 'target', '--op', 'delete', '--force', '--tid', tid).catch((err) => this.log.error(err));
      this.known.delete(name);
      throw e;
    }
  }

  async remove(name: string): Promise<TargetInfo | null> {
    const t = (await this.list()).find((x) => x.name === name) ?? null;
    if (!t) return null;
    await this.tgtadm('--mode', 'target', '--op', 'delete', '--force', '--tid', String(t.tid));
    this.known.delete(name);
    return t;
  }
}

/** The I_T nexuses of `tgtadm --mode target --op show`: who is logged in to which target. */
export function parseSessions(out: string): InitiatorSession[] {
  const sessions: InitiatorSession[] = [];
  let target: string | null = null;
  let cur: InitiatorSession | null = null;
  let nexus: string | null = null;
  for (const line of out.split('\n')) {
    let m = /^Target \d+: (\S+)/.exec(line);
    if (m) {
      target = m[1];
      cur = null;
      continue;
    }
    if (!target) continue;
    if ((m = /^\s+I_T nexus: (\d+)/.exec(line))) nexus = m[1];
    else if ((m = /^\s+Initiator: (\S+)/.exec(line))) sessions.push((cur = { target, initiator: m[1], address: null, id: nexus }));
    else if ((m = /^\s+IP Address: (\S+)/.exec(line)) && cur && cur.address === null) cur.address = m[1];
    else if (/^\s+LUN information:/.test(line)) cur = null;
  }
  return sessions;
}

/** Parses `tgtadm --mode target --op show`. */
export function parseShow(out: string): TargetInfo[] {
  const targets: TargetInfo[] = [];
  let cur: TargetInfo | null = null;
  let lun = -1;
  let type = '';
  for (const line of out.split('\n')) {
    let m = /^Target (\d+): (\S+)/.exec(line);
    if (m) {
      cur = { name: m[2], tid: Number(m[1]), backing: null, cd: false };
      targets.push(cur);
      lun = -1;
      continue;
    }
    if (!cur) continue;
    if ((m = /^\s+LUN: (\d+)/.exec(line))) lun = Number(m[1]);
    else if ((m = /^\s+Type: (.+)$/.exec(line))) type = m[1].trim();
    else if ((m = /^\s+Backing store path: (.+)$/.exec(line)) && lun > 0) {
      cur.backing = m[1].trim() === 'None' ? null : m[1].trim();
      cur.cd = type === 'cd/dvd';
    }
  }
  return targets;
}
