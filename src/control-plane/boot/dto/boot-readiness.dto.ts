import { ApiProperty } from '@nestjs/swagger';

/** Why a worker would not boot its disk now (GET /workers: boot_readiness.reasons[].code). */
export const BOOT_BLOCKERS = {
  'no-bound-device': 'no device is bound to this worker: its machine gets no per-worker boot vars',
  'no-disk': 'the worker has no system disk',
  'no-default-disk': 'no default disk: /boot-vars answers menu-default reboot (seed 004); set one (default-disk or default-os)',
  'default-not-a-disk': 'boot.menu_default names a menu item that is not one of its disks',
  'agent-unknown': 'the agent of the default disk is not in the registry',
  'agent-draining': 'the agent of the default disk is disabled (drained): its disks are being moved off it',
  'agent-down': 'the agent of the default disk did not answer its last probe',
  'nvme-port-unknown': "the agent's NVMe/TCP port is not known yet (capabilities not probed)",
  'nvme-port-without-tls': "the agent's NVMe/TCP port does not require TLS: never booted in plaintext",
  'credential-missing': 'the worker has no storage credential for its NVMe disk',
  'credential-revoked': "the worker's storage credential is revoked",
  'credential-not-pushed': "the worker's current credential is not yet on the disk's agent (the reconciler pushes it)",
  'no-device-key': 'signature enforcement is on and the bound device has no key',
  'boot-loop-hold': 'the bound device is held after a boot loop (its boots never reached the disk): release it (POST /boots/{mac}/release) once the cause is fixed',
} as const;
export type BootBlockerCode = keyof typeof BOOT_BLOCKERS;

export class BootBlockerDto {
  @ApiProperty({ enum: Object.keys(BOOT_BLOCKERS) })
  code!: BootBlockerCode;
  /** What the code means and what to do about it. */
  message!: string;
}

/**
 * Whether the worker's machine boots its default disk now, judged by the code that answers its
 * /boot-vars plus the bound device, the disk's agent as last probed and the device key.
 */
export class BootReadinessDto {
  bootable!: boolean;
  /** Empty when bootable; otherwise every reason, in the order /boot-vars meets them. */
  reasons!: BootBlockerDto[];
}
