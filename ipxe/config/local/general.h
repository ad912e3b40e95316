/* Kurrent's iPXE build options (copied into src/config/local/ by ipxe/build.sh). */

/* Everything after the TFTP pointer is fetched over HTTPS, pinned to the controller's certificate
 * (TRUST= at build time). */
#define DOWNLOAD_PROTO_HTTPS

/* The device-key commands (ipxe/src/kurrent_cmd.c): EFI NVRAM only, so not in the BIOS build. */
#if defined ( PLATFORM_efi )
#define KURRENT_CMD
#endif

/* Used by the tests' self-test script; harmless on a worker. */
#define POWEROFF_CMD
/* sanboot nvme:// (ipxe/src/net/nvme_tcp.c): NVMe/TCP over TLS 1.3 with a PSK, DH-HMAC-CHAP. */
#define SANBOOT_PROTO_NVME
