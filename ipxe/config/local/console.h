/* Kurrent's iPXE console (copied into src/config/local/ by ipxe/build.sh).
 *
 * The serial console comes from the UEFI firmware's console redirection: OVMF (the tests) and
 * server firmware with "console redirection" enabled copy the EFI text console to the serial
 * port, so every line iPXE prints reaches it, in order. iPXE's own CONSOLE_SERIAL would write
 * each character to the UART a second time beside the firmware's copy (interleaved character by
 * character on OVMF), so it stays off in the EFI build. A BIOS has no such copy: the BIOS build
 * (ipxe.pxe) writes to the serial port itself.
 */
#if defined ( PLATFORM_pcbios )
#define CONSOLE_SERIAL
#else
#undef CONSOLE_SERIAL
#endif
