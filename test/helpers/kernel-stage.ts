import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { TestApp } from './app';

/**
 * The worker side of the kernel-stage tests (issue 22): a UEFI machine (qemu TCG + OVMF) whose
 * NIC's option ROM is Kurrent's iPXE, booting a disk cloned from the Linux master of
 * worker-image/ until its OS says it is up. Shared by the stgt boot test and the LIO kernel test.
 */
const root = path.resolve(__dirname, '../..');
const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';

/** What the worker's OS prints once it runs from its disk (worker-image/os-init): its boot count. */
export const OS_UP = /KURRENT-OS-UP boot=(\d+)/;

export type BootSession = { outcome: string; stage: string; reason: string | null; started_at: string; stages: { stage: string; at: string; offset_ms: number; detail?: Record<string, string> }[] };

export interface WorkerBoot {
  serial: string;
  /** Power-on time (ms since the epoch). */
  t0: number;
  /** When (ms after power-on) each `kurrent-os:` line first appeared. */
  seen: Map<string, number>;
}

/** A TFTP root whose boot.ipxe chains to the control plane at `controller` (Kurrent's iPXE fetches the rest over pinned HTTPS). */
export function kernelStageTftp(dir: string, controller: string): string {
  const tftp = path.join(dir, 'tftp');
  fs.mkdirSync(tftp, { recursive: true });
  fs.writeFileSync(path.join(tftp, 'boot.ipxe'), fs.readFileSync(path.join(root, 'docker/tftp/boot.ipxe'), 'utf8').replace(/^set controller-https .*$/m, `set controller-https ${controller}`));
  return tftp;
}

/** A worker with a disk cloned from `master` (on `agent` when given), set as its default, and its device bound; returns the disk's IQN. */
export async function seatWorker(t: TestApp, worker: string, mac: string, master: string, agent?: string): Promise<string> {
  expect((await t.req('POST', '/devices', { mac })).status).toBe(201);
  expect((await t.req('POST', '/workers', { worker_id: worker, mac })).status).toBe(201);
  const disk = await t.req('POST', `/workers/${worker}/luns/disk`, { type: 'master', os: 'debian', name: master, ...(agent ? { disk_agent: agent } : {}) });
  expect([disk.status, disk.status === 201 ? null : disk.body]).toEqual([201, null]);
  expect((await t.req('PUT', `/workers/${worker}/default-os`, { os: 'debian', menu_timeout: 100 })).status).toBe(200);
  return disk.body.disks[0].iqn;
}

/**
 * One power-on of the machine whose NVRAM is `vars` (a copy of OVMF's on first use), until its
 * OS says it is up (then `whileUp`, with the OS running), until iPXE reboots (qemu exits:
 * -no-reboot), or `timeoutMs`; then the power is cut (no shutdown: what was written must already
 * be on the disk).
 */
export async function bootWorker(o: { vars: string; mac: string; hostname: string; tftp: string; rom: string; whileUp?: () => Promise<void>; timeoutMs?: number; track?: (q: ChildProcess) => void }): Promise<WorkerBoot> {
  if (!fs.existsSync(o.vars)) fs.copyFileSync(OVMF_VARS, o.vars);
  const serialFile = `${o.vars}.serial`;
  fs.writeFileSync(serialFile, '');
  const t0 = Date.now();
  const qemu = spawn(
    'qemu-system-x86_64',
    [
      ...['-accel', 'tcg', '-cpu', 'max', '-m', '512', '-machine', 'q35', '-no-reboot', '-display', 'none', '-monitor', 'none'],
      ...['-drive', `if=pflash,format=raw,unit=0,readonly=on,file=${OVMF_CODE}`, '-drive', `if=pflash,format=raw,unit=1,file=${o.vars}`],
      ...['-netdev', `user,id=n0,tftp=${o.tftp},bootfile=boot.ipxe,hostname=${o.hostname}`],
      ...['-device', `e1000,netdev=n0,mac=${o.mac},romfile=${o.rom}`, '-serial', `file:${serialFile}`],
    ],
    { stdio: 'ignore' },
  );
  o.track?.(qemu);
  const seen = new Map<string, number>();
  const end = Date.now() + (o.timeoutMs ?? 300_000);
  let whileUp = o.whileUp;
  while (Date.now() < end && qemu.exitCode === null && qemu.signalCode === null) {
    const serial = fs.readFileSync(serialFile, 'latin1');
    for (const line of serial.split(/\r?\n/)) if (line.startsWith('kurrent-os:') && !seen.has(line)) seen.set(line, Date.now() - t0);
    if (OS_UP.test(serial) && whileUp) {
      await whileUp(); // the OS is running: what happens now reaches it live
      whileUp = undefined;
    }
    if (OS_UP.test(serial) || serial.includes('kurrent-os: FAILED')) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  qemu.kill('SIGKILL');
  await new Promise((r) => (qemu.exitCode !== null || qemu.signalCode !== null ? r(null) : qemu.once('exit', r)));
  return { serial: fs.readFileSync(serialFile, 'latin1'), t0, seen };
}
