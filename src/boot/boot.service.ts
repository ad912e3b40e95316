import { Injectable } from '@nestjs/common';
import { badRequest } from '../common/api-error';
import { Clock } from '../common/clock';
import { OncePer } from '../common/once-per';
import { normalizeId, normalizeMac } from '../common/mac';
import { AppConfig } from '../config/app-config';
import { SettingsService } from '../settings/settings.service';
import { LedgerStore } from '../store/ledger.store';
import { WorkerRecord } from '../store/records';
import { KeyObject } from 'node:crypto';
import { AuditService } from '../audit/audit.service';
import { parsePubkey, verifyDeviceSignature } from '../common/device-key';
import { ChallengeService } from './challenge.service';
import { DiskVarsResolver } from './disk-vars';
import type { BootVarsDto } from './dto/boot-vars.dto';
import { checkVars, IpxeVar, REFUSED_SCRIPT, renderIpxe, ScriptRefused } from './ipxe-script';

const EMPTY_SCRIPT = '#!ipxe\n# no per-worker boot vars found\n';

/**
 * GET /boot-vars: a read-only projection of the ledger (no writes, no I/O beyond the cached
 * ledger), answered on the hot path of every boot.
 */
@Injectable()
export class BootService {
  constructor(
    private readonly store: LedgerStore,
    private readonly settings: SettingsService,
    private readonly disks: DiskVarsResolver,
    private readonly config: AppConfig,
    private readonly audit: AuditService,
    private readonly challenges: ChallengeService,
    private readonly clock: Clock,
  ) {}

  /** Parsed public keys per MAC (the KeyObject is what makes a verification cheap). */
  private readonly keys = new Map<string, { hex: string; key: KeyObject }>();
  /** One audit record of a denial per (mac, reason) per 10 s, not one per request. */
  private readonly denied = new OncePer(10_000);

  /** Refusals already audited (worker, variable, value): one audit record per bad value, not per boot. */
  private readonly refused = new OncePer(Infinity);

  /** The iPXE script (a string) or, with format=json, the variables (an object). */
  /** GET /devices/challenge: a one-time nonce as an iPXE script (`set nonce <64 hex>`) or JSON. */
  challenge(rawMac: unknown, format: unknown = 'ipxe'): string | { nonce: string; expires_at: string } {
    if (format !== 'ipxe' && format !== 'json') throw badRequest(`format: must be ipxe or json, got ${JSON.stringify(format)}`);
    const mac = typeof rawMac === 'string' ? normalizeMac(rawMac) : null;
    if (!mac) throw badRequest(`mac: required, a MAC address (got ${JSON.stringify(rawMac ?? null)})`);
    const c = this.challenges.issue(mac);
    if (format === 'json') return c;
    return renderIpxe('challenge: sign nonce || mac with the device key', [{ name: 'nonce', grammar: 'hex64', value: c.nonce }]);
  }

  bootVars(rawMac?: unknown, rawHostname?: unknown, format: unknown = 'ipxe', nonce?: unknown, sig?: unknown): string | BootVarsDto {
    if (format !== 'ipxe' && format !== 'json') throw badRequest(`format: must be ipxe or json, got ${JSON.stringify(format)}`);
    let mac: string | null = null;
    if (typeof rawMac === 'string' && rawMac.trim() !== '') {
      mac = normalizeMac(rawMac);
      if (!mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(rawMac)}`);
    } else if (rawMac !== undefined && typeof rawMac !== 'string') {
      throw badRequest('mac: must be given once');
    }
    const hostname = typeof rawHostname === 'string' ? normalizeId(rawHostname) : null;
    const r = this.resolve(mac, hostname);
    if (r.kind === 'none') return format === 'json' ? {} : EMPTY_SCRIPT;
    if (this.settings.signatureEnforcement) {
      const reason = this.verify(r, mac, nonce, sig);
      if (reason) {
        this.auditDenial(mac, r.kind === 'worker' ? r.worker.worker_id : null, reason);
        return format === 'json' ? {} : EMPTY_SCRIPT;
      }
    }
    const vars: BootVarsDto = r.kind === 'worker' ? this.workerVars(r.worker) : this.rebootLoop();
    const list: IpxeVar[] = [];
    if (vars.base_iqn) list.push({ name: 'base-iqn', grammar: 'target-base', value: vars.base_iqn });
    if (vars.iscsi_server) list.push({ name: 'iscsi-server', grammar: 'address', value: vars.iscsi_server });
    if (vars.iscsi_sep) list.push({ name: 'iscsi-sep', grammar: 'iscsi-sep', value: vars.iscsi_sep });
    list.push({ name: 'menu-default', grammar: 'menu-name', value: vars.menu_default ?? '' });
    list.push({ name: 'menu-timeout', grammar: 'number', value: vars.menu_timeout ?? '' });
    const label = r.kind === 'worker' ? r.worker.hostname : `${mac} (pooled, waiting to be bound to a worker)`;
    try {
      if (format === 'json') {
        checkVars(list);
        return vars;
      }
      return renderIpxe(`boot vars for ${label}`, list);
    } catch (e) {
      if (!(e instanceof ScriptRefused)) throw e;
      this.auditRefusal(e, mac, r.kind === 'worker' ? r.worker.worker_id : null);
      return format === 'json' ? {} : REFUSED_SCRIPT;
    }
  }

  /**
   * Enforcement: per-worker variables only for a bound device whose signature over an unexpired,
   * unused nonce for its MAC verifies against its stored key. Returns the reason for a denial.
   */
  private verify(r: { kind: 'worker'; worker: WorkerRecord } | { kind: 'pooled' }, mac: string | null, nonce: unknown, sig: unknown): string | null {
    if (r.kind !== 'worker' || !mac) return 'not a bound device';
    const d = this.store.read().devices.get(mac);
    if (!d || d.state !== 'bound' || d.bound_worker_id !== r.worker.worker_id) return 'not a bound device';
    if (!d.pubkey) return 'no key';
    if (typeof nonce !== 'string' || !nonce) return 'no nonce';
    const c = this.challenges.consume(mac, nonce.toLowerCase());
    if (!c.ok) return c.reason;
    let k = this.keys.get(mac);
    if (!k || k.hex !== d.pubkey) {
      const p = parsePubkey(d.pubkey);
      if (!p.ok) return 'no key';
      k = { hex: p.hex, key: p.key };
      if (this.keys.size >= 100_000) this.keys.clear();
      this.keys.set(mac, k);
    }
    if (typeof sig !== 'string' || !verifyDeviceSignature(k.key, c.nonce, mac, sig.toLowerCase())) return 'bad signature';
    return null;
  }

  private auditDenial(mac: string | null, workerId: string | null, reason: string): void {
    if (!this.denied.allow(`${mac}\0${reason}`, this.clock.now().getTime())) return;
    this.audit.record('boot.denied', { status: 'failed', mac, worker_id: workerId, reason, client: 'boot-vars' }).catch(() => undefined);
  }

  private auditRefusal(e: ScriptRefused, mac: string | null, workerId: string | null): void {
    if (!this.refused.allow(`${workerId}\0${e.variable}\0${e.value}`, 0)) return;
    // The value itself is hostile by definition: only its JSON-escaped form is recorded.
    this.audit
      .record('boot.refused', { status: 'failed', mac, worker_id: workerId, variable: e.variable, value: JSON.stringify(e.value).slice(0, 300), client: 'boot-vars' })
      .catch(() => undefined);
  }

  /**
   * hostname -> worker (hostname or worker_id); else mac -> device -> bound worker. With a mac,
   * the device must be bound to the worker the hostname names (anti-spoofing).
   */
  private resolve(
    mac: string | null,
    hostname: string | null,
  ): { kind: 'worker'; worker: WorkerRecord } | { kind: 'pooled' } | { kind: 'none' } {
    const store = this.store.read();
    const device = mac ? store.devices.get(mac) : undefined;
    if (hostname) {
      const id = store.workers.has(hostname) ? hostname : store.workerIdByHostname().get(hostname);
      const worker = id ? store.workers.get(id) : undefined;
      if (worker) {
        if (!mac) return { kind: 'worker', worker };
        if (device?.state === 'bound' && device.bound_worker_id === worker.worker_id) return { kind: 'worker', worker };
        return { kind: 'none' };
      }
    }
    if (!mac) return { kind: 'none' };
    if (device?.state === 'bound' && device.bound_worker_id) {
      const worker = store.workers.get(device.bound_worker_id);
      return worker ? { kind: 'worker', worker } : { kind: 'none' };
    }
    if (device?.state === 'pooled') return { kind: 'pooled' };
    // Unknown MAC: /boot-vars never writes; with auto-register on, the reboot loop sends the
    // device back through /devices/report, which pools it.
    if (!device && this.settings.autoRegister) return { kind: 'pooled' };
    return { kind: 'none' };
  }

  private workerVars(w: WorkerRecord): BootVarsDto {
    const disk = this.disks.resolve(w);
    const menuDefault = w.default_os ?? w.boot.menu_default;
    const out: BootVarsDto = {} as BootVarsDto;
    if (disk) {
      out.base_iqn = disk.base_iqn;
      if (disk.iscsi_server) out.iscsi_server = disk.iscsi_server;
      if (disk.iscsi_sep) out.iscsi_sep = disk.iscsi_sep;
    }
    if (!menuDefault) return { ...out, ...this.rebootLoop() };
    out.menu_default = menuDefault;
    out.menu_timeout = w.boot.menu_timeout ?? this.config.bootMenuTimeoutMs;
    return out;
  }

  private rebootLoop(): BootVarsDto {
    return { menu_default: 'reboot', menu_timeout: this.config.autoBootTimeoutMs };
  }
}
