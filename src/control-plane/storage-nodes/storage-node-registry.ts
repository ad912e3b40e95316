import { Injectable, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { isMap, LineCounter, parseDocument, stringify } from 'yaml';
import { AGENT_NAME, isAddress, normalizeAddress, TOKEN } from '../../shared/grammars';
import { AppConfig } from '../config/app-config';
import { FileSystem, FileStamp, sameStamp } from '../../shared/files/file-system';
import { LedgerFileError } from '../../shared/files/ledger-map';
import type { TxAudit } from '../repositories/audit/audit.repository';
import { AuditedFile, AuditedFiles } from '../repositories/audit/audited-files';

export interface AgentRecord {
  id: string;
  base_url: string;
  /** As configured: may be `${ENV}`; expanded only by the AgentGateway. */
  token: string;
  iscsi_server: string | null;
  role: { disk: boolean; cd: boolean };
  tags: string[];
  enabled: boolean;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `http(s)://host[:port]` without a trailing slash, or null. */
/** What a base_url must be, as every refusal says it. */
export const BASE_URL_RULE = 'base_url must be http(s)://<unicast IPv4, [IPv6] or ASCII DNS name>[:port 1-65535], without path, credentials, query or fragment';

export function normalizeBaseUrl(raw: unknown): string | null {
  // ASCII only: an internationalised name is written in its punycode form (xn--...).
  if (typeof raw !== 'string' || !/^https?:\/\/[\x21-\x7e]+$/i.test(raw.trim())) return null;
  try {
    const u = new URL(raw.trim());
    // The host doubles as the default data-plane address in boot scripts: same grammar. The API
    // is at the root of the agent: no path; a port, if given, is a real one.
    if (!u.hostname || !isAddress(u.hostname) || u.username || u.password || u.search || u.hash || raw.includes('?') || raw.includes('#')) return null;
    if (u.pathname !== '/' || (u.port !== '' && !(Number(u.port) >= 1 && Number(u.port) <= 65535))) return null;
    return u.toString().replace(/\/+$/, '');
  } catch {
    return null;
  }
}

function validate(id: string, v: unknown): AgentRecord | string {
  if (!AGENT_NAME.test(id) || id.includes('..')) return "agent id must be a-z, 0-9, '.', '_' or '-', starting and ending with a letter or digit";
  if (!isObj(v)) return 'entry must be a mapping';
  const base = normalizeBaseUrl(v.base_url);
  if (!base) return BASE_URL_RULE;
  const role = isObj(v.role) ? v.role : {};
  if (v.tags !== undefined && (!Array.isArray(v.tags) || !v.tags.every((t) => typeof t === 'string' && AGENT_NAME.test(t) && !t.includes('..')))) {
    return "tags must be a list of names (a-z, 0-9, '.', '_' or '-', starting and ending with a letter or digit)";
  }
  if (v.token !== undefined && v.token !== '' && (typeof v.token !== 'string' || !TOKEN.test(v.token))) return 'token must be visible ASCII without spaces';
  let iscsi: string | null = null;
  if (v.iscsi_server !== undefined && v.iscsi_server !== null && v.iscsi_server !== '') {
    iscsi = typeof v.iscsi_server === 'string' ? normalizeAddress(v.iscsi_server) : null;
    if (!iscsi) return 'iscsi_server must be an IPv4 address, an IPv6 address or a DNS name';
  }
  return {
    id,
    base_url: base,
    token: typeof v.token === 'string' ? v.token : '',
    iscsi_server: iscsi,
    role: { disk: role.disk === true, cd: role.cd === true },
    tags: (v.tags as string[] | undefined) ?? [],
    enabled: v.enabled !== false,
  };
}

/**
 * config/agents.yml: the storage nodes. Small, so plain YAML both ways; hand edits are picked up
 * on the next read; a broken file stops the start with file:line.
 */
@Injectable()
export class StorageNodeRegistry implements OnModuleInit {
  readonly file: string;
  private agents = new Map<string, AgentRecord>();
  /** Bumped whenever the registry is (re)loaded or saved: cached boot answers depend on it. */
  private rev = 0;
  private stamp: FileStamp | null = null;
  private lastCheck = 0;
  /** agents.yml with its audit entries (on files one commit: state/agents.wal carries them). */
  private readonly writer: AuditedFile;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    audited: AuditedFiles,
  ) {
    this.file = path.join(config.configDir, 'agents.yml');
    this.writer = audited.open(this.file, path.join(config.stateDir, 'agents.wal'), 0o600);
  }

  onModuleInit(): void {
    this.fs.mkdirpSync(path.dirname(this.file));
    this.fs.removeStaleTemps(path.dirname(this.file));
    this.load();
    this.writer.load();
  }

  private load(): void {
    const text = this.fs.readTextSync(this.file);
    this.stamp = this.fs.statSync(this.file);
    const out = new Map<string, AgentRecord>();
    if (text && text.trim()) {
      const lc = new LineCounter();
      const doc = parseDocument(text, { lineCounter: lc, uniqueKeys: true });
      if (doc.errors.length) throw new LedgerFileError(this.file, lc.linePos(doc.errors[0].pos[0]).line, doc.errors[0].message.split('\n')[0]);
      const top = doc.contents;
      const agentsNode = isMap(top) ? top.get('agents', true) : null;
      if (agentsNode && isMap(agentsNode)) {
        for (const pair of agentsNode.items) {
          const id = String((pair.key as { value?: unknown })?.value ?? '');
          const line = lc.linePos((pair.key as { range?: number[] })?.range?.[0] ?? 0).line;
          const r = validate(id, (pair.value as { toJSON?: () => unknown })?.toJSON?.() ?? null);
          if (typeof r === 'string') throw new LedgerFileError(this.file, line, `${JSON.stringify(id)}: ${r}`);
          out.set(id, r);
        }
      } else if (top !== null && !(isMap(top) && (agentsNode === null || agentsNode === undefined))) {
        throw new LedgerFileError(this.file, 1, 'expected a mapping with key "agents"');
      }
    }
    this.agents = out;
    this.rev++;
  }

  /** Current agents, reloaded when agents.yml was edited by hand (checked at most every 500 ms). */
  all(): AgentRecord[] {
    this.refresh();
    return [...this.agents.values()];
  }

  /** One agent; /boot-vars calls this on every boot, so no copy of the registry is made. */
  get(id: string): AgentRecord | undefined {
    this.refresh();
    return this.agents.get(id);
  }

  /** The registry's revision, after the same hand-edit check as get(). */
  revision(): number {
    this.refresh();
    return this.rev;
  }

  /**
   * Hand edits of agents.yml, looked for at most every 500 ms: after 500 ms without a call the
   * first call checks synchronously (off the hot path); under load (/boot-vars in a storm) the
   * file is stat'ed off the event loop instead and a change is loaded by the call after the stat.
   */
  private refresh(): void {
    const now = performance.now();
    const idle = now - this.lastCall > 500;
    this.lastCall = now;
    if (this.editSeen !== undefined) {
      const st = this.editSeen;
      this.editSeen = undefined;
      this.apply(st);
    } else if (now - this.lastCheck > 500) {
      this.lastCheck = now;
      if (idle) this.apply(this.fs.statSync(this.file));
      else void this.statFile();
    }
  }

  private lastCall = 0;
  /** A stamp statFile found different from the loaded one (undefined: none pending). */
  private editSeen: FileStamp | null | undefined = undefined;
  private statting = false;

  private async statFile(): Promise<void> {
    if (this.statting) return;
    this.statting = true;
    try {
      const st = await this.fs.stat(this.file);
      if (!sameStamp(st, this.stamp)) this.editSeen = st;
    } catch {
      // unreadable now: the next synchronous check says so
    } finally {
      this.statting = false;
    }
  }

  private apply(st: FileStamp | null): void {
    if (sameStamp(st, this.stamp)) return;
    try {
      this.load();
    } catch {
      // A broken hand edit keeps the last good registry; writes will overwrite it.
      this.stamp = st;
    }
  }

  /** Replaces agents.yml with `next`, with its audit entries (see AuditedFiles). */
  async save(next: AgentRecord[], audits: TxAudit[] = []): Promise<void> {
    const doc = {
      agents: Object.fromEntries(
        next.map((a) => [
          a.id,
          {
            base_url: a.base_url,
            ...(a.token ? { token: a.token } : {}),
            ...(a.iscsi_server ? { iscsi_server: a.iscsi_server } : {}),
            role: a.role,
            tags: a.tags,
            enabled: a.enabled,
          },
        ]),
      ),
    };
    const text = '# Kurrent storage agents (POST/PUT /agents write this file; tokens may be ${ENV}).\n' + stringify(doc);
    const replace = async () => {
      await this.fs.writeAtomic(this.file, text, 0o600);
      this.agents = new Map(next.map((a) => [a.id, a]));
      this.rev++;
      this.stamp = this.fs.statSync(this.file);
    };
    await this.writer.write(text, audits, replace);
  }
}
