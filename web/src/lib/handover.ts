/**
 * How the booted OS keeps a disk after the firmware (docs/KERNEL-STAGE.md): iSCSI disks through
 * the iBFT iPXE publishes at sanboot; NVMe/TCP disks have no firmware stage yet (issue 21), so no
 * hand-over exists for them.
 */
export function handover(transport: string | null | undefined): string {
  return transport === 'nvme-tcp' ? 'kernel stage: none yet (no NVMe/TCP firmware boot)' : 'kernel stage: iBFT from iPXE';
}
