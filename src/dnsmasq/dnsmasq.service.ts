import { Injectable, Logger, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { ApiError } from '../common/api-error';
import { ProcessRunner } from '../common/process-runner';
import { AppConfig } from '../config/app-config';
import { FileSystem } from '../store/file-system';
import { LedgerStore } from '../store/ledger.store';

export interface DnsmasqSyncResult {
  /** The file content changed and was rewritten. */
  changed: boolean;
  /** Reload error, if the reload failed (the file is already updated then). */
  reloadError?: string;
}

/**
 * dnsmasq/dhcp-hosts.conf is a projection of the device ledger: one `mac,hostname` line per bound
 * device. It is regenerated after every binding change and dnsmasq is told to re-read it.
 */
@Injectable()
export class DnsmasqService implements OnModuleInit {
  private readonly log = new Logger('Dnsmasq');
  readonly file: string;
  private current: string | null = null;

  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
    private readonly store: LedgerStore,
    private readonly proc: ProcessRunner,
  ) {
    this.file = path.join(config.dnsmasqDir, 'dhcp-hosts.conf');
  }

  async onModuleInit(): Promise<void> {
    this.fs.mkdirpSync(this.config.dnsmasqDir);
    this.current = this.fs.readTextSync(this.file);
    // Heal a projection left stale by a crash between the ledger write and this file.
    const r = await this.store.exclusive(() => this.sync());
    if (r.reloadError) this.log.warn(`dnsmasq reload at start failed: ${r.reloadError}`);
  }

  render(): string {
    const rows: [string, string][] = [];
    const workers = this.store.workers;
    for (const d of this.store.devices.values()) {
      if (d.state !== 'bound' || !d.bound_worker_id) continue;
      const w = workers.get(d.bound_worker_id);
      if (w) rows.push([w.hostname, d.mac]);
    }
    rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return rows.map(([h, m]) => `${m},${h}\n`).join('');
  }

  /** Hostname -> MAC as the file on disk has it right now (for /workers/{id}/status). */
  async lookup(hostname: string): Promise<{ hostname: string; mac: string } | null> {
    const text = (await this.fs.readText(this.file)) ?? '';
    for (const line of text.split('\n')) {
      const [mac, host] = line.trim().split(',');
      if (host && host.trim() === hostname) return { hostname, mac: mac.trim() };
    }
    return null;
  }

  /** Rewrites the file when the projection changed, then reloads. Call under the ledger lock. */
  async sync(): Promise<DnsmasqSyncResult> {
    const content = this.render();
    if (content === this.current) return { changed: false };
    if (this.config.dnsmasqWriteMode === 'inplace') await this.fs.writeInPlace(this.file, content);
    else await this.fs.writeAtomic(this.file, content);
    this.current = content;
    try {
      await this.reload();
      return { changed: true };
    } catch (e) {
      const msg = (e as Error).message;
      this.log.error(`dnsmasq reload failed: ${msg}`);
      return { changed: true, reloadError: msg };
    }
  }

  private async reload(): Promise<void> {
    const r = this.config.dnsmasqReload;
    switch (r.kind) {
      case 'none':
        return;
      case 'pidfile': {
        const raw = (await this.fs.readText(r.path))?.trim();
        const pid = raw && /^\d+$/.test(raw) ? Number(raw) : NaN;
        if (!Number.isInteger(pid) || pid <= 1) throw new Error(`no valid pid in ${r.path}`);
        this.proc.signal(pid, 'SIGHUP');
        return;
      }
      case 'docker':
        await this.proc.run('docker', ['exec', r.container, 'killall', '-HUP', 'dnsmasq']);
        return;
      case 'command':
        await this.proc.run('/bin/sh', ['-c', r.command]);
        return;
    }
  }
}

/** The documented 500: the binding file is updated, the reload failed. */
export function reloadFailed(detail: string): ApiError {
  return new ApiError(500, `dnsmasq reload failed (dhcp-hosts.conf already updated): ${detail}`);
}
