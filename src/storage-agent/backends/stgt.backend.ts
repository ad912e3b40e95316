import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { Mutex } from '../../shared/files/mutex';
import { ProcessRunner } from '../../shared/process-runner';
import { Chap, InitiatorSession, KernelFeatures, noKernelFeatures, TargetBackend, TargetInfo } from './backend';

/** A target as `tgtadm --op show` lists it, with its ACL entries and incoming CHAP accounts. */
interface ShownTarget extends TargetInfo {
  acl: string[];
  accounts: string[];
}

/**
 * stgt (tgtd, userspace) through tgtadm. Disk at LUN 1, CD as `--device-type cd` made read-only.
 * A disk with allowed initiators is bound to those initiator names only (tgtd refuses any other
 * name at login) and, with CHAP, to an incoming account of that user name; without them it is
 * bound to ALL (open, as a CD always is). tgtd keeps nothing across its own restarts: the LUN
 * service rebuilds targets from DISK_DIR and the manifest at start and on /luns/scan.
 *
 * tgtd's accounts are global: one user name has one secret on every target bound to it (the
 * control plane gives one per worker, so a worker's disks on one node share it), and tgtd never
 * shows a secret, so this backend keeps the ones it set (an agent restarted beside a running
 * tgtd does not know them: the LUN service sets them again from the manifest).
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
  /** CHAP user -> the secret this process gave tgtd. */
  private readonly secrets = new Map<string, string>();
  /** tgtd's accounts are global: one change of them at a time (two disks of one worker made at once share one). */
  private readonly accounts = new Mutex();

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
    return (await this.show()).map(({ acl, accounts, ...t }) => {
      const names = acl.filter((a) => a.startsWith('iqn.'));
      // Open (ALL, or an address) reports no allowed initiators, as a LIO target with open ACLs does.
      const closed = names.length > 0 && names.length === acl.length;
      const user = accounts[0];
      // A secret this process did not set is unknown: reported as '' so the LUN service sets it again.
      return { ...t, ...(closed ? { allowed_initiators: names.sort() } : {}), ...(user ? { chap: { userid: user, secret: this.secrets.get(user) ?? '' } } : {}) };
    });
  }

  private async show(): Promise<ShownTarget[]> {
    const { stdout } = await this.tgtadm('--mode', 'target', '--op', 'show');
    const targets = parseShow(stdout);
    this.known = new Map(targets.map((t) => [t.name, t.tid!]));
    this.maxTid = targets.reduce((m, t) => Math.max(m, t.tid ?? 0), 0);
    this.loaded = true;
    return targets;
  }

  createDisk(name: string, backing: string, opts: { allowedInitiators?: string[]; chap?: Chap } = {}): Promise<void> {
    return this.create(name, backing, false, opts);
  }

  createCd(name: string, backing: string): Promise<void> {
    return this.create(name, backing, true, {});
  }

  /**
   * The initiator names a disk admits and the CHAP account it requires, changed in place. The
   * target is closed first (every ACL entry unbound: tgtd then admits no one) and opened to the
   * new names last, so no login meets a half-set rule. Sessions logged in stay (tgtd checks at
   * login); the next login meets the new rule.
   */
  async setAccess(name: string, initiators: string[], chap: Chap | undefined): Promise<void> {
    const t = (await this.show()).find((x) => x.name === name);
    if (!t || t.cd) throw Object.assign(new Error(`iqn not found: ${name}`), { code: 'ENOENT' });
    await this.applyAccess(t.tid!, t.acl, t.accounts, initiators, chap);
  }

  private async applyAccess(tid: number, acl: string[], accounts: string[], initiators: string[], chap: Chap | undefined): Promise<void> {
    const T = String(tid);
    for (const a of acl) await this.tgtadm('--mode', 'target', '--op', 'unbind', '--tid', T, ...(a.startsWith('iqn.') ? ['--initiator-name', a] : ['--initiator-address', a]));
    for (const u of accounts) if (u !== chap?.userid) await this.tgtadm('--mode', 'account', '--op', 'unbind', '--tid', T, '--user', u);
    for (const u of accounts) if (u !== chap?.userid) await this.dropIfUnbound(u);
    if (chap) {
      await this.ensureAccount(chap);
      if (!accounts.includes(chap.userid)) await this.tgtadm('--mode', 'account', '--op', 'bind', '--tid', T, '--user', chap.userid);
    }
    if (!initiators.length) await this.tgtadm('--mode', 'target', '--op', 'bind', '--tid', T, '--initiator-address', 'ALL');
    for (const i of initiators) await this.tgtadm('--mode', 'target', '--op', 'bind', '--tid', T, '--initiator-name', i);
  }

  /**
   * The account `chap.userid` with `chap.secret`. A changed secret means delete and new (tgtadm
   * has no update), which unbinds the account everywhere: a lock account nobody knows the secret
   * of is bound to those targets first, so none of them admits a login without CHAP meanwhile.
   */
  private ensureAccount(chap: Chap): Promise<void> {
    return this.accounts.run(() => this.setAccount(chap));
  }

  private async setAccount(chap: Chap): Promise<void> {
    if (this.secrets.get(chap.userid) === chap.secret && (await this.accountExists(chap.userid))) return;
    const bound = (await this.show()).filter((t) => t.accounts.includes(chap.userid)).map((t) => String(t.tid));
    if (!(await this.accountExists(chap.userid))) {
      await this.tgtadm('--mode', 'account', '--op', 'new', '--user', chap.userid, '--password', chap.secret);
      this.secrets.set(chap.userid, chap.secret);
      return;
    }
    const lock = `kurrent-lock-${randomBytes(6).toString('hex')}`;
    await this.tgtadm('--mode', 'account', '--op', 'new', '--user', lock, '--password', randomBytes(18).toString('base64url'));
    try {
      for (const tid of bound) await this.tgtadm('--mode', 'account', '--op', 'bind', '--tid', tid, '--user', lock);
      await this.tgtadm('--mode', 'account', '--op', 'delete', '--user', chap.userid);
      this.secrets.delete(chap.userid);
      await this.tgtadm('--mode', 'account', '--op', 'new', '--user', chap.userid, '--password', chap.secret);
      this.secrets.set(chap.userid, chap.secret);
      for (const tid of bound) await this.tgtadm('--mode', 'account', '--op', 'bind', '--tid', tid, '--user', chap.userid);
    } finally {
      // Only once the user is bound again: a failure above leaves those targets locked, never open.
      if (this.secrets.get(chap.userid) === chap.secret) await this.tgtadm('--mode', 'account', '--op', 'delete', '--user', lock);
    }
  }

  private async accountExists(user: string): Promise<boolean> {
    const { stdout } = await this.tgtadm('--mode', 'account', '--op', 'show');
    return stdout.split('\n').some((l) => l.trim() === user);
  }

  /** An account no target uses any more goes (a deleted worker's secret does not stay in tgtd). */
  private dropIfUnbound(user: string): Promise<void> {
    return this.accounts.run(async () => {
      if ((await this.show()).some((t) => t.accounts.includes(user))) return;
      await this.tgtadm('--mode', 'account', '--op', 'delete', '--user', user).catch(() => undefined);
      this.secrets.delete(user);
    });
  }

  /**
   * The tid is reserved synchronously in memory, so concurrent creates never collide and the
   * tgtadm calls of different targets run in parallel (a tgtadm spawn costs more than tgtd's work).
   */
  private async create(name: string, backing: string, cd: boolean, opts: { allowedInitiators?: string[]; chap?: Chap }, retried = false): Promise<void> {
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
      return this.create(name, backing, cd, opts, true);
    }
    try {
      await this.tgtadm('--mode', 'logicalunit', '--op', 'new', '--tid', tid, '--lun', '1', '--backing-store', backing, ...(cd ? ['--device-type', 'cd'] : []));
      if (cd) await this.tgtadm('--mode', 'logicalunit', '--op', 'update', '--tid', tid, '--lun', '1', '--params', 'readonly=1');
      // A new target has no ACL entry, so it admits no one until its access is set.
      await this.applyAccess(tidNum, [], [], opts.allowedInitiators ?? [], opts.chap);
    } catch (e) {
      // Leave no half-made target behind.
      await this.tgtadm('--mode', 'target', '--op', 'delete', '--force', '--tid', tid).catch((err) => this.log.error(err));
      this.known.delete(name);
      throw e;
    }
  }

  async remove(name: string): Promise<TargetInfo | null> {
    const t = (await this.show()).find((x) => x.name === name) ?? null;
    if (!t) return null;
    await this.tgtadm('--mode', 'target', '--op', 'delete', '--force', '--tid', String(t.tid));
    this.known.delete(name);
    for (const u of t.accounts) await this.dropIfUnbound(u);
    const { acl: _a, accounts: _u, ...info } = t;
    return info;
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

/** Parses `tgtadm --mode target --op show`: targets, their backing, ACL entries and incoming accounts. */
export function parseShow(out: string): ShownTarget[] {
  const targets: ShownTarget[] = [];
  let cur: ShownTarget | null = null;
  let lun = -1;
  let type = '';
  let section = '';
  for (const line of out.split('\n')) {
    let m = /^Target (\d+): (\S+)/.exec(line);
    if (m) {
      cur = { name: m[2], tid: Number(m[1]), backing: null, cd: false, acl: [], accounts: [] };
      targets.push(cur);
      lun = -1;
      section = '';
      continue;
    }
    if (!cur) continue;
    if ((m = /^ {4}(\S.*):$/.exec(line))) {
      section = m[1];
      continue;
    }
    if (section === 'ACL information' && (m = /^ {8}(\S+)$/.exec(line))) {
      cur.acl.push(m[1]);
      continue;
    }
    if (section === 'Account information' && (m = /^ {8}(\S+)( \(outgoing\))?$/.exec(line))) {
      if (!m[2]) cur.accounts.push(m[1]);
      continue;
    }
    if ((m = /^\s+LUN: (\d+)/.exec(line))) lun = Number(m[1]);
    else if ((m = /^\s+Type: (.+)$/.exec(line))) type = m[1].trim();
    else if ((m = /^\s+Backing store path: (.+)$/.exec(line)) && lun > 0) {
      cur.backing = m[1].trim() === 'None' ? null : m[1].trim();
      cur.cd = type === 'cd/dvd';
    }
  }
  return targets;
}
