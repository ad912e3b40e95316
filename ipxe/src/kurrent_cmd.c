/*
 * Kurrent device-key commands for iPXE.
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
#define ERRFILE_kurrent_cmd ( ERRFILE_OTHER | 0x00ff0000 )

/** @file
 *
 * kurrent-keygen and kurrent-sign: the device key of seed 004, held in
 * EFI NVRAM.
 *
 *   kurrent-keygen [--set <setting>]
 *       If the NVRAM variable KurrentDeviceKey (vendor GUID below) is
 *       absent, draw a P-256 private scalar from iPXE's DRBG and store
 *       it (non-volatile, boot-service and runtime access).  In every
 *       case, store the public key 04||X||Y as 130 lower-case hex digits
 *       in <setting> (default: kurrent-pubkey).
 *
 *   kurrent-sign [--set <setting>] <nonce> <mac>
 *       Sign nonce (64 hex digits, 32 bytes) || mac (6 bytes; colon form
 *       or 12 hex digits) with ECDSA P-256 / SHA-256 and store raw r||s
 *       as 128 lower-case hex digits in <setting> (default: kurrent-sig).
 *
 * The private scalar never leaves this file: it is never printed, never
 * put in a setting and never sent.  Buffers that held it are wiped.
 * Signing is deterministic (iPXE's ECDSA uses an HMAC_DRBG seeded from
 * the key and the digest, as RFC 6979 does), so no randomness is needed
 * after the key exists.
 */

#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <getopt.h>
#include <ipxe/command.h>
#include <ipxe/parseopt.h>
#include <ipxe/settings.h>
#include <ipxe/crypto.h>
#include <ipxe/asn1.h>
#include <ipxe/ecdsa.h>
#include <ipxe/p256.h>
#include <ipxe/sha256.h>
#include <ipxe/rbg.h>
#include <ipxe/efi/efi.h>

/** NVRAM variable name */
static CHAR16 kurrent_key_name[] = L"KurrentDeviceKey";

/** Vendor GUID of the NVRAM variable: 6b757272-656e-4b65-9900-64657669636b */
static EFI_GUID kurrent_key_guid = {
	0x6b757272, 0x656e, 0x4b65,
	{ 0x99, 0x00, 0x64, 0x65, 0x76, 0x69, 0x63, 0x6b }
};

/** Attributes of the NVRAM variable */
#define KURRENT_KEY_ATTRS ( EFI_VARIABLE_NON_VOLATILE |			\
			    EFI_VARIABLE_BOOTSERVICE_ACCESS |		\
			    EFI_VARIABLE_RUNTIME_ACCESS )

/** P-256 sizes */
#define KURRENT_SCALAR_LEN 32
#define KURRENT_POINT_LEN 64

/** Hex digits */
static const char kurrent_hex[] = "0123456789abcdef";

/** Wipe a buffer that held key material */
static void kurrent_wipe ( void *buf, size_t len ) {
	volatile uint8_t *p = buf;
	while ( len-- )
		*(p++) = 0;
}

/** Is the scalar in [1, n-1]? (big-endian, constant shape) */
static int kurrent_scalar_ok ( const uint8_t *d ) {
	const uint8_t *n = p256_curve.order;
	int lt = 0, gt = 0, nonzero = 0;
	unsigned int i;

	for ( i = 0 ; i < KURRENT_SCALAR_LEN ; i++ ) {
		if ( ! ( lt | gt ) ) {
			if ( d[i] < n[i] )
				lt = 1;
			else if ( d[i] > n[i] )
				gt = 1;
		}
		nonzero |= d[i];
	}
	return ( nonzero && lt );
}

/** Read the private scalar from NVRAM (-ENOENT when absent) */
static int kurrent_read_key ( uint8_t *d ) {
	EFI_RUNTIME_SERVICES *rs = efi_systab->RuntimeServices;
	UINT32 attrs = 0;
	UINTN len = KURRENT_SCALAR_LEN;
	EFI_STATUS efirc;

	efirc = rs->GetVariable ( kurrent_key_name, &kurrent_key_guid,
				  &attrs, &len, d );
	if ( efirc == EFI_NOT_FOUND )
		return -ENOENT;
	if ( efirc != 0 )
		return -EEFI ( efirc );
	/* Anything else than our own 32-byte scalar is not our key */
	if ( ( len != KURRENT_SCALAR_LEN ) || ! kurrent_scalar_ok ( d ) ||
	     ( attrs & EFI_VARIABLE_NON_VOLATILE ) == 0 )
		return -EINVAL;
	return 0;
}

/** Generate and store a new private scalar */
static int kurrent_new_key ( uint8_t *d ) {
	EFI_RUNTIME_SERVICES *rs = efi_systab->RuntimeServices;
	EFI_STATUS efirc;
	unsigned int tries;
	int rc;

	for ( tries = 0 ; tries < 16 ; tries++ ) {
		if ( ( rc = rbg_generate ( NULL, 0, 1, d,
					   KURRENT_SCALAR_LEN ) ) != 0 )
			return rc;
		if ( kurrent_scalar_ok ( d ) )
			break;
	}
	if ( ! kurrent_scalar_ok ( d ) )
		return -EIO;
	if ( ( efirc = rs->SetVariable ( kurrent_key_name, &kurrent_key_guid,
					 KURRENT_KEY_ATTRS, KURRENT_SCALAR_LEN,
					 d ) ) != 0 )
		return -EEFI ( efirc );
	return 0;
}

/** Public point 04||X||Y of scalar d */
static int kurrent_public ( const uint8_t *d, uint8_t *point ) {
	point[0] = 0x04;
	return elliptic_multiply ( &p256_curve, p256_curve.base, d,
				   &point[1] );
}

/** Store bytes as lower-case hex in a named setting */
static int kurrent_store_hex ( struct named_setting *setting,
			       const uint8_t *data, size_t len ) {
	char hex[ 2 * len + 1 ];
	unsigned int i;

	for ( i = 0 ; i < len ; i++ ) {
		hex[ 2 * i ] = kurrent_hex[ data[i] >> 4 ];
		hex[ 2 * i + 1 ] = kurrent_hex[ data[i] & 0xf ];
	}
	hex[ 2 * len ] = '\0';
	if ( ! setting->setting.type )
		setting->setting.type = &setting_type_string;
	return storef_setting ( setting->settings, &setting->setting, hex );
}

/** Parse exactly len bytes of hex (separators ':' allowed when sep) */
static int kurrent_parse_hex ( const char *text, uint8_t *out, size_t len,
			       int sep ) {
	size_t n = 0;
	int hi = -1;
	int v;

	for ( ; *text ; text++ ) {
		char c = *text;
		if ( sep && ( c == ':' ) && ( hi < 0 ) )
			continue;
		if ( ( c >= '0' ) && ( c <= '9' ) ) v = ( c - '0' );
		else if ( ( c >= 'a' ) && ( c <= 'f' ) ) v = ( c - 'a' + 10 );
		else if ( ( c >= 'A' ) && ( c <= 'F' ) ) v = ( c - 'A' + 10 );
		else return -EINVAL;
		if ( hi < 0 ) {
			hi = v;
		} else {
			if ( n >= len )
				return -EINVAL;
			out[ n++ ] = ( ( hi << 4 ) | v );
			hi = -1;
		}
	}
	return ( ( n == len ) && ( hi < 0 ) ) ? 0 : -EINVAL;
}

/** The ECPrivateKey (RFC 5915) iPXE's ECDSA takes: d, the curve, the point */
static void kurrent_der_key ( uint8_t *der, const uint8_t *d,
			      const uint8_t *point ) {
	static const uint8_t head[] = { 0x30, 0x77, 0x02, 0x01, 0x01,
					0x04, 0x20 };
	static const uint8_t curve[] = { 0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86,
					 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
					 0xa1, 0x44, 0x03, 0x42, 0x00 };
	memcpy ( der, head, sizeof ( head ) );
	memcpy ( der + sizeof ( head ), d, KURRENT_SCALAR_LEN );
	memcpy ( der + sizeof ( head ) + KURRENT_SCALAR_LEN, curve,
		 sizeof ( curve ) );
	memcpy ( der + sizeof ( head ) + KURRENT_SCALAR_LEN + sizeof ( curve ),
		 point, 1 + KURRENT_POINT_LEN );
}
#define KURRENT_DER_LEN ( 7 + KURRENT_SCALAR_LEN + 17 + 1 + KURRENT_POINT_LEN )

/** One DER INTEGER of the signature, left-padded to 32 bytes */
static int kurrent_der_int ( const uint8_t **p, const uint8_t *end,
			     uint8_t *out ) {
	size_t len;

	if ( ( end - *p ) < 2 || ( *p )[0] != 0x02 )
		return -EINVAL;
	len = ( *p )[1];
	*p += 2;
	if ( ( len > 33 ) || ( ( size_t ) ( end - *p ) < len ) )
		return -EINVAL;
	while ( len > KURRENT_SCALAR_LEN ) {
		if ( **p != 0 )
			return -EINVAL;
		( *p )++;
		len--;
	}
	memset ( out, 0, KURRENT_SCALAR_LEN - len );
	memcpy ( out + KURRENT_SCALAR_LEN - len, *p, len );
	*p += len;
	return 0;
}

/** "kurrent-keygen" / "kurrent-sign" options */
struct kurrent_options {
	/** Setting to store the result in */
	struct named_setting setting;
};

/** Option list */
static struct option_descriptor kurrent_opts[] = {
	OPTION_DESC ( "set", 's', required_argument, struct kurrent_options,
		      setting, parse_autovivified_setting ),
};

/** "kurrent-keygen" descriptor */
static struct command_descriptor kurrent_keygen_cmd =
	COMMAND_DESC ( struct kurrent_options, kurrent_opts, 0, 0,
		       "[--set <setting>]" );

/** "kurrent-sign" descriptor */
static struct command_descriptor kurrent_sign_cmd =
	COMMAND_DESC ( struct kurrent_options, kurrent_opts, 2, 2,
		       "[--set <setting>] <nonce> <mac>" );

/** Default setting names */
static int kurrent_default_setting ( struct kurrent_options *opts,
				     const char *name ) {
	if ( opts->setting.settings )
		return 0;
	return parse_autovivified_setting ( ( char * ) name,
					    &opts->setting );
}

/** The device key: read, or generated once and stored */
static int kurrent_load_key ( uint8_t *d, int create ) {
	int rc;

	rc = kurrent_read_key ( d );
	if ( ( rc == -ENOENT ) && create )
		rc = kurrent_new_key ( d );
	return rc;
}

static int kurrent_keygen_exec ( int argc, char **argv ) {
	struct kurrent_options opts;
	uint8_t d[KURRENT_SCALAR_LEN];
	uint8_t point[ 1 + KURRENT_POINT_LEN ];
	char name[] = "kurrent-pubkey";
	int rc;

	if ( ( rc = parse_options ( argc, argv, &kurrent_keygen_cmd,
				    &opts ) ) != 0 )
		return rc;
	if ( ( rc = kurrent_default_setting ( &opts, name ) ) != 0 )
		return rc;
	if ( ! efi_systab ) {
		printf ( "kurrent-keygen: EFI firmware only\n" );
		return -ENOTSUP;
	}
	if ( ( rc = kurrent_load_key ( d, 1 ) ) != 0 ) {
		printf ( "kurrent-keygen: no device key: %s\n",
			 strerror ( rc ) );
		goto out;
	}
	if ( ( rc = kurrent_public ( d, point ) ) != 0 )
		goto out;
	rc = kurrent_store_hex ( &opts.setting, point, sizeof ( point ) );
 out:
	kurrent_wipe ( d, sizeof ( d ) );
	return rc;
}

static int kurrent_sign_exec ( int argc, char **argv ) {
	struct kurrent_options opts;
	uint8_t d[KURRENT_SCALAR_LEN];
	uint8_t point[ 1 + KURRENT_POINT_LEN ];
	uint8_t der[KURRENT_DER_LEN];
	uint8_t message[ 32 + 6 ];
	uint8_t ctx[SHA256_CTX_SIZE];
	uint8_t value[SHA256_DIGEST_SIZE];
	uint8_t rs[ 2 * KURRENT_SCALAR_LEN ];
	struct asn1_cursor key = { .data = der, .len = sizeof ( der ) };
	struct asn1_builder sig = { .data = NULL, .len = 0 };
	const uint8_t *p;
	const uint8_t *end;
	char name[] = "kurrent-sig";
	int rc;

	if ( ( rc = parse_options ( argc, argv, &kurrent_sign_cmd,
				    &opts ) ) != 0 )
		return rc;
	if ( ( rc = kurrent_default_setting ( &opts, name ) ) != 0 )
		return rc;
	if ( ( kurrent_parse_hex ( argv[optind], message, 32, 0 ) != 0 ) ||
	     ( kurrent_parse_hex ( argv[ optind + 1 ], message + 32, 6,
				   1 ) != 0 ) ) {
		printf ( "kurrent-sign: want <nonce: 64 hex digits> "
			 "<mac: aa:bb:cc:dd:ee:ff>\n" );
		return -EINVAL;
	}
	if ( ! efi_systab ) {
		printf ( "kurrent-sign: EFI firmware only\n" );
		return -ENOTSUP;
	}
	/* Never create a key here: a signature needs the reported one */
	if ( ( rc = kurrent_load_key ( d, 0 ) ) != 0 ) {
		printf ( "kurrent-sign: no device key: %s\n",
			 strerror ( rc ) );
		goto out;
	}
	if ( ( rc = kurrent_public ( d, point ) ) != 0 )
		goto out;
	kurrent_der_key ( der, d, point );

	digest_init ( &sha256_algorithm, ctx );
	digest_update ( &sha256_algorithm, ctx, message, sizeof ( message ) );
	digest_final ( &sha256_algorithm, ctx, value );
	if ( ( rc = pubkey_sign ( &ecdsa_algorithm, &key, &sha256_algorithm,
				  value, &sig ) ) != 0 )
		goto out;

	/* SEQUENCE { INTEGER r, INTEGER s } -> r||s */
	rc = -EINVAL;
	if ( ( ! sig.data ) || ( sig.len < 8 ) )
		goto out;
	p = sig.data;
	end = ( p + sig.len );
	if ( ( p[0] != 0x30 ) || ( p[1] != ( sig.len - 2 ) ) )
		goto out;
	p += 2;
	if ( ( rc = kurrent_der_int ( &p, end, rs ) ) != 0 )
		goto out;
	if ( ( rc = kurrent_der_int ( &p, end,
				      rs + KURRENT_SCALAR_LEN ) ) != 0 )
		goto out;
	rc = kurrent_store_hex ( &opts.setting, rs, sizeof ( rs ) );
 out:
	free ( sig.data );
	kurrent_wipe ( d, sizeof ( d ) );
	kurrent_wipe ( der, sizeof ( der ) );
	return rc;
}

struct command kurrent_keygen_command __command ( kurrent_keygen ) = {
	.name = "kurrent-keygen",
	.exec = kurrent_keygen_exec,
};

struct command kurrent_sign_command __command ( kurrent_sign ) = {
	.name = "kurrent-sign",
	.exec = kurrent_sign_exec,
};
