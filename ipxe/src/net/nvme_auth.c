/*
 * NVMe in-band authentication: DH-HMAC-CHAP, host side.
 *
 * Copyright (C) 2026 Kurrent authors.
 *
 * This program is free software; you can redistribute it and/or
 * modify it under the terms of the GNU General Public License as
 * published by the Free Software Foundation; either version 2 of the
 * License, or any later version.
 *
 * This program is distributed in the hope that it will be useful, but
 * WITHOUT ANY WARRANTY; without even the implied warranty of
 * MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the GNU
 * General Public License for more details.
 */

FILE_LICENCE ( GPL2_OR_LATER );

/* Error file identifier (not in upstream's errfile.h: a value upstream does not use) */
#define ERRFILE_nvme_auth ( ERRFILE_NET | 0x00fc0000 )

/** @file
 *
 * DH-HMAC-CHAP (NVMe base specification 2.0, section 8.3.5) as the
 * messages' builder and checker; nvme_tcp.c carries them in
 * Authentication Send / Receive.  Offered: hmac(sha256) with ffdhe2048
 * only (no NULL group: a controller cannot talk the host down to a
 * plain CHAP).  Bidirectional whenever the controller's secret is set:
 * the controller's response is checked, and a wrong one stops the
 * boot.  The computations follow the Linux host (drivers/nvme/host/
 * auth.c, drivers/nvme/common/auth.c), against which the tests run.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <byteswap.h>
#include <ipxe/crypto.h>
#include <ipxe/sha256.h>
#include <ipxe/hmac.h>
#include <ipxe/ffdhe.h>
#include <ipxe/rbg.h>
#include <ipxe/settings.h>
#include <ipxe/errortab.h>
#include "nvme_tcp.h"

#define EINFO_EINVAL_DHCHAP \
	__einfo_uniqify ( EINFO_EINVAL, 0x01, \
			  "dhchap-secret or dhchap-ctrl-secret is not DHHC-1" )
#define EINVAL_DHCHAP __einfo_error ( EINFO_EINVAL_DHCHAP )
#define EINFO_EACCES_FAILURE1 \
	__einfo_uniqify ( EINFO_EACCES, 0x01, \
			  "NVMe target refused DH-HMAC-CHAP (host key)" )
#define EACCES_FAILURE1 __einfo_error ( EINFO_EACCES_FAILURE1 )
#define EINFO_EACCES_CTRL \
	__einfo_uniqify ( EINFO_EACCES, 0x02, \
			  "NVMe target failed DH-HMAC-CHAP (wrong controller key)" )
#define EACCES_CTRL __einfo_error ( EINFO_EACCES_CTRL )
#define EINFO_ENOTSUP_DHCHAP \
	__einfo_uniqify ( EINFO_ENOTSUP, 0x01, \
			  "NVMe target chose no hmac(sha256) with ffdhe2048" )
#define ENOTSUP_DHCHAP __einfo_error ( EINFO_ENOTSUP_DHCHAP )
#define EINFO_EPROTO_DHCHAP \
	__einfo_uniqify ( EINFO_EPROTO, 0x01, \
			  "NVMe DH-HMAC-CHAP message malformed" )
#define EPROTO_DHCHAP __einfo_error ( EINFO_EPROTO_DHCHAP )
#define EINFO_ENOENT_DHCHAP \
	__einfo_uniqify ( EINFO_ENOENT, 0x01, \
			  "NVMe target requires DH-HMAC-CHAP; dhchap-secret is not set" )
#define ENOENT_DHCHAP __einfo_error ( EINFO_ENOENT_DHCHAP )

struct errortab nvme_auth_errors[] __errortab = {
	__einfo_errortab ( EINFO_EINVAL_DHCHAP ),
	__einfo_errortab ( EINFO_EACCES_FAILURE1 ),
	__einfo_errortab ( EINFO_EACCES_CTRL ),
	__einfo_errortab ( EINFO_ENOTSUP_DHCHAP ),
	__einfo_errortab ( EINFO_EPROTO_DHCHAP ),
	__einfo_errortab ( EINFO_ENOENT_DHCHAP ),
};

/** Host secret setting */
const struct setting nvme_dhchap_secret_setting
	__setting ( SETTING_SANBOOT_EXTRA, dhchap-secret ) = {
	.name = "dhchap-secret",
	.description = "NVMe DH-HMAC-CHAP host secret (DHHC-1)",
	.type = &setting_type_string,
};

/** Controller secret setting */
const struct setting nvme_dhchap_ctrl_secret_setting
	__setting ( SETTING_SANBOOT_EXTRA, dhchap-ctrl-secret ) = {
	.name = "dhchap-ctrl-secret",
	.description = "NVMe DH-HMAC-CHAP controller secret (DHHC-1)",
	.type = &setting_type_string,
};

/* Message types and identifiers */
#define AUTH_COMMON 0x00
#define AUTH_DHCHAP 0x01
#define AUTH_NEGOTIATE 0x00
#define AUTH_CHALLENGE 0x01
#define AUTH_REPLY 0x02
#define AUTH_SUCCESS1 0x03
#define AUTH_SUCCESS2 0x04
#define AUTH_FAILURE2 0xf0
#define AUTH_FAILURE1 0xf1
#define AUTH_DHCHAP_ID 0x01
#define AUTH_HASH_SHA256 0x01
#define AUTH_DHGROUP_2048 0x01
#define AUTH_HL 32
#define AUTH_DHLEN 256

/**
 * Decode a DHHC-1 secret and transform it for an NQN
 * (nvme_auth_transform_key())
 *
 * @v text		DHHC-1:<hh>:<base64(key || crc32)>: (hh 00 or 01)
 * @v nqn		NQN the transformation binds it to
 * @v key		Transformed key to fill in (32 bytes)
 * @ret rc		Return status code
 */
static int nvme_auth_key ( const char *text, const char *nqn, uint8_t *key ) {
	uint8_t raw[32];
	uint8_t hmac[ hmac_ctxsize ( &sha256_algorithm ) ];
	int hh;

	hh = nvme_key_decode ( text, "DHHC-1:", raw );
	if ( hh < 0 )
		return -EINVAL_DHCHAP;
	if ( hh == 0 ) {
		memcpy ( key, raw, 32 );
	} else {
		hmac_init ( &sha256_algorithm, hmac, raw, 32 );
		hmac_update ( &sha256_algorithm, hmac, nqn, strlen ( nqn ) );
		hmac_update ( &sha256_algorithm, hmac, "NVMe-over-Fabrics", 17 );
		hmac_final ( &sha256_algorithm, hmac, key );
		memset ( hmac, 0, sizeof ( hmac ) );
	}
	memset ( raw, 0, sizeof ( raw ) );
	return 0;
}

/**
 * Prepare a transaction: read the secrets for this host and subsystem
 *
 * @v auth		Authentication state
 * @v hostnqn		Host NQN
 * @v subnqn		Subsystem NQN
 * @v t_id		Transaction ID
 * @ret rc		Return status code (-ENOENT_DHCHAP: no host secret)
 */
int nvme_auth_init ( struct nvme_auth *auth, const char *hostnqn,
		     const char *subnqn, unsigned int t_id ) {
	char *text = NULL;
	int len;
	int rc;

	memset ( auth, 0, sizeof ( *auth ) );
	auth->hostnqn = hostnqn;
	auth->subnqn = subnqn;
	auth->t_id = t_id;
	len = fetch_string_setting_copy ( NULL, &nvme_dhchap_secret_setting,
					  &text );
	/* Absent (negative: settings.c's own ENOENT) or empty: not set */
	if ( len <= 0 ) {
		free ( text );
		return -ENOENT_DHCHAP;
	}
	rc = nvme_auth_key ( text, hostnqn, auth->host_key );
	memset ( text, 0, len );
	free ( text );
	text = NULL;
	if ( rc != 0 )
		return rc;
	len = fetch_string_setting_copy ( NULL,
					  &nvme_dhchap_ctrl_secret_setting,
					  &text );
	if ( len > 0 ) {
		rc = nvme_auth_key ( text, subnqn, auth->ctrl_key );
		memset ( text, 0, len );
		if ( rc != 0 ) {
			free ( text );
			return rc;
		}
		auth->bidirectional = 1;
	}
	free ( text );
	return ( ( len < 0 ) ? len : 0 );
}

/**
 * Whether a controller secret is set (the controller must authenticate)
 *
 * @ret set		Controller secret set
 */
int nvme_auth_wants_ctrl ( void ) {
	return setting_exists ( NULL, &nvme_dhchap_ctrl_secret_setting );
}

/**
 * Build AUTH_Negotiate
 *
 * @v auth		Authentication state
 * @v buf		Buffer (NVME_AUTH_NEGOTIATE_LEN bytes)
 * @ret len		Message length
 */
size_t nvme_auth_negotiate ( struct nvme_auth *auth, uint8_t *buf ) {
	memset ( buf, 0, NVME_AUTH_NEGOTIATE_LEN );
	buf[0] = AUTH_COMMON;
	buf[1] = AUTH_NEGOTIATE;
	buf[4] = ( auth->t_id & 0xff );
	buf[5] = ( auth->t_id >> 8 );
	buf[6] = 0; /* no secure channel concatenation: TLS is below */
	buf[7] = 1; /* one protocol descriptor */
	buf[8] = AUTH_DHCHAP_ID;
	buf[10] = 1; /* hash identifiers */
	buf[11] = 1; /* DH group identifiers */
	buf[12] = AUTH_HASH_SHA256;
	buf[12 + 30] = AUTH_DHGROUP_2048;
	return NVME_AUTH_NEGOTIATE_LEN;
}

/**
 * Augmented challenge: HMAC(H(session key), challenge)
 */
static void nvme_auth_augment ( const uint8_t *session, const uint8_t *chal,
				uint8_t *out ) {
	uint8_t ctx[SHA256_CTX_SIZE];
	uint8_t hashed[AUTH_HL];
	uint8_t hmac[ hmac_ctxsize ( &sha256_algorithm ) ];

	digest_init ( &sha256_algorithm, ctx );
	digest_update ( &sha256_algorithm, ctx, session, AUTH_DHLEN );
	digest_final ( &sha256_algorithm, ctx, hashed );
	hmac_init ( &sha256_algorithm, hmac, hashed, sizeof ( hashed ) );
	hmac_update ( &sha256_algorithm, hmac, chal, AUTH_HL );
	hmac_final ( &sha256_algorithm, hmac, out );
	memset ( hashed, 0, sizeof ( hashed ) );
}

/**
 * A response: HMAC(key, Ca || seq || t_id || 0 || who || nqn1 || 0 || nqn2)
 */
static void nvme_auth_response ( struct nvme_auth *auth, const uint8_t *key,
				 const uint8_t *aug, uint32_t seq,
				 const char *who, const char *nqn1,
				 const char *nqn2, uint8_t *out ) {
	uint8_t hmac[ hmac_ctxsize ( &sha256_algorithm ) ];
	uint8_t buf[4];

	hmac_init ( &sha256_algorithm, hmac, key, AUTH_HL );
	hmac_update ( &sha256_algorithm, hmac, aug, AUTH_HL );
	buf[0] = ( seq & 0xff );
	buf[1] = ( ( seq >> 8 ) & 0xff );
	buf[2] = ( ( seq >> 16 ) & 0xff );
	buf[3] = ( seq >> 24 );
	hmac_update ( &sha256_algorithm, hmac, buf, 4 );
	buf[0] = ( auth->t_id & 0xff );
	buf[1] = ( auth->t_id >> 8 );
	hmac_update ( &sha256_algorithm, hmac, buf, 2 );
	buf[0] = 0;
	hmac_update ( &sha256_algorithm, hmac, buf, 1 );
	hmac_update ( &sha256_algorithm, hmac, who, strlen ( who ) );
	hmac_update ( &sha256_algorithm, hmac, nqn1, strlen ( nqn1 ) );
	hmac_update ( &sha256_algorithm, hmac, buf, 1 );
	hmac_update ( &sha256_algorithm, hmac, nqn2, strlen ( nqn2 ) );
	hmac_final ( &sha256_algorithm, hmac, out );
}

/**
 * Check a common-message failure
 */
static int nvme_auth_failure ( const uint8_t *msg, size_t len ) {
	if ( ( len >= 8 ) && ( msg[1] == AUTH_FAILURE1 ) ) {
		DBGC ( msg, "NVMeAUTH failure1 reason %#02x/%#02x\n",
		       msg[6], msg[7] );
		return -EACCES_FAILURE1;
	}
	return 0;
}

/**
 * Reject the controller public values that would pin the session key to
 * a small subgroup ({1, p-1} of the safe prime: 0, 1, p-1, p, p+1)
 *
 * @v y			Public value (big-endian, AUTH_DHLEN bytes)
 * @ret ok		Value is usable
 */
static int nvme_auth_public_ok ( const uint8_t *y ) {
	unsigned int i;
	int small = 1;
	int top = 1;
	int low_ones = 1;
	int low_zero = 1;

	for ( i = 0 ; i < ( AUTH_DHLEN - 1 ) ; i++ ) {
		if ( y[i] )
			small = 0;
	}
	if ( small && ( y[ AUTH_DHLEN - 1 ] <= 1 ) )
		return 0;
	/* The ffdhe primes' top and bottom 64 bits are all ones */
	for ( i = 0 ; i < 8 ; i++ ) {
		if ( y[i] != 0xff )
			top = 0;
		if ( y[ AUTH_DHLEN - 8 + i ] != 0x00 )
			low_zero = 0;
		if ( ( i < 7 ) && ( y[ AUTH_DHLEN - 8 + i ] != 0xff ) )
			low_ones = 0;
	}
	if ( top && ( low_zero ||
		      ( low_ones && ( y[ AUTH_DHLEN - 1 ] >= 0xfe ) ) ) )
		return 0;
	return 1;
}

/**
 * Handle DH-HMAC-CHAP_Challenge and build DH-HMAC-CHAP_Reply
 *
 * @v auth		Authentication state
 * @v msg		Challenge
 * @v len		Length received
 * @v reply		Reply buffer (NVME_AUTH_REPLY_MAX bytes)
 * @ret len		Reply length, or negative error
 */
int nvme_auth_reply ( struct nvme_auth *auth, const uint8_t *msg, size_t len,
		      uint8_t *reply ) {
	struct exchange_algorithm *dh = &ffdhe2048_algorithm;
	uint8_t private[ dh->privsize ];
	uint8_t session[AUTH_DHLEN];
	uint8_t aug[AUTH_HL];
	unsigned int dhvlen;
	uint32_t seq;
	int rc;

	if ( ( rc = nvme_auth_failure ( msg, len ) ) != 0 )
		return rc;
	if ( ( len < 16 ) || ( msg[0] != AUTH_DHCHAP ) ||
	     ( msg[1] != AUTH_CHALLENGE ) ||
	     ( ( unsigned int ) ( msg[4] | ( msg[5] << 8 ) ) != auth->t_id ) )
		return -EPROTO_DHCHAP;
	if ( ( msg[6] != AUTH_HL ) || ( msg[8] != AUTH_HASH_SHA256 ) ||
	     ( msg[9] != AUTH_DHGROUP_2048 ) )
		return -ENOTSUP_DHCHAP;
	dhvlen = ( msg[10] | ( msg[11] << 8 ) );
	seq = ( msg[12] | ( msg[13] << 8 ) | ( msg[14] << 16 ) |
		( ( uint32_t ) msg[15] << 24 ) );
	if ( ( dhvlen != AUTH_DHLEN ) || ( len < ( 16 + AUTH_HL + dhvlen ) ) ||
	     ( ! nvme_auth_public_ok ( msg + 16 + AUTH_HL ) ) )
		return -EPROTO_DHCHAP;

	/* Ephemeral DH: our public value into the reply, the session key */
	memset ( reply, 0, NVME_AUTH_REPLY_MAX );
	if ( ( rc = rbg_generate ( NULL, 0, 0, private,
				   sizeof ( private ) ) ) != 0 )
		goto out;
	if ( ( rc = exchange_share ( dh, private,
				     ( reply + 16 + 2 * AUTH_HL ) ) ) != 0 )
		goto out;
	if ( ( rc = exchange_agree ( dh, private, ( msg + 16 + AUTH_HL ),
				     session ) ) != 0 )
		goto out;

	/* Our response to the controller's challenge */
	nvme_auth_augment ( session, ( msg + 16 ), aug );
	reply[0] = AUTH_DHCHAP;
	reply[1] = AUTH_REPLY;
	reply[4] = ( auth->t_id & 0xff );
	reply[5] = ( auth->t_id >> 8 );
	reply[6] = AUTH_HL;
	reply[10] = ( AUTH_DHLEN & 0xff );
	reply[11] = ( AUTH_DHLEN >> 8 );
	nvme_auth_response ( auth, auth->host_key, aug, seq, "HostHost",
			     auth->hostnqn, auth->subnqn, ( reply + 16 ) );

	/* Our challenge to the controller, and the answer we expect */
	if ( auth->bidirectional ) {
		if ( ( ( rc = rbg_generate ( NULL, 0, 0, ( reply + 16 + AUTH_HL ),
					     AUTH_HL ) ) != 0 ) ||
		     ( ( rc = rbg_generate ( NULL, 0, 0, &auth->seq2,
					     sizeof ( auth->seq2 ) ) ) != 0 ) )
			goto out;
		auth->seq2 &= 0x7fffffffUL;
		if ( ! auth->seq2 )
			auth->seq2 = 1;
		reply[8] = 1; /* cvalid */
		reply[12] = ( auth->seq2 & 0xff );
		reply[13] = ( ( auth->seq2 >> 8 ) & 0xff );
		reply[14] = ( ( auth->seq2 >> 16 ) & 0xff );
		reply[15] = ( auth->seq2 >> 24 );
		nvme_auth_augment ( session, ( reply + 16 + AUTH_HL ), aug );
		nvme_auth_response ( auth, auth->ctrl_key, aug, auth->seq2,
				     "Controller", auth->subnqn, auth->hostnqn,
				     auth->expect );
	}
	rc = ( 16 + 2 * AUTH_HL + AUTH_DHLEN );

 out:
	memset ( private, 0, sizeof ( private ) );
	memset ( session, 0, sizeof ( session ) );
	memset ( aug, 0, sizeof ( aug ) );
	return rc;
}

/**
 * Handle DH-HMAC-CHAP_Success1: check the controller's response
 *
 * @v auth		Authentication state
 * @v msg		Success1 (or Failure1)
 * @v len		Length received
 * @ret rc		Return status code, or 1 when the controller's
 *			response is wrong (send Failure2, then stop)
 */
int nvme_auth_success1 ( struct nvme_auth *auth, const uint8_t *msg,
			 size_t len ) {
	int rc;

	if ( ( rc = nvme_auth_failure ( msg, len ) ) != 0 )
		return rc;
	if ( ( len < 16 ) || ( msg[0] != AUTH_DHCHAP ) ||
	     ( msg[1] != AUTH_SUCCESS1 ) ||
	     ( ( unsigned int ) ( msg[4] | ( msg[5] << 8 ) ) != auth->t_id ) ||
	     ( msg[6] != AUTH_HL ) )
		return -EPROTO_DHCHAP;
	if ( ! auth->bidirectional )
		return 0;
	if ( ( ! msg[8] ) || ( len < ( 16 + AUTH_HL ) ) ||
	     ( memcmp ( ( msg + 16 ), auth->expect, AUTH_HL ) != 0 ) )
		return 1;
	return 0;
}

/**
 * The error a wrong controller response stops the boot with
 *
 * @ret rc		Return status code
 */
int nvme_auth_ctrl_error ( void ) {
	return -EACCES_CTRL;
}

/**
 * The error a connection dropped during authentication stops the boot
 * with (nvmet closes it on a response that does not verify)
 *
 * @ret rc		Return status code
 */
int nvme_auth_refused_error ( void ) {
	return -EACCES_FAILURE1;
}

/**
 * Build DH-HMAC-CHAP_Success2, or Failure2 after a wrong controller
 * response
 *
 * @v auth		Authentication state
 * @v failed		Controller failed
 * @v buf		Buffer (16 bytes)
 * @ret len		Message length
 */
size_t nvme_auth_finish ( struct nvme_auth *auth, int failed, uint8_t *buf ) {
	memset ( buf, 0, 16 );
	buf[0] = ( failed ? AUTH_COMMON : AUTH_DHCHAP );
	buf[1] = ( failed ? AUTH_FAILURE2 : AUTH_SUCCESS2 );
	buf[4] = ( auth->t_id & 0xff );
	buf[5] = ( auth->t_id >> 8 );
	if ( failed ) {
		buf[6] = 0x01; /* failure */
		buf[7] = 0x01; /* authentication failed */
	}
	memset ( auth->host_key, 0, sizeof ( auth->host_key ) );
	memset ( auth->ctrl_key, 0, sizeof ( auth->ctrl_key ) );
	memset ( auth->expect, 0, sizeof ( auth->expect ) );
	return 16;
}
