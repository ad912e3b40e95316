/*
 * Kurrent: the NVMe/TCP kernel-stage hand-over (issue 22).
 *
 * This program is free software; you can redistribute it and/or
 * modify it under the terms of the GNU General Public License as
 * published by the Free Software Foundation; either version 2 of the
 * License, or (at your option) any later version.
 */

FILE_LICENCE ( GPL2_OR_LATER );

/* Error file identifier (not in upstream's errfile.h: a value upstream does not use) */
#define ERRFILE_nvme_handover ( ERRFILE_NET | 0x00fb0000 )

/** @file
 *
 * What the booted OS needs to connect to the disk iPXE booted
 *
 * When an nvme:// disk is ready, iPXE writes one volatile EFI variable,
 * KurrentNvmeBoot (Kurrent's vendor GUID, boot-service + runtime
 * access, never non-volatile: gone at power-off), holding lines of
 * key=value: the NIC's MAC, the target (traddr, trsvcid, nqn, nsid),
 * the host identity (hostnqn, hostid), the DH-HMAC-CHAP secrets and the
 * TLS key the kernel looks up (its identity and the retained PSK). The
 * initramfs reads it through efivarfs and makes it root-only before
 * anything else runs; it cannot delete it (EDK2 keeps volatile variables
 * read-only after ExitBootServices), the firmware drops it at reset.
 * Nothing of it goes on a kernel command line or a console.
 *
 * The last disk that became ready wins: a sanhook followed by a sanboot
 * leaves the sanboot's disk. The BIOS build publishes nothing.
 */

#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ipxe/uuid.h>
#include "nvme_tcp.h"

#ifdef PLATFORM_efi

#include <ipxe/netdevice.h>
#include <ipxe/settings.h>
#include <ipxe/efi/efi.h>

extern const struct setting nvme_dhchap_secret_setting
	__setting ( SETTING_SANBOOT_EXTRA, dhchap-secret );
extern const struct setting nvme_dhchap_ctrl_secret_setting
	__setting ( SETTING_SANBOOT_EXTRA, dhchap-ctrl-secret );

/** Variable name */
static CHAR16 nvme_handover_name[] = L"KurrentNvmeBoot";

/** Kurrent's vendor GUID (as KurrentDeviceKey's) */
static EFI_GUID nvme_handover_guid = {
	0x6b757272, 0x656e, 0x4b65,
	{ 0x99, 0x00, 0x64, 0x65, 0x76, 0x69, 0x63, 0x6b }
};

/** Volatile: the secrets live until power-off at the latest */
#define NVME_HANDOVER_ATTRS ( EFI_VARIABLE_BOOTSERVICE_ACCESS |		\
			      EFI_VARIABLE_RUNTIME_ACCESS )

/** Wipe and free a string that may hold a secret */
static void nvme_handover_drop ( char *text ) {
	if ( text ) {
		memset ( text, 0, strlen ( text ) );
		free ( text );
	}
}

/**
 * Publish the hand-over variable
 *
 * @v host		Target address
 * @v port		Target port
 * @v subnqn		Subsystem NQN
 * @v nsid		Namespace ID
 * @v hostnqn		Host NQN
 * @v hostid		Host ID
 */
void nvme_handover_publish ( const char *host, unsigned int port,
			     const char *subnqn, uint32_t nsid,
			     const char *hostnqn, const union uuid *hostid ) {
	EFI_RUNTIME_SERVICES *rs = efi_systab->RuntimeServices;
	struct net_device *netdev = last_opened_netdev();
	char *secret = NULL;
	char *ctrl_secret = NULL;
	char *text = NULL;
	uint8_t psk[32];
	char psk_hex[ sizeof ( psk ) * 2 + 1 ];
	EFI_STATUS efirc;
	unsigned int i;
	int len;

	if ( nvme_tls_retained_psk ( hostnqn, psk ) != 0 )
		return;
	for ( i = 0 ; i < sizeof ( psk ) ; i++ )
		snprintf ( &psk_hex[ i * 2 ], 3, "%02x", psk[i] );
	memset ( psk, 0, sizeof ( psk ) );
	fetch_string_setting_copy ( NULL, &nvme_dhchap_secret_setting,
				    &secret );
	fetch_string_setting_copy ( NULL, &nvme_dhchap_ctrl_secret_setting,
				    &ctrl_secret );
	len = asprintf ( &text, "version=1\nmac=%s\ntraddr=%s\ntrsvcid=%d\n"
			 "nqn=%s\nnsid=%d\nhostnqn=%s\nhostid=%s\n"
			 "dhchap_secret=%s\ndhchap_ctrl_secret=%s\n"
			 "tls_identity=NVMe0R01 %s %s\ntls_psk=%s\n",
			 ( netdev ? netdev_addr ( netdev ) : "" ), host, port,
			 subnqn, nsid, hostnqn, uuid_ntoa ( hostid ),
			 ( secret ? secret : "" ),
			 ( ctrl_secret ? ctrl_secret : "" ),
			 hostnqn, subnqn, psk_hex );
	memset ( psk_hex, 0, sizeof ( psk_hex ) );
	nvme_handover_drop ( secret );
	nvme_handover_drop ( ctrl_secret );
	if ( len < 0 )
		return;
	efirc = rs->SetVariable ( nvme_handover_name, &nvme_handover_guid,
				  NVME_HANDOVER_ATTRS, len, text );
	nvme_handover_drop ( text );
	if ( efirc != 0 ) {
		DBG ( "NVMe hand-over variable not written: %s\n",
		      strerror ( -EEFI ( efirc ) ) );
		return;
	}
	DBG ( "NVMe hand-over variable written for %s\n", subnqn );
}

#else

void nvme_handover_publish ( const char *host __unused,
			     unsigned int port __unused,
			     const char *subnqn __unused,
			     uint32_t nsid __unused,
			     const char *hostnqn __unused,
			     const union uuid *hostid __unused ) {
	/* BIOS: no EFI variables; BIOS workers boot over iSCSI (iBFT) */
}

#endif
