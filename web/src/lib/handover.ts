/**
 * How the booted OS keeps a disk after the firmware (docs/KERNEL-STAGE.md): iSCSI disks through
 * the iBFT iPXE publishes at sanboot; NVMe/TCP disks through the volatile EFI variable
 * KurrentNvmeBoot that Kurrent's iPXE writes at sanboot (UEFI only: BIOS workers boot iSCSI).
 */
export function handover(transport: string | null | undefined): string {
  return transport === 'nvme-tcp' ? 'kernel stage: KurrentNvmeBoot EFI variable from iPXE (UEFI)' : 'kernel stage: iBFT from iPXE';
}
