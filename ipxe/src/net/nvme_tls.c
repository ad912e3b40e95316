/*
 * TLS 1.3 with an external pre-shared key, for NVMe/TCP.
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
#define ERRFILE_nvme_tls ( ERRFILE_NET | 0x00fd0000 )

/** @file
 *
 * The TLS client NVMe/TCP requires (NVMe/TCP transport specification
 * 1.0, section 3.6; RFC 8446): TLS 1.3 only, TLS_AES_128_GCM_SHA256,
 * an external PSK with psk_dhe_ke over X25519 (forward secrecy), no
 * certificates.  A separate, small client rather than a mode of iPXE's
 * TLS 1.2 client (net/tls.c), so the HTTPS path that fetches the boot
 * script is not touched.
 *
 * The PSK: the setting tls-psk holds the configured PSK in the
 * interchange form NVMeTLSkey-1:<hh>:<base64(key || crc32)>: as
 * /boot-vars gives it.  The TLS PSK is the retained PSK, derived as
 * libnvme and the kernel do (HKDF-Extract with no salt, then
 * HKDF-Expand-Label(.., "HostNQN", <host NQN>)), offered under the
 * version 0 identity "NVMe0R01 <host NQN> <subsystem NQN>".
 *
 * Nothing is sent in plaintext except the ClientHello, and the NVMe
 * layer above sees no byte before the server's Finished has been
 * verified.  A server that does not speak TLS, does not know the
 * identity, or picks anything else fails the connection.
 */

#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <byteswap.h>
#include <ipxe/refcnt.h>
#include <ipxe/interface.h>
#include <ipxe/xfer.h>
#include <ipxe/iobuf.h>
#include <ipxe/open.h>
#include <ipxe/socket.h>
#include <ipxe/settings.h>
#include <ipxe/crypto.h>
#include <ipxe/sha256.h>
#include <ipxe/aes.h>
#include <ipxe/gcm.h>
#include <ipxe/hmac.h>
#include <ipxe/hkdf.h>
#include <ipxe/x25519.h>
#include <ipxe/rbg.h>
#include <ipxe/errortab.h>
#include "nvme_tcp.h"

#define EINFO_EACCES_PSK \
	__einfo_uniqify ( EINFO_EACCES, 0x01, \
			  "NVMe/TCP TLS: target refused the PSK identity" )
#define EACCES_PSK __einfo_error ( EINFO_EACCES_PSK )
#define EINFO_EACCES_ALERT \
	__einfo_uniqify ( EINFO_EACCES, 0x02, \
			  "NVMe/TCP TLS: handshake refused by target" )
#define EACCES_ALERT __einfo_error ( EINFO_EACCES_ALERT )
#define EINFO_EACCES_FINISHED \
	__einfo_uniqify ( EINFO_EACCES, 0x03, \
			  "NVMe/TCP TLS: target does not hold the PSK" )
#define EACCES_FINISHED __einfo_error ( EINFO_EACCES_FINISHED )
#define EINFO_EPROTO_TLS \
	__einfo_uniqify ( EINFO_EPROTO, 0x01, \
			  "NVMe/TCP TLS: port does not speak TLS 1.3" )
#define EPROTO_TLS __einfo_error ( EINFO_EPROTO_TLS )
#define EINFO_ECONNREFUSED_TLS \
	__einfo_uniqify ( EINFO_ECONNREFUSED, 0x01, \
			  "NVMe/TCP TLS: no TLS on port, or PSK identity unknown" )
#define ECONNREFUSED_TLS __einfo_error ( EINFO_ECONNREFUSED_TLS )
#define EINFO_EINVAL_PSK \
	__einfo_uniqify ( EINFO_EINVAL, 0x01, \
			  "tls-psk is not set or not NVMeTLSkey-1" )
#define EINVAL_PSK __einfo_error ( EINFO_EINVAL_PSK )

struct errortab nvme_tls_errors[] __errortab = {
	__einfo_errortab ( EINFO_EACCES_PSK ),
	__einfo_errortab ( EINFO_EACCES_ALERT ),
	__einfo_errortab ( EINFO_EACCES_FINISHED ),
	__einfo_errortab ( EINFO_EPROTO_TLS ),
	__einfo_errortab ( EINFO_ECONNREFUSED_TLS ),
	__einfo_errortab ( EINFO_EINVAL_PSK ),
};

/** TLS PSK setting (interchange form) */
const struct setting nvme_tls_psk_setting __setting ( SETTING_SANBOOT_EXTRA,
						      tls-psk ) = {
	.name = "tls-psk",
	.description = "NVMe/TCP TLS PSK (interchange form)",
	.type = &setting_type_string,
};

/* Record and handshake types */
#define TLS13_CHANGE_CIPHER 20
#define TLS13_ALERT 21
#define TLS13_HANDSHAKE 22
#define TLS13_APPDATA 23
#define TLS13_CLIENT_HELLO 1
#define TLS13_SERVER_HELLO 2
#define TLS13_NEW_SESSION_TICKET 4
#define TLS13_ENCRYPTED_EXTENSIONS 8
#define TLS13_FINISHED 20
#define TLS13_KEY_UPDATE 24

/* Extensions */
#define TLS13_EXT_SUPPORTED_GROUPS 0x000a
#define TLS13_EXT_PRE_SHARED_KEY 0x0029
#define TLS13_EXT_SUPPORTED_VERSIONS 0x002b
#define TLS13_EXT_PSK_MODES 0x002d
#define TLS13_EXT_KEY_SHARE 0x0033
#define TLS13_GROUP_X25519 0x001d
#define TLS13_AES_128_GCM_SHA256 0x1301

/** Largest record body we accept (RFC 8446 5.2) */
#define TLS13_MAX_RECORD ( 16384 + 256 )
/** Largest plaintext per record */
#define TLS13_MAX_PLAIN 16384
/** Hash length (SHA-256) */
#define TLS13_HASH 32
/** AES-128-GCM key, IV and tag lengths */
#define TLS13_KEY 16
#define TLS13_IV 12
#define TLS13_TAG 16
/** AES-GCM context size (as GCM_CIPHER() in gcm.h computes it) */
#define TLS13_GCM_CTX ( sizeof ( struct gcm_context ) + AES_CTX_SIZE )

/** One direction's traffic keys */
struct tls13_keys {
	/** Traffic secret */
	uint8_t secret[TLS13_HASH];
	/** Cipher context */
	uint8_t ctx[TLS13_GCM_CTX] __attribute__ (( aligned ( 16 ) ));
	/** Static IV */
	uint8_t iv[TLS13_IV];
	/** Record sequence number */
	uint64_t seq;
	/** Keys are set */
	int on;
};

/** Handshake progress */
enum tls13_state {
	TLS13_START = 0,
	TLS13_WAIT_SH,
	TLS13_WAIT_EE,
	TLS13_WAIT_FINISHED,
	TLS13_CONNECTED,
};

/** A TLS 1.3 PSK session */
struct tls13_session {
	/** Reference count */
	struct refcnt refcnt;
	/** Plaintext stream (the NVMe queue) */
	struct interface plain;
	/** Ciphertext stream (the TCP socket) */
	struct interface cipher;
	/** State */
	enum tls13_state state;
	/** PSK identity */
	char *identity;
	/** TLS PSK (the retained PSK) */
	uint8_t psk[TLS13_HASH];
	/** Our legacy session ID (the ServerHello must echo it) */
	uint8_t sid[32];
	/** X25519 private key */
	uint8_t x25519[32];
	/** Transcript hash context */
	uint8_t transcript[SHA256_CTX_SIZE];
	/** Handshake secret */
	uint8_t hs[TLS13_HASH];
	/** Server handshake traffic secret (for its Finished) */
	uint8_t s_hs[TLS13_HASH];
	/** Client handshake traffic secret (for our Finished) */
	uint8_t c_hs[TLS13_HASH];
	/** Transmit keys */
	struct tls13_keys tx;
	/** Receive keys */
	struct tls13_keys rx;
	/** Record being received (header and body) */
	uint8_t rec[5 + TLS13_MAX_RECORD];
	/** Bytes of the record received */
	size_t rec_len;
	/** Handshake messages not yet complete */
	uint8_t *hsbuf;
	/** Bytes in hsbuf */
	size_t hs_len;
};

static void tls13_close ( struct tls13_session *tls, int rc );

/**
 * HKDF-Expand-Label (RFC 8446 7.1)
 */
static void tls13_expand_label ( const void *secret, const char *label,
				 const void *context, size_t context_len,
				 void *out, size_t len ) {
	uint8_t info[ 2 + 1 + 6 + 64 + 1 + TLS13_HASH ];
	size_t label_len = strlen ( label );
	uint8_t *p = info;

	*(p++) = ( len >> 8 );
	*(p++) = ( len & 0xff );
	*(p++) = ( 6 + label_len );
	memcpy ( p, "tls13 ", 6 );
	p += 6;
	memcpy ( p, label, label_len );
	p += label_len;
	*(p++) = context_len;
	memcpy ( p, context, context_len );
	p += context_len;
	hkdf_expand ( &sha256_algorithm, secret, info, ( p - info ),
		      out, len );
}

/**
 * Current transcript hash
 */
static void tls13_transcript ( struct tls13_session *tls, void *out ) {
	uint8_t ctx[SHA256_CTX_SIZE];

	memcpy ( ctx, tls->transcript, sizeof ( ctx ) );
	digest_final ( &sha256_algorithm, ctx, out );
}

/**
 * Derive-Secret (RFC 8446 7.1): over the transcript so far, or over
 * the empty string when @a empty is set
 */
static void tls13_derive ( struct tls13_session *tls, const void *secret,
			   const char *label, int empty, void *out ) {
	uint8_t hash[TLS13_HASH];
	uint8_t ctx[SHA256_CTX_SIZE];

	if ( empty ) {
		digest_init ( &sha256_algorithm, ctx );
		digest_final ( &sha256_algorithm, ctx, hash );
	} else {
		tls13_transcript ( tls, hash );
	}
	tls13_expand_label ( secret, label, hash, sizeof ( hash ),
			     out, TLS13_HASH );
}

/**
 * Set one direction's keys from a traffic secret
 */
static int tls13_set_keys ( struct tls13_keys *keys, const void *secret ) {
	uint8_t key[TLS13_KEY];
	int rc;

	memcpy ( keys->secret, secret, TLS13_HASH );
	tls13_expand_label ( secret, "key", NULL, 0, key, sizeof ( key ) );
	tls13_expand_label ( secret, "iv", NULL, 0, keys->iv,
			     sizeof ( keys->iv ) );
	rc = cipher_setkey ( &aes_gcm_algorithm, keys->ctx, key,
			     sizeof ( key ) );
	memset ( key, 0, sizeof ( key ) );
	keys->seq = 0;
	keys->on = 1;
	return rc;
}

/**
 * Per-record nonce: the static IV XOR the sequence number
 */
static void tls13_nonce ( struct tls13_keys *keys, uint8_t *nonce ) {
	unsigned int i;

	memcpy ( nonce, keys->iv, TLS13_IV );
	for ( i = 0 ; i < 8 ; i++ )
		nonce[ TLS13_IV - 1 - i ] ^= ( ( keys->seq >> ( 8 * i ) ) &
						 0xff );
}

/**
 * Send one record: plaintext, or protected once keys are set
 */
static int tls13_send_record ( struct tls13_session *tls, unsigned int type,
			       const void *data, size_t len ) {
	struct io_buffer *iobuf;
	uint8_t nonce[TLS13_IV];
	uint8_t *hdr;
	uint8_t *body;
	size_t body_len;
	int rc;

	body_len = ( tls->tx.on ? ( len + 1 + TLS13_TAG ) : len );
	iobuf = xfer_alloc_iob ( &tls->cipher, ( 5 + body_len ) );
	if ( ! iobuf )
		return -ENOMEM;
	hdr = iob_put ( iobuf, 5 );
	hdr[0] = ( tls->tx.on ? TLS13_APPDATA : type );
	hdr[1] = 0x03;
	hdr[2] = ( tls->tx.on ? 0x03 : 0x01 );
	hdr[3] = ( body_len >> 8 );
	hdr[4] = ( body_len & 0xff );
	body = iob_put ( iobuf, body_len );
	memcpy ( body, data, len );
	if ( tls->tx.on ) {
		body[len] = type;
		tls13_nonce ( &tls->tx, nonce );
		if ( ( rc = cipher_setiv ( &aes_gcm_algorithm, tls->tx.ctx,
					   nonce, sizeof ( nonce ) ) ) != 0 ) {
			free_iob ( iobuf );
			return rc;
		}
		cipher_encrypt ( &aes_gcm_algorithm, tls->tx.ctx, hdr, NULL, 5 );
		cipher_encrypt ( &aes_gcm_algorithm, tls->tx.ctx, body, body,
				 ( len + 1 ) );
		cipher_auth ( &aes_gcm_algorithm, tls->tx.ctx,
			      ( body + len + 1 ) );
		tls->tx.seq++;
	}
	return xfer_deliver_iob ( &tls->cipher, iobuf );
}

/**
 * Send the ClientHello
 */
static int tls13_client_hello ( struct tls13_session *tls ) {
	size_t id_len = strlen ( tls->identity );
	uint8_t public[32];
	uint8_t early[TLS13_HASH];
	uint8_t binder_key[TLS13_HASH];
	uint8_t finished_key[TLS13_HASH];
	uint8_t hash[TLS13_HASH];
	uint8_t ctx[SHA256_CTX_SIZE];
	uint8_t hmac[ hmac_ctxsize ( &sha256_algorithm ) ];
	uint8_t *msg;
	uint8_t *p;
	uint8_t *ext;
	size_t len;
	int rc;

	msg = malloc ( 512 + id_len );
	if ( ! msg )
		return -ENOMEM;
	p = msg + 4;

	/* Legacy version, random, legacy session ID (32 bytes: middlebox
	 * compatibility mode, as every TLS 1.3 client sends)
	 */
	*(p++) = 0x03;
	*(p++) = 0x03;
	if ( ( rc = rbg_generate ( NULL, 0, 0, p, 32 ) ) != 0 )
		goto out;
	p += 32;
	*(p++) = 32;
	if ( ( rc = rbg_generate ( NULL, 0, 0, tls->sid,
				   sizeof ( tls->sid ) ) ) != 0 )
		goto out;
	memcpy ( p, tls->sid, sizeof ( tls->sid ) );
	p += 32;
	/* One cipher suite, no compression */
	*(p++) = 0;
	*(p++) = 2;
	*(p++) = ( TLS13_AES_128_GCM_SHA256 >> 8 );
	*(p++) = ( TLS13_AES_128_GCM_SHA256 & 0xff );
	*(p++) = 1;
	*(p++) = 0;

	/* Extensions (pre_shared_key last, as RFC 8446 4.2.11 requires) */
	ext = p;
	p += 2;
	*(p++) = 0x00; *(p++) = 0x2b; *(p++) = 0; *(p++) = 3;
	*(p++) = 2; *(p++) = 0x03; *(p++) = 0x04;
	*(p++) = 0x00; *(p++) = 0x0a; *(p++) = 0; *(p++) = 4;
	*(p++) = 0; *(p++) = 2; *(p++) = 0x00; *(p++) = 0x1d;
	*(p++) = 0x00; *(p++) = 0x2d; *(p++) = 0; *(p++) = 2;
	*(p++) = 1; *(p++) = 1 /* psk_dhe_ke only */;
	if ( ( rc = rbg_generate ( NULL, 0, 0, tls->x25519,
				   sizeof ( tls->x25519 ) ) ) != 0 )
		goto out;
	if ( ( rc = exchange_share ( &x25519_algorithm, tls->x25519,
				     public ) ) != 0 )
		goto out;
	*(p++) = 0x00; *(p++) = 0x33; *(p++) = 0; *(p++) = 38;
	*(p++) = 0; *(p++) = 36; *(p++) = 0x00; *(p++) = 0x1d;
	*(p++) = 0; *(p++) = 32;
	memcpy ( p, public, 32 );
	p += 32;
	len = ( 2 + ( 2 + id_len + 4 ) + 2 + 1 + TLS13_HASH );
	*(p++) = 0x00; *(p++) = 0x29;
	*(p++) = ( len >> 8 ); *(p++) = ( len & 0xff );
	len = ( 2 + id_len + 4 );
	*(p++) = ( len >> 8 ); *(p++) = ( len & 0xff );
	*(p++) = ( id_len >> 8 ); *(p++) = ( id_len & 0xff );
	memcpy ( p, tls->identity, id_len );
	p += id_len;
	*(p++) = 0; *(p++) = 0; *(p++) = 0; *(p++) = 0;
	/* Lengths cover the binders too */
	len = ( ( p + 2 + 1 + TLS13_HASH ) - ( ext + 2 ) );
	ext[0] = ( len >> 8 );
	ext[1] = ( len & 0xff );
	len = ( ( p + 2 + 1 + TLS13_HASH ) - ( msg + 4 ) );
	msg[0] = TLS13_CLIENT_HELLO;
	msg[1] = ( len >> 16 );
	msg[2] = ( ( len >> 8 ) & 0xff );
	msg[3] = ( len & 0xff );

	/* Binder: HMAC over the ClientHello up to the binders */
	hkdf_extract ( &sha256_algorithm, NULL, 0, tls->psk, sizeof ( tls->psk ),
		       early );
	tls13_derive ( tls, early, "ext binder", 1, binder_key );
	tls13_expand_label ( binder_key, "finished", NULL, 0, finished_key,
			     sizeof ( finished_key ) );
	digest_init ( &sha256_algorithm, ctx );
	digest_update ( &sha256_algorithm, ctx, msg, ( p - msg ) );
	digest_final ( &sha256_algorithm, ctx, hash );
	hmac_init ( &sha256_algorithm, hmac, finished_key,
		    sizeof ( finished_key ) );
	hmac_update ( &sha256_algorithm, hmac, hash, sizeof ( hash ) );
	*(p++) = 0; *(p++) = ( 1 + TLS13_HASH );
	*(p++) = TLS13_HASH;
	hmac_final ( &sha256_algorithm, hmac, p );
	p += TLS13_HASH;

	/* Early secret's successor: the salt of the handshake secret */
	tls13_derive ( tls, early, "derived", 1, tls->hs );

	digest_init ( &sha256_algorithm, tls->transcript );
	digest_update ( &sha256_algorithm, tls->transcript, msg, ( p - msg ) );
	rc = tls13_send_record ( tls, TLS13_HANDSHAKE, msg, ( p - msg ) );
	tls->state = TLS13_WAIT_SH;

 out:
	memset ( early, 0, sizeof ( early ) );
	memset ( binder_key, 0, sizeof ( binder_key ) );
	memset ( finished_key, 0, sizeof ( finished_key ) );
	free ( msg );
	return rc;
}

/** Read a big-endian 16-bit value */
static inline unsigned int tls13_u16 ( const uint8_t *p ) {
	return ( ( p[0] << 8 ) | p[1] );
}

/**
 * Handle ServerHello
 */
static int tls13_server_hello ( struct tls13_session *tls,
				const uint8_t *body, size_t len ) {
	static const uint8_t hrr[32] = {
		0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11,
		0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
		0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e,
		0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
	};
	const uint8_t *end = ( body + len );
	const uint8_t *p = body;
	const uint8_t *share = NULL;
	unsigned int version = 0;
	int psk_selected = 0;
	uint8_t shared[32];
	uint8_t secret[TLS13_HASH];
	size_t sid_len;
	size_t ext_len;
	unsigned int type;
	size_t elen;
	int rc;

	if ( len < ( 2 + 32 + 1 ) )
		return -EPROTO_TLS;
	if ( memcmp ( ( p + 2 ), hrr, sizeof ( hrr ) ) == 0 ) {
		DBGC ( tls, "NVMeTLS %p HelloRetryRequest\n", tls );
		return -EACCES_ALERT;
	}
	p += ( 2 + 32 );
	sid_len = *(p++);
	if ( ( p + sid_len + 2 + 1 + 2 ) > end )
		return -EPROTO_TLS;
	if ( ( sid_len != sizeof ( tls->sid ) ) ||
	     ( memcmp ( p, tls->sid, sizeof ( tls->sid ) ) != 0 ) )
		return -EPROTO_TLS;
	p += sid_len;
	if ( tls13_u16 ( p ) != TLS13_AES_128_GCM_SHA256 )
		return -EPROTO_TLS;
	p += 3;
	ext_len = tls13_u16 ( p );
	p += 2;
	if ( ( p + ext_len ) != end )
		return -EPROTO_TLS;
	while ( p < end ) {
		if ( ( p + 4 ) > end )
			return -EPROTO_TLS;
		type = tls13_u16 ( p );
		elen = tls13_u16 ( p + 2 );
		p += 4;
		if ( ( p + elen ) > end )
			return -EPROTO_TLS;
		switch ( type ) {
		case TLS13_EXT_SUPPORTED_VERSIONS:
			if ( elen == 2 )
				version = tls13_u16 ( p );
			break;
		case TLS13_EXT_KEY_SHARE:
			if ( ( elen == 36 ) &&
			     ( tls13_u16 ( p ) == TLS13_GROUP_X25519 ) &&
			     ( tls13_u16 ( p + 2 ) == 32 ) )
				share = ( p + 4 );
			break;
		case TLS13_EXT_PRE_SHARED_KEY:
			if ( ( elen == 2 ) && ( tls13_u16 ( p ) == 0 ) )
				psk_selected = 1;
			break;
		default:
			break;
		}
		p += elen;
	}
	if ( version != 0x0304 ) {
		DBGC ( tls, "NVMeTLS %p server version %#04x\n", tls, version );
		return -EPROTO_TLS;
	}
	if ( ! psk_selected )
		return -EACCES_PSK;
	if ( ! share )
		return -EPROTO_TLS;

	/* Handshake secret from the X25519 shared secret */
	if ( ( rc = exchange_agree ( &x25519_algorithm, tls->x25519, share,
				     shared ) ) != 0 )
		return rc;
	memset ( tls->x25519, 0, sizeof ( tls->x25519 ) );
	hkdf_extract ( &sha256_algorithm, tls->hs, TLS13_HASH, shared,
		       sizeof ( shared ), secret );
	memcpy ( tls->hs, secret, sizeof ( tls->hs ) );
	memset ( shared, 0, sizeof ( shared ) );
	memset ( secret, 0, sizeof ( secret ) );
	tls13_derive ( tls, tls->hs, "c hs traffic", 0, tls->c_hs );
	tls13_derive ( tls, tls->hs, "s hs traffic", 0, tls->s_hs );
	if ( ( rc = tls13_set_keys ( &tls->rx, tls->s_hs ) ) != 0 )
		return rc;
	tls->state = TLS13_WAIT_EE;
	return 0;
}

/**
 * Handle the server's Finished: verify it, send ours, switch to the
 * application traffic keys
 */
static int tls13_finished ( struct tls13_session *tls, const uint8_t *body,
			    size_t len, const uint8_t *msg, size_t msg_len ) {
	uint8_t key[TLS13_HASH];
	uint8_t hash[TLS13_HASH];
	uint8_t mac[TLS13_HASH];
	uint8_t derived[TLS13_HASH];
	uint8_t master[TLS13_HASH];
	uint8_t zero[TLS13_HASH];
	uint8_t c_ap[TLS13_HASH];
	uint8_t s_ap[TLS13_HASH];
	uint8_t fin[4 + TLS13_HASH];
	uint8_t hmac[ hmac_ctxsize ( &sha256_algorithm ) ];
	int rc;

	/* Server Finished over the transcript up to EncryptedExtensions */
	tls13_expand_label ( tls->s_hs, "finished", NULL, 0, key,
			     sizeof ( key ) );
	tls13_transcript ( tls, hash );
	hmac_init ( &sha256_algorithm, hmac, key, sizeof ( key ) );
	hmac_update ( &sha256_algorithm, hmac, hash, sizeof ( hash ) );
	hmac_final ( &sha256_algorithm, hmac, mac );
	if ( ( len != sizeof ( mac ) ) ||
	     ( memcmp ( body, mac, sizeof ( mac ) ) != 0 ) ) {
		DBGC ( tls, "NVMeTLS %p server Finished does not verify\n",
		       tls );
		return -EACCES_FINISHED;
	}
	digest_update ( &sha256_algorithm, tls->transcript, msg, msg_len );

	/* Application secrets over the transcript up to server Finished */
	tls13_derive ( tls, tls->hs, "derived", 1, derived );
	memset ( zero, 0, sizeof ( zero ) );
	hkdf_extract ( &sha256_algorithm, derived, sizeof ( derived ), zero,
		       sizeof ( zero ), master );
	tls13_derive ( tls, master, "c ap traffic", 0, c_ap );
	tls13_derive ( tls, master, "s ap traffic", 0, s_ap );

	/* Our Finished, under the client handshake keys */
	tls13_expand_label ( tls->c_hs, "finished", NULL, 0, key,
			     sizeof ( key ) );
	tls13_transcript ( tls, hash );
	fin[0] = TLS13_FINISHED;
	fin[1] = 0;
	fin[2] = 0;
	fin[3] = TLS13_HASH;
	hmac_init ( &sha256_algorithm, hmac, key, sizeof ( key ) );
	hmac_update ( &sha256_algorithm, hmac, hash, sizeof ( hash ) );
	hmac_final ( &sha256_algorithm, hmac, ( fin + 4 ) );
	if ( ( rc = tls13_set_keys ( &tls->tx, tls->c_hs ) ) != 0 )
		goto out;
	if ( ( rc = tls13_send_record ( tls, TLS13_HANDSHAKE, fin,
					sizeof ( fin ) ) ) != 0 )
		goto out;
	if ( ( ( rc = tls13_set_keys ( &tls->tx, c_ap ) ) != 0 ) ||
	     ( ( rc = tls13_set_keys ( &tls->rx, s_ap ) ) != 0 ) )
		goto out;
	tls->state = TLS13_CONNECTED;
	DBGC ( tls, "NVMeTLS %p connected\n", tls );

 out:
	memset ( key, 0, sizeof ( key ) );
	memset ( derived, 0, sizeof ( derived ) );
	memset ( master, 0, sizeof ( master ) );
	memset ( c_ap, 0, sizeof ( c_ap ) );
	memset ( s_ap, 0, sizeof ( s_ap ) );
	memset ( tls->hs, 0, sizeof ( tls->hs ) );
	memset ( tls->c_hs, 0, sizeof ( tls->c_hs ) );
	memset ( tls->s_hs, 0, sizeof ( tls->s_hs ) );
	return rc;
}

/**
 * Handle a KeyUpdate: next receive secret; answer one that asks
 */
static int tls13_key_update ( struct tls13_session *tls, const uint8_t *body,
			      size_t len ) {
	static const uint8_t answer[5] = { TLS13_KEY_UPDATE, 0, 0, 1, 0 };
	uint8_t next[TLS13_HASH];
	int rc;

	if ( ( len != 1 ) || ( body[0] > 1 ) )
		return -EPROTO_TLS;
	tls13_expand_label ( tls->rx.secret, "traffic upd", NULL, 0, next,
			     sizeof ( next ) );
	if ( ( rc = tls13_set_keys ( &tls->rx, next ) ) != 0 )
		return rc;
	if ( body[0] ) {
		if ( ( rc = tls13_send_record ( tls, TLS13_HANDSHAKE, answer,
						sizeof ( answer ) ) ) != 0 )
			return rc;
		tls13_expand_label ( tls->tx.secret, "traffic upd", NULL, 0,
				     next, sizeof ( next ) );
		if ( ( rc = tls13_set_keys ( &tls->tx, next ) ) != 0 )
			return rc;
	}
	memset ( next, 0, sizeof ( next ) );
	return 0;
}

/**
 * Handle handshake bytes: whole messages, in order
 */
static int tls13_handshake ( struct tls13_session *tls, const void *data,
			     size_t len ) {
	uint8_t *buf;
	uint8_t *msg;
	size_t msg_len;
	size_t used = 0;
	unsigned int type;
	int rc = 0;

	buf = realloc ( tls->hsbuf, ( tls->hs_len + len ) );
	if ( ! buf )
		return -ENOMEM;
	tls->hsbuf = buf;
	memcpy ( ( buf + tls->hs_len ), data, len );
	tls->hs_len += len;

	while ( ( tls->hs_len - used ) >= 4 ) {
		msg = ( buf + used );
		msg_len = ( ( msg[1] << 16 ) | ( msg[2] << 8 ) | msg[3] );
		if ( msg_len > TLS13_MAX_RECORD )
			return -EPROTO_TLS;
		if ( ( tls->hs_len - used ) < ( 4 + msg_len ) )
			break;
		used += ( 4 + msg_len );
		type = msg[0];
		switch ( tls->state ) {
		case TLS13_WAIT_SH:
			if ( type != TLS13_SERVER_HELLO )
				return -EPROTO_TLS;
			digest_update ( &sha256_algorithm, tls->transcript,
					msg, ( 4 + msg_len ) );
			if ( ( rc = tls13_server_hello ( tls, ( msg + 4 ),
							 msg_len ) ) != 0 )
				return rc;
			/* Later messages come under the new keys */
			if ( used != tls->hs_len )
				return -EPROTO_TLS;
			break;
		case TLS13_WAIT_EE:
			if ( type != TLS13_ENCRYPTED_EXTENSIONS )
				return -EPROTO_TLS;
			digest_update ( &sha256_algorithm, tls->transcript,
					msg, ( 4 + msg_len ) );
			tls->state = TLS13_WAIT_FINISHED;
			break;
		case TLS13_WAIT_FINISHED:
			/* A certificate or its request has no place here */
			if ( type != TLS13_FINISHED )
				return -EPROTO_TLS;
			if ( ( rc = tls13_finished ( tls, ( msg + 4 ), msg_len,
						     msg, ( 4 + msg_len ) ) ) != 0 )
				return rc;
			if ( used != tls->hs_len )
				return -EPROTO_TLS;
			xfer_window_changed ( &tls->plain );
			break;
		case TLS13_CONNECTED:
			if ( type == TLS13_NEW_SESSION_TICKET )
				break;
			if ( type == TLS13_KEY_UPDATE ) {
				if ( ( rc = tls13_key_update ( tls, ( msg + 4 ),
							       msg_len ) ) != 0 )
					return rc;
				break;
			}
			return -EPROTO_TLS;
		default:
			return -EPROTO_TLS;
		}
	}
	memmove ( buf, ( buf + used ), ( tls->hs_len - used ) );
	tls->hs_len -= used;
	return 0;
}

/**
 * Handle one complete record
 */
static int tls13_record ( struct tls13_session *tls ) {
	uint8_t *hdr = tls->rec;
	uint8_t *body = ( tls->rec + 5 );
	size_t len = ( tls->rec_len - 5 );
	uint8_t nonce[TLS13_IV];
	uint8_t tag[TLS13_TAG];
	struct io_buffer *iobuf;
	unsigned int type = hdr[0];
	int rc;

	if ( type == TLS13_CHANGE_CIPHER ) {
		/* Middlebox compatibility: one byte, ignored, before Finished */
		if ( ( tls->state == TLS13_CONNECTED ) || ( len != 1 ) ||
		     ( body[0] != 1 ) )
			return -EPROTO_TLS;
		return 0;
	}
	if ( ! tls->rx.on ) {
		if ( type == TLS13_ALERT ) {
			DBGC ( tls, "NVMeTLS %p alert %d/%d\n", tls,
			       ( len > 0 ? body[0] : 0 ),
			       ( len > 1 ? body[1] : 0 ) );
			return -EACCES_ALERT;
		}
		if ( type != TLS13_HANDSHAKE )
			return -EPROTO_TLS;
		return tls13_handshake ( tls, body, len );
	}

	/* Protected record */
	if ( ( type != TLS13_APPDATA ) || ( len < ( 1 + TLS13_TAG ) ) )
		return -EPROTO_TLS;
	len -= TLS13_TAG;
	tls13_nonce ( &tls->rx, nonce );
	if ( ( rc = cipher_setiv ( &aes_gcm_algorithm, tls->rx.ctx, nonce,
				   sizeof ( nonce ) ) ) != 0 )
		return rc;
	cipher_decrypt ( &aes_gcm_algorithm, tls->rx.ctx, hdr, NULL, 5 );
	cipher_decrypt ( &aes_gcm_algorithm, tls->rx.ctx, body, body, len );
	cipher_auth ( &aes_gcm_algorithm, tls->rx.ctx, tag );
	if ( memcmp ( tag, ( body + len ), sizeof ( tag ) ) != 0 ) {
		DBGC ( tls, "NVMeTLS %p record does not authenticate\n", tls );
		return -EACCES_FINISHED;
	}
	tls->rx.seq++;
	/* Inner type: the last non-zero byte */
	while ( len && ( body[ len - 1 ] == 0 ) )
		len--;
	if ( ! len )
		return -EPROTO_TLS;
	type = body[ --len ];
	switch ( type ) {
	case TLS13_HANDSHAKE:
		return tls13_handshake ( tls, body, len );
	case TLS13_ALERT:
		DBGC ( tls, "NVMeTLS %p alert %d/%d\n", tls,
		       ( len > 0 ? body[0] : 0 ), ( len > 1 ? body[1] : 0 ) );
		/* close_notify is an orderly end; anything else a refusal */
		return ( ( len > 1 && body[1] == 0 ) ? -ECONNRESET :
			 -EACCES_ALERT );
	case TLS13_APPDATA:
		if ( tls->state != TLS13_CONNECTED )
			return -EPROTO_TLS;
		if ( ! len )
			return 0;
		iobuf = alloc_iob ( len );
		if ( ! iobuf )
			return -ENOMEM;
		memcpy ( iob_put ( iobuf, len ), body, len );
		return xfer_deliver_iob ( &tls->plain, iobuf );
	default:
		return -EPROTO_TLS;
	}
}

/**
 * Receive ciphertext from the socket
 */
static int tls13_cipher_deliver ( struct tls13_session *tls,
				  struct io_buffer *iobuf,
				  struct xfer_metadata *meta __unused ) {
	size_t want;
	size_t len;
	int rc = 0;

	ref_get ( &tls->refcnt );
	while ( iob_len ( iobuf ) ) {
		want = 5;
		if ( tls->rec_len >= 5 )
			want += ( ( tls->rec[3] << 8 ) | tls->rec[4] );
		len = ( want - tls->rec_len );
		if ( len > iob_len ( iobuf ) )
			len = iob_len ( iobuf );
		memcpy ( ( tls->rec + tls->rec_len ), iobuf->data, len );
		iob_pull ( iobuf, len );
		tls->rec_len += len;
		if ( tls->rec_len == 5 ) {
			/* A port without TLS answers with NVMe/TCP or not at
			 * all: its first byte is no TLS record type
			 */
			if ( ( tls->rec[0] < TLS13_CHANGE_CIPHER ) ||
			     ( tls->rec[0] > TLS13_APPDATA ) ||
			     ( tls->rec[1] != 0x03 ) ||
			     ( ( ( tls->rec[3] << 8 ) | tls->rec[4] ) >
			       TLS13_MAX_RECORD ) ) {
				rc = -EPROTO_TLS;
				break;
			}
			continue;
		}
		if ( tls->rec_len < want )
			continue;
		rc = tls13_record ( tls );
		tls->rec_len = 0;
		if ( rc != 0 )
			break;
	}
	free_iob ( iobuf );
	if ( rc != 0 )
		tls13_close ( tls, rc );
	ref_put ( &tls->refcnt );
	return rc;
}

/**
 * The socket's window opened: send the ClientHello once connected
 */
static void tls13_cipher_window_changed ( struct tls13_session *tls ) {
	int rc;

	if ( tls->state == TLS13_CONNECTED ) {
		xfer_window_changed ( &tls->plain );
		return;
	}
	if ( ( tls->state != TLS13_START ) || ( ! xfer_window ( &tls->cipher ) ) )
		return;
	if ( ( rc = tls13_client_hello ( tls ) ) != 0 )
		tls13_close ( tls, rc );
}

/**
 * Send plaintext (from the NVMe queue)
 */
static int tls13_plain_deliver ( struct tls13_session *tls,
				 struct io_buffer *iobuf,
				 struct xfer_metadata *meta __unused ) {
	size_t len;
	int rc = 0;

	if ( tls->state != TLS13_CONNECTED ) {
		rc = -ENOTCONN;
		goto out;
	}
	while ( iob_len ( iobuf ) ) {
		len = iob_len ( iobuf );
		if ( len > TLS13_MAX_PLAIN )
			len = TLS13_MAX_PLAIN;
		if ( ( rc = tls13_send_record ( tls, TLS13_APPDATA,
						iobuf->data, len ) ) != 0 )
			break;
		iob_pull ( iobuf, len );
	}
 out:
	free_iob ( iobuf );
	return rc;
}

/** The plaintext side may send once the handshake is over */
static size_t tls13_plain_window ( struct tls13_session *tls ) {
	return ( ( tls->state == TLS13_CONNECTED ) ?
		 xfer_window ( &tls->cipher ) : 0 );
}

/**
 * Close the session
 */
static void tls13_close ( struct tls13_session *tls, int rc ) {
	if ( rc != 0 )
		DBGC ( tls, "NVMeTLS %p closed: %s\n", tls, strerror ( rc ) );
	memset ( tls->psk, 0, sizeof ( tls->psk ) );
	memset ( tls->x25519, 0, sizeof ( tls->x25519 ) );
	memset ( &tls->tx, 0, sizeof ( tls->tx ) );
	memset ( &tls->rx, 0, sizeof ( tls->rx ) );
	intfs_shutdown ( rc, &tls->cipher, &tls->plain, NULL );
}

/** Socket closed under us: closed before any ServerHello, the port has
 * no TLS (nvmet closes on a ClientHello where it expects ICReq) or tlshd
 * found no key for the identity; both look the same from here */
static void tls13_cipher_close ( struct tls13_session *tls, int rc ) {
	if ( ( tls->state == TLS13_WAIT_SH ) &&
	     ( ( rc == 0 ) || ( rc == -ECONNRESET ) ) ) {
		rc = -ECONNREFUSED_TLS;
	} else if ( ( tls->state != TLS13_CONNECTED ) &&
		    ( ( rc == 0 ) || ( rc == -ECONNRESET ) ) ) {
		rc = -EACCES_ALERT;
	}
	tls13_close ( tls, rc );
}

static void tls13_free ( struct refcnt *refcnt ) {
	struct tls13_session *tls =
		container_of ( refcnt, struct tls13_session, refcnt );

	free ( tls->identity );
	free ( tls->hsbuf );
	memset ( tls, 0, sizeof ( *tls ) );
	free ( tls );
}

static struct interface_operation tls13_plain_op[] = {
	INTF_OP ( xfer_deliver, struct tls13_session *, tls13_plain_deliver ),
	INTF_OP ( xfer_window, struct tls13_session *, tls13_plain_window ),
	INTF_OP ( intf_close, struct tls13_session *, tls13_close ),
};

static struct interface_descriptor tls13_plain_desc =
	INTF_DESC_PASSTHRU ( struct tls13_session, plain, tls13_plain_op,
			     cipher );

static struct interface_operation tls13_cipher_op[] = {
	INTF_OP ( xfer_deliver, struct tls13_session *, tls13_cipher_deliver ),
	INTF_OP ( xfer_window_changed, struct tls13_session *,
		  tls13_cipher_window_changed ),
	INTF_OP ( intf_close, struct tls13_session *, tls13_cipher_close ),
};

static struct interface_descriptor tls13_cipher_desc =
	INTF_DESC_PASSTHRU ( struct tls13_session, cipher, tls13_cipher_op,
			     plain );

/**
 * The retained PSK from the interchange form (NVMe/TCP 1.0 3.6.1.3)
 *
 * @v interchange	NVMeTLSkey-1:<hh>:<base64>:
 * @v hostnqn		Host NQN
 * @v retained		Retained PSK to fill in
 * @ret rc		Return status code
 */
static int tls13_retained_psk ( const char *interchange, const char *hostnqn,
				uint8_t *retained ) {
	uint8_t raw[TLS13_HASH];
	uint8_t prk[TLS13_HASH];
	int hash;

	hash = nvme_key_decode ( interchange, "NVMeTLSkey-1:", raw );
	if ( hash < 0 )
		return -EINVAL_PSK;
	if ( hash == 0 ) {
		memcpy ( retained, raw, TLS13_HASH );
	} else {
		/* As libnvme: HKDF-Extract (no salt), then Expand-Label */
		hkdf_extract ( &sha256_algorithm, NULL, 0, raw, TLS13_HASH,
			       prk );
		tls13_expand_label ( prk, "HostNQN", hostnqn,
				     strlen ( hostnqn ), retained,
				     TLS13_HASH );
	}
	memset ( raw, 0, sizeof ( raw ) );
	memset ( prk, 0, sizeof ( prk ) );
	return 0;
}

/**
 * The retained PSK of the configured tls-psk setting
 *
 * @v hostnqn		Host NQN
 * @v retained		Retained PSK to fill in (32 bytes)
 * @ret rc		Return status code
 */
int nvme_tls_retained_psk ( const char *hostnqn, uint8_t *retained ) {
	char *interchange = NULL;
	int len;
	int rc;

	len = fetch_string_setting_copy ( NULL, &nvme_tls_psk_setting,
					  &interchange );
	if ( len <= 0 ) {
		free ( interchange );
		return -EINVAL_PSK;
	}
	rc = tls13_retained_psk ( interchange, hostnqn, retained );
	memset ( interchange, 0, len );
	free ( interchange );
	return rc;
}

/**
 * Open an NVMe/TCP connection: TCP, then TLS 1.3 with the PSK
 *
 * @v xfer		The queue's transport interface
 * @v host		Target host name or address
 * @v peer		Target socket address (port filled in)
 * @v hostnqn		Host NQN
 * @v subnqn		Subsystem NQN
 * @ret rc		Return status code
 */
int nvme_tcp_secure ( struct interface *xfer, const char *host,
		      struct sockaddr *peer, const char *hostnqn,
		      const char *subnqn ) {
	struct tls13_session *tls;
	char *interchange = NULL;
	int len;
	int rc;

	if ( strlen ( hostnqn ) > 223 || strlen ( subnqn ) > 223 )
		return -EINVAL;
	tls = zalloc ( sizeof ( *tls ) );
	if ( ! tls )
		return -ENOMEM;
	ref_init ( &tls->refcnt, tls13_free );
	intf_init ( &tls->plain, &tls13_plain_desc, &tls->refcnt );
	intf_init ( &tls->cipher, &tls13_cipher_desc, &tls->refcnt );

	len = fetch_string_setting_copy ( NULL, &nvme_tls_psk_setting,
					  &interchange );
	/* Absent (negative: settings.c's own ENOENT) or empty: not set */
	if ( len <= 0 ) {
		rc = -EINVAL_PSK;
		goto err;
	}
	rc = tls13_retained_psk ( interchange, hostnqn, tls->psk );
	memset ( interchange, 0, len );
	free ( interchange );
	if ( rc != 0 )
		goto err;
	if ( asprintf ( &tls->identity, "NVMe0R01 %s %s", hostnqn,
			subnqn ) < 0 ) {
		rc = -ENOMEM;
		goto err;
	}
	if ( ( rc = xfer_open_named_socket ( &tls->cipher, SOCK_STREAM, peer,
					     host, NULL ) ) != 0 )
		goto err;
	intf_plug_plug ( &tls->plain, xfer );
	ref_put ( &tls->refcnt );
	return 0;

 err:
	tls13_close ( tls, rc );
	ref_put ( &tls->refcnt );
	return rc;
}
