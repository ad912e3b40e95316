import { Injectable } from '@nestjs/common';
import { ApiError, conflict, notFound } from '../../shared/http/api-error';
import { storageFailure } from '../../shared/files/storage-error';
import { AuditService } from '../audit/audit.service';
import { DnsmasqService, reloadFailed } from '../dnsmasq/dnsmasq.service';
import { LedgerRepository, Tx } from '../repositories/ledger/ledger.repository';
import { DeviceRecord } from '../repositories/ledger/records';

export interface BindOutcome {
  changed: boolean;
  old_worker_id: string | null;
  old_device_mac: string | null;
}

/**
 * The device <-> worker binding rules (strict one-to-one, the device side is the authority), and
 * the commit path every binding change takes: ledger write, then the dnsmasq projection.
 */
@Injectable()
export class BindingService {
  constructor(
    private readonly store: LedgerRepository,
    private readonly dnsmasq: DnsmasqService,
    private readonly audit: AuditService,
  ) {}

  /** The device bound to a worker as the transaction sees it. */
  deviceOf(tx: Tx, workerId: string): DeviceRecord | undefined {
    const candidates = [this.store.boundMacByWorker().get(workerId), ...tx.devices.changes.keys()];
    for (const mac of candidates) {
      if (!mac) continue;
      const d = tx.devices.get(mac);
      if (d && d.bound_worker_id === workerId) return d;
    }
    return undefined;
  }

  bind(tx: Tx, mac: string, workerId: string, force: boolean): BindOutcome {
    const d = tx.devices.get(mac);
    if (!d) throw notFound(`device not found: ${mac}`);
    if (!tx.workers.get(workerId)) throw notFound(`worker not found: ${workerId}`);
    if (d.state === 'revoked') throw conflict(`device revoked: ${mac}`);
    if (d.bound_worker_id === workerId) return { changed: false, old_worker_id: workerId, old_device_mac: mac };
    if (d.bound_worker_id && !force) throw conflict(`device already bound to ${d.bound_worker_id}: ${mac}`);
    const other = this.deviceOf(tx, workerId);
    if (other && !force) throw conflict(`worker ${workerId} already bound to device ${other.mac}`);
    if (other) tx.devices.set(other.mac, { ...other, state: 'pooled', bound_worker_id: null });
    tx.devices.set(mac, { ...d, state: 'bound', bound_worker_id: workerId });
    return { changed: true, old_worker_id: d.bound_worker_id, old_device_mac: other?.mac ?? null };
  }

  unbind(tx: Tx, mac: string): string {
    const d = tx.devices.get(mac);
    if (!d) throw notFound(`device not found: ${mac}`);
    if (d.state !== 'bound' || !d.bound_worker_id) throw conflict(`device not bound: ${mac}`);
    tx.devices.set(mac, { ...d, state: 'pooled', bound_worker_id: null });
    return d.bound_worker_id;
  }

  /**
   * Commits fn's binding changes (with the audit entries fn adds to tx, atomically) and refreshes
   * dhcp-hosts.conf. Must run under the lock. The file is a projection of the ledger: if it cannot
   * be written the change stands and the file is retried (audited as dnsmasq.write, answered with
   * the storage status saying the change is committed); the reload is waited for after the lock
   * is released (coalesced, see DnsmasqService.requestReload); a failed one is audited as
   * dnsmasq.reload (failed) and answers the documented 500 with the file updated.
   */
  async commit<R>(fn: (tx: Tx) => R | Promise<R>, client: string): Promise<R> {
    const touched = { macs: [] as string[], worker_ids: [] as string[] };
    const result = await this.store.commit(async (tx) => {
      const r = await fn(tx);
      touched.macs = [...tx.devices.changes.keys()];
      touched.worker_ids = [...tx.workers.changes.keys()];
      return r;
    });
    let reload: Promise<string | undefined>;
    try {
      reload = (await this.dnsmasq.sync()).reload;
    } catch (e) {
      this.dnsmasq.retryLater();
      const storage = storageFailure(e, this.dnsmasq.file);
      const code = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
      const detail = `${this.dnsmasq.file} could not be written (${code})`;
      await this.audit.record('dnsmasq.write', { status: 'failed', error: detail, ...touched, client });
      const status = storage instanceof ApiError ? storage.getStatus() : 500;
      throw new ApiError(status, `the change is committed; ${detail}, it is written again every 2 s until it can be`);
    }
    // Waited for once the lock is released (other writers go on meanwhile); a failure is still
    // this request's answer: the documented 500, the change and dhcp-hosts.conf standing.
    await this.store.afterRelease(async () => {
      const reloadError = await reload;
      if (!reloadError) return;
      await this.audit.record('dnsmasq.reload', {
        status: 'failed',
        error: `dnsmasq reload failed: ${reloadError}`,
        ...touched,
        client,
      });
      throw reloadFailed(reloadError);
    });
    return result;
  }
}
