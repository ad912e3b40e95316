import { Injectable } from '@nestjs/common';
import { ApiError, conflict, internal, notFound } from '../common/api-error';
import { storageFailure } from '../store/storage-error';
import { DnsmasqService } from '../dnsmasq/dnsmasq.service';
import { LedgerStore, Tx } from '../store/ledger.store';
import { DeviceRecord, WorkerRecord } from '../store/records';

export interface BindOutcome {
  changed: boolean;
  old_worker_id: string | null;
  old_device_mac: string | null;
}

export interface BindingResult<R> {
  result: R;
  /** Set when dhcp-hosts.conf was rewritten but dnsmasq did not reload. */
  reloadError?: string;
}

/**
 * The device <-> worker binding rules (strict one-to-one, the device side is the authority), and
 * the commit path every binding change takes: ledger write, then the dnsmasq projection.
 */
@Injectable()
export class BindingService {
  constructor(
    private readonly store: LedgerStore,
    private readonly dnsmasq: DnsmasqService,
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
   * Commits fn's binding changes and refreshes dhcp-hosts.conf. Must run under the lock. If the
   * projection cannot be written, the ledger is restored to its snapshot (rollback = rewrite);
   * a failed reload only leaves reloadError (the documented 500 with the file updated).
   */
  async commit<R>(fn: (tx: Tx) => R | Promise<R>): Promise<BindingResult<R>> {
    const undo: { devices: [string, DeviceRecord | undefined][]; workers: [string, WorkerRecord | undefined][] } = {
      devices: [],
      workers: [],
    };
    const result = await this.store.commit(async (tx) => {
      const r = await fn(tx);
      for (const [k, c] of tx.devices.changes) undo.devices.push([k, c.orig]);
      for (const [k, c] of tx.workers.changes) undo.workers.push([k, c.orig]);
      return r;
    });
    try {
      const s = await this.dnsmasq.sync();
      return { result, reloadError: s.reloadError };
    } catch (e) {
      await this.store
        .commit((tx) => {
          for (const [k, v] of undo.devices) tx.devices.set(k, v);
          for (const [k, v] of undo.workers) tx.workers.set(k, v);
        })
        .catch(() => undefined);
      const storage = storageFailure(e, this.dnsmasq.file);
      if (storage instanceof ApiError) throw new ApiError(storage.getStatus(), `${storage.message} (the ledger change was rolled back)`);
      throw internal(`dhcp-hosts.conf could not be written, change rolled back: ${(e as Error).message}`);
    }
  }
}
