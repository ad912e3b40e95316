/*
 * NVMe over TCP for iPXE: a SAN driver for nvme:// URIs.
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
#define ERRFILE_nvme_tcp ( ERRFILE_NET | 0x00fe0000 )

/** @file
 *
 * NVMe over TCP (NVMe base specification 2.0, NVMe/TCP transport
 * specification 1.0): one TCP connection per queue, the admin queue
 * and one I/O queue.
 *
 *   nvme://<host>[:<port>]/<subsystem-nqn>[?nsid=<n>]
 *
 * The host NQN and host ID come from the settings hostnqn and hostid
 * (the names of seed 004's /boot-vars; without hostid, the SMBIOS UUID).  Bring-up: ICReq /
 * ICResp on each connection (digests off), Connect (admin, then I/O
 * with the controller ID the admin Connect returned), Property Get CAP,
 * Property Set CC.EN, Property Get CSTS until RDY, Identify controller,
 * Identify namespace.  Then Read and Write through the SAN layer (UEFI
 * Block I/O, INT 13h), Keep Alive on the admin queue at half the
 * controller's timeout, and a normal shutdown (CC.SHN) on close.
 *
 * Every connection is wrapped by nvme_tcp_secure() before the first
 * byte: TLS 1.3 with the pre-shared key NVMe/TCP requires.  There is no
 * plaintext NVMe/TCP in this driver.
 */

#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <byteswap.h>
#include <ipxe/refcnt.h>
#include <ipxe/list.h>
#include <ipxe/interface.h>
#include <ipxe/xfer.h>
#include <ipxe/iobuf.h>
#include <ipxe/open.h>
#include <ipxe/uri.h>
#include <ipxe/socket.h>
#include <ipxe/tcpip.h>
#include <ipxe/blockdev.h>
#include <ipxe/retry.h>
#include <ipxe/timer.h>
#include <ipxe/settings.h>
#include <ipxe/uuid.h>
#include <ipxe/errortab.h>
#include <ipxe/netdevice.h>
#include <ipxe/efi/efi.h>
#include <ipxe/efi/efi_path.h>
#include <ipxe/base64.h>
#include <ipxe/crc32.h>
#include <ipxe/features.h>
#include "nvme_tcp.h"

/* In the banner only: no DHCP encapsulated feature code exists for it */
FEATURE_NAME ( FEATURE_PROTOCOL, "NVMe/TCP" );

/* Errors an operator reads on the console after "Could not boot:" */
#define EINFO_EACCES_CONNECT \
	__einfo_uniqify ( EINFO_EACCES, 0x01, \
			  "NVMe target refused Connect (host or subsystem)" )
#define EACCES_CONNECT __einfo_error ( EINFO_EACCES_CONNECT )
#define EINFO_EACCES_AUTH_REQUIRED \
	__einfo_uniqify ( EINFO_EACCES, 0x02, \
			  "NVMe target requires DH-HMAC-CHAP" )
#define EACCES_AUTH_REQUIRED __einfo_error ( EINFO_EACCES_AUTH_REQUIRED )
#define EINFO_EACCES_NO_AUTH \
	__einfo_uniqify ( EINFO_EACCES, 0x03, \
			  "NVMe target did not authenticate itself" )
#define EACCES_NO_AUTH __einfo_error ( EINFO_EACCES_NO_AUTH )
#define EINFO_EIO_STATUS \
	__einfo_uniqify ( EINFO_EIO, 0x01, "NVMe command failed" )
#define EIO_STATUS __einfo_error ( EINFO_EIO_STATUS )
#define EINFO_EPROTO_PDU \
	__einfo_uniqify ( EINFO_EPROTO, 0x01, "NVMe/TCP protocol error" )
#define EPROTO_PDU __einfo_error ( EINFO_EPROTO_PDU )
#define EINFO_EPROTO_TERM \
	__einfo_uniqify ( EINFO_EPROTO, 0x02, \
			  "NVMe/TCP connection terminated by target" )
#define EPROTO_TERM __einfo_error ( EINFO_EPROTO_TERM )
#define EINFO_EINVAL_URI \
	__einfo_uniqify ( EINFO_EINVAL, 0x01, \
			  "nvme:// needs a host and a subsystem NQN" )
#define EINVAL_URI __einfo_error ( EINFO_EINVAL_URI )
#define EINFO_EINVAL_HOSTNQN \
	__einfo_uniqify ( EINFO_EINVAL, 0x02, "hostnqn is not set (NVMe host NQN)" )
#define EINVAL_HOSTNQN __einfo_error ( EINFO_EINVAL_HOSTNQN )
#define EINFO_ENODEV_NS \
	__einfo_uniqify ( EINFO_ENODEV, 0x01, "NVMe namespace not found" )
#define ENODEV_NS __einfo_error ( EINFO_ENODEV_NS )
#define EINFO_ETIMEDOUT_READY \
	__einfo_uniqify ( EINFO_ETIMEDOUT, 0x01, \
			  "NVMe controller did not become ready" )
#define ETIMEDOUT_READY __einfo_error ( EINFO_ETIMEDOUT_READY )

struct errortab nvme_tcp_errors[] __errortab = {
	__einfo_errortab ( EINFO_EACCES_CONNECT ),
	__einfo_errortab ( EINFO_EACCES_AUTH_REQUIRED ),
	__einfo_errortab ( EINFO_EACCES_NO_AUTH ),
	__einfo_errortab ( EINFO_EIO_STATUS ),
	__einfo_errortab ( EINFO_EPROTO_PDU ),
	__einfo_errortab ( EINFO_EPROTO_TERM ),
	__einfo_errortab ( EINFO_EINVAL_URI ),
	__einfo_errortab ( EINFO_EINVAL_HOSTNQN ),
	__einfo_errortab ( EINFO_ENODEV_NS ),
	__einfo_errortab ( EINFO_ETIMEDOUT_READY ),
};

/** Host NQN setting (seed 004's /boot-vars name) */
const struct setting nvme_hostnqn_setting __setting ( SETTING_SANBOOT_EXTRA,
						      hostnqn ) = {
	.name = "hostnqn",
	.description = "NVMe host NQN",
	.type = &setting_type_string,
};

/** Host ID setting */
const struct setting nvme_hostid_setting __setting ( SETTING_SANBOOT_EXTRA,
						     hostid ) = {
	.name = "hostid",
	.description = "NVMe host ID",
	.type = &setting_type_uuid,
};

/******************************************************************************
 *
 * Controller and queues
 *
 ******************************************************************************
 */

struct nvme_tcp_ctrl;
struct nvme_tcp_cmd;

/** Completion of a command: rc, and the completion queue entry (NULL on a
 * transport failure) */
typedef void ( * nvme_tcp_done_t ) ( struct nvme_tcp_cmd *cmd, int rc,
				     const struct nvme_cqe *cqe );

/** A command in flight on one queue */
struct nvme_tcp_cmd {
	/** Reference count (block commands outlive the call that made them) */
	struct refcnt refcnt;
	/** Queue's list of commands in flight */
	struct list_head list;
	/** Queue */
	struct nvme_tcp_queue *queue;
	/** Block data interface (block commands only) */
	struct interface block;
	/** Submission queue entry */
	union nvme_sqe sqe;
	/** Buffer the command owns (freed with it) */
	void *owned;
	/** In-capsule data (Connect) */
	void *icd;
	/** In-capsule data length */
	size_t icd_len;
	/** Data-in buffer (C2HData lands here) */
	void *in;
	/** Data-in length */
	size_t in_len;
	/** Data-in bytes received */
	size_t in_got;
	/** Data-out buffer (sent on R2T) */
	const void *out;
	/** Data-out length */
	size_t out_len;
	/** Completion handler */
	nvme_tcp_done_t done;
	/** Completed (the handler ran) */
	int finished;
};

/** Receive state of one connection */
enum nvme_tcp_rx_state {
	NVME_TCP_RX_HEADER = 0,
	NVME_TCP_RX_PAD,
	NVME_TCP_RX_DATA,
};

/** One queue: one TCP connection */
struct nvme_tcp_queue {
	/** Controller */
	struct nvme_tcp_ctrl *ctrl;
	/** Transport (the TLS session over TCP) */
	struct interface socket;
	/** Queue ID */
	unsigned int qid;
	/** ICReq sent */
	int icreq_sent;
	/** Connection established (ICResp received) */
	int ready;
	/** Commands in flight */
	struct list_head cmds;
	/** Next command ID to try */
	uint16_t next_cid;
	/** Controller's PDU data alignment (bytes) */
	size_t cpda;
	/** Largest H2CData payload the controller accepts */
	size_t maxh2cdata;
	/** Receive state */
	enum nvme_tcp_rx_state rx_state;
	/** PDU header being received */
	union nvme_tcp_pdu rx;
	/** Bytes of header received */
	size_t rx_hdr_len;
	/** Bytes of padding still to skip */
	size_t rx_pad;
	/** Bytes of data still to receive */
	size_t rx_data;
	/** Command receiving data (C2HData) */
	struct nvme_tcp_cmd *rx_cmd;
	/** Offset of the next data byte within the command's buffer */
	size_t rx_offset;
	/** Called when ICResp has been accepted */
	void ( * up ) ( struct nvme_tcp_queue *queue );
	/** Called when the queue is connected (and authenticated) */
	void ( * connected ) ( struct nvme_tcp_queue *queue );
	/** DH-HMAC-CHAP transaction */
	struct nvme_auth auth;
	/** Authentication Receive buffer */
	uint8_t *auth_buf;
	/** Controller failed to authenticate (Failure2 being sent) */
	int auth_failed;
	/** Authentication in progress */
	int auth_busy;
};

/** Controller bring-up progress */
enum nvme_tcp_ctrl_state {
	NVME_TCP_STARTING = 0,
	NVME_TCP_READY,
	NVME_TCP_CLOSING,
	NVME_TCP_CLOSED,
};

/** An NVMe/TCP controller: the block device the SAN layer sees */
struct nvme_tcp_ctrl {
	/** Reference count */
	struct refcnt refcnt;
	/** Block control interface */
	struct interface block;
	/** Admin queue */
	struct nvme_tcp_queue admin;
	/** I/O queue */
	struct nvme_tcp_queue io;
	/** State */
	enum nvme_tcp_ctrl_state state;

	/** Target address (host name) */
	char *host;
	/** Target port */
	unsigned int port;
	/** Target address, when the host is an address */
	struct sockaddr_tcpip peer;
	/** Target address is known */
	int have_peer;
	/** Subsystem NQN */
	char *subnqn;
	/** Host NQN */
	char *hostnqn;
	/** Host ID */
	union uuid hostid;
	/** Namespace ID (0: the first active namespace) */
	uint32_t nsid;

	/** Controller ID (from the admin Connect) */
	uint16_t cntlid;
	/** Controller capabilities */
	uint64_t cap;
	/** Controller configuration we wrote */
	uint32_t cc;
	/** Keep Alive timeout granted (ms) */
	unsigned int kato;
	/** Maximum data transfer (bytes; 0: no limit) */
	size_t mdts;
	/** In-capsule data an I/O command may carry (bytes; IOCCSZ) */
	size_t icdsz;
	/** Block size */
	size_t blksize;
	/** Number of blocks */
	uint64_t blocks;
	/** Namespace identifier type (0: none) */
	uint8_t nidt;
	/** Namespace identifier */
	uint8_t nid[16];
	/** Scratch buffer for Identify */
	uint8_t identify[NVME_IDENTIFY_LEN];

	/** Ready-poll and keep-alive timer */
	struct retry_timer timer;
	/** Ready-poll deadline */
	unsigned long deadline;
	/** Keep Alive in flight */
	int keepalive_busy;
	/** Reason the controller failed or closed */
	int rc;
};

static void nvme_tcp_close ( struct nvme_tcp_ctrl *ctrl, int rc );
static void nvme_tcp_admin_up ( struct nvme_tcp_queue *queue );

/**
 * Free controller
 *
 * @v refcnt		Reference count
 */
static void nvme_tcp_free ( struct refcnt *refcnt ) {
	struct nvme_tcp_ctrl *ctrl =
		container_of ( refcnt, struct nvme_tcp_ctrl, refcnt );

	free ( ctrl->host );
	free ( ctrl->subnqn );
	free ( ctrl->hostnqn );
	free ( ctrl->admin.auth_buf );
	free ( ctrl->io.auth_buf );
	memset ( ctrl, 0, sizeof ( *ctrl ) );
	free ( ctrl );
}

/**
 * Free command
 *
 * @v refcnt		Reference count
 */
static void nvme_tcp_cmd_free ( struct refcnt *refcnt ) {
	struct nvme_tcp_cmd *cmd =
		container_of ( refcnt, struct nvme_tcp_cmd, refcnt );

	free ( cmd->icd );
	free ( cmd->owned );
	free ( cmd );
}

/** Block command data interface: the SAN layer may close it (timeout) */
static void nvme_tcp_cmd_block_close ( struct nvme_tcp_cmd *cmd, int rc ) {
	/* The buffer is no longer ours: late data is discarded, and an R2T
	 * that still asks for a write's data fails the connection (the
	 * range check) rather than read freed memory
	 */
	cmd->in = NULL;
	cmd->in_len = 0;
	cmd->out = NULL;
	cmd->out_len = 0;
	intf_restart ( &cmd->block, rc );
}

static struct interface_operation nvme_tcp_cmd_block_op[] = {
	INTF_OP ( intf_close, struct nvme_tcp_cmd *, nvme_tcp_cmd_block_close ),
};

static struct interface_descriptor nvme_tcp_cmd_block_desc =
	INTF_DESC ( struct nvme_tcp_cmd, block, nvme_tcp_cmd_block_op );

/**
 * Finish a command: remove it from its queue and call its handler once
 *
 * @v cmd		Command
 * @v rc		Status
 * @v cqe		Completion queue entry, or NULL
 */
static void nvme_tcp_finish ( struct nvme_tcp_cmd *cmd, int rc,
			      const struct nvme_cqe *cqe ) {

	if ( cmd->finished )
		return;
	cmd->finished = 1;
	list_del ( &cmd->list );
	cmd->done ( cmd, rc, cqe );
	ref_put ( &cmd->refcnt );
}

/**
 * Allocate a command
 *
 * @v done		Completion handler
 * @ret cmd		Command, or NULL
 */
static struct nvme_tcp_cmd * nvme_tcp_cmd_alloc ( nvme_tcp_done_t done ) {
	struct nvme_tcp_cmd *cmd;

	cmd = zalloc ( sizeof ( *cmd ) );
	if ( ! cmd )
		return NULL;
	ref_init ( &cmd->refcnt, nvme_tcp_cmd_free );
	intf_init ( &cmd->block, &nvme_tcp_cmd_block_desc, &cmd->refcnt );
	INIT_LIST_HEAD ( &cmd->list );
	cmd->done = done;
	return cmd;
}

/**
 * Give a command in-capsule data (a copy, freed with the command)
 *
 * @v cmd		Command
 * @v data		Data
 * @v len		Length
 * @ret rc		Return status code
 */
static int nvme_tcp_cmd_icd ( struct nvme_tcp_cmd *cmd, const void *data,
			      size_t len ) {

	cmd->icd = malloc ( len );
	if ( ! cmd->icd )
		return -ENOMEM;
	memcpy ( cmd->icd, data, len );
	cmd->icd_len = len;
	return 0;
}

/**
 * Fail every command of a queue
 *
 * @v queue		Queue
 * @v rc		Reason
 */
static void nvme_tcp_fail_queue ( struct nvme_tcp_queue *queue, int rc ) {
	struct nvme_tcp_cmd *cmd;
	struct nvme_tcp_cmd *tmp;

	list_for_each_entry_safe ( cmd, tmp, &queue->cmds, list )
		nvme_tcp_finish ( cmd, rc, NULL );
	queue->rx_cmd = NULL;
}

/******************************************************************************
 *
 * Transmit
 *
 ******************************************************************************
 */

/**
 * Send one PDU: header, padding to the controller's alignment, data
 *
 * @v queue		Queue
 * @v hdr		PDU header (common header filled in here)
 * @v type		PDU type
 * @v flags		PDU flags
 * @v hlen		Header length
 * @v data		Data, or NULL
 * @v len		Data length
 * @ret rc		Return status code
 */
static int nvme_tcp_send ( struct nvme_tcp_queue *queue,
			   union nvme_tcp_pdu *hdr, unsigned int type,
			   unsigned int flags, size_t hlen,
			   const void *data, size_t len ) {
	struct io_buffer *iobuf;
	size_t pdo = 0;
	size_t plen = hlen;
	void *p;

	if ( len ) {
		pdo = ( ( hlen + queue->cpda - 1 ) / queue->cpda ) *
			queue->cpda;
		plen = pdo + len;
	}
	hdr->common.type = type;
	hdr->common.flags = flags;
	hdr->common.hlen = hlen;
	hdr->common.pdo = pdo;
	hdr->common.plen = cpu_to_le32 ( plen );

	iobuf = xfer_alloc_iob ( &queue->socket, plen );
	if ( ! iobuf )
		return -ENOMEM;
	memcpy ( iob_put ( iobuf, hlen ), hdr, hlen );
	if ( len ) {
		p = iob_put ( iobuf, ( pdo - hlen ) );
		memset ( p, 0, ( pdo - hlen ) );
		memcpy ( iob_put ( iobuf, len ), data, len );
	}
	return xfer_deliver_iob ( &queue->socket, iobuf );
}

/**
 * Submit a command on a queue
 *
 * @v queue		Queue
 * @v cmd		Command (the queue takes the caller's reference)
 * @ret rc		Return status code (the handler has not run)
 */
static int nvme_tcp_submit ( struct nvme_tcp_queue *queue,
			     struct nvme_tcp_cmd *cmd ) {
	union nvme_tcp_pdu pdu;
	struct nvme_tcp_cmd *other;
	struct nvme_sgl *sgl = &cmd->sqe.common.dptr;
	int rc;

	/* Pick a command ID not in flight */
 again:
	queue->next_cid++;
	list_for_each_entry ( other, &queue->cmds, list ) {
		if ( other->sqe.common.cid == cpu_to_le16 ( queue->next_cid ) )
			goto again;
	}
	cmd->sqe.common.cid = cpu_to_le16 ( queue->next_cid );
	cmd->sqe.common.flags = NVME_CMD_SGL_METABUF;

	/* Data pointer: in-capsule data, or data moved by C2HData / R2T */
	memset ( sgl, 0, sizeof ( *sgl ) );
	if ( cmd->icd_len ) {
		sgl->length = cpu_to_le32 ( cmd->icd_len );
		sgl->type = NVME_SGL_INCAPSULE;
	} else {
		sgl->length = cpu_to_le32 ( cmd->in_len + cmd->out_len );
		sgl->type = NVME_SGL_TRANSPORT;
	}

	memset ( &pdu, 0, sizeof ( pdu ) );
	memcpy ( &pdu.cmd.sqe, &cmd->sqe, sizeof ( pdu.cmd.sqe ) );
	cmd->queue = queue;
	list_add_tail ( &cmd->list, &queue->cmds );
	if ( ( rc = nvme_tcp_send ( queue, &pdu, NVME_TCP_CMD,
				    0, sizeof ( pdu.cmd ), cmd->icd,
				    cmd->icd_len ) ) != 0 ) {
		list_del ( &cmd->list );
		INIT_LIST_HEAD ( &cmd->list );
		return rc;
	}
	return 0;
}

/**
 * Answer an R2T: send the requested range of a write's data
 *
 * @v queue		Queue
 * @v r2t		R2T PDU
 * @ret rc		Return status code
 */
static int nvme_tcp_r2t ( struct nvme_tcp_queue *queue,
			  struct nvme_tcp_r2t_pdu *r2t ) {
	struct nvme_tcp_cmd *cmd;
	union nvme_tcp_pdu pdu;
	size_t offset = le32_to_cpu ( r2t->r2to );
	size_t len = le32_to_cpu ( r2t->r2tl );
	size_t frag;
	int rc;

	list_for_each_entry ( cmd, &queue->cmds, list ) {
		if ( cmd->sqe.common.cid != r2t->cccid )
			continue;
		if ( ( offset > cmd->out_len ) ||
		     ( len > ( cmd->out_len - offset ) ) ) {
			DBGC ( queue->ctrl, "NVMe %p q%d R2T %zx+%zx beyond "
			       "%zx\n", queue->ctrl, queue->qid, offset, len,
			       cmd->out_len );
			return -EPROTO_PDU;
		}
		DBGC2 ( queue->ctrl, "NVMe %p q%d R2T %#04x %zx+%zx\n",
			queue->ctrl, queue->qid, le16_to_cpu ( r2t->cccid ),
			offset, len );
		while ( len ) {
			frag = len;
			if ( frag > queue->maxh2cdata )
				frag = queue->maxh2cdata;
			memset ( &pdu, 0, sizeof ( pdu ) );
			pdu.data.cccid = r2t->cccid;
			pdu.data.ttag = r2t->ttag;
			pdu.data.datao = cpu_to_le32 ( offset );
			pdu.data.datal = cpu_to_le32 ( frag );
			if ( ( rc = nvme_tcp_send ( queue, &pdu,
					NVME_TCP_H2C_DATA,
					( ( frag == len ) ?
					  NVME_TCP_F_DATA_LAST : 0 ),
					sizeof ( pdu.data ),
					( cmd->out + offset ), frag ) ) != 0 )
				return rc;
			offset += frag;
			len -= frag;
		}
		return 0;
	}
	DBGC ( queue->ctrl, "NVMe %p q%d R2T for unknown command %#04x\n",
	       queue->ctrl, queue->qid, le16_to_cpu ( r2t->cccid ) );
	return -EPROTO_PDU;
}

/******************************************************************************
 *
 * Receive
 *
 ******************************************************************************
 */

/**
 * Find the command a PDU names
 *
 * @v queue		Queue
 * @v cid		Command ID (little-endian)
 * @ret cmd		Command, or NULL
 */
static struct nvme_tcp_cmd * nvme_tcp_find ( struct nvme_tcp_queue *queue,
					     uint16_t cid ) {
	struct nvme_tcp_cmd *cmd;

	list_for_each_entry ( cmd, &queue->cmds, list ) {
		if ( cmd->sqe.common.cid == cid )
			return cmd;
	}
	return NULL;
}

/**
 * Translate a completion's status to an error
 *
 * @v status		Status field (little-endian, phase bit included)
 * @ret rc		Return status code
 */
static int nvme_tcp_status_rc ( uint16_t status ) {
	unsigned int sts = ( le16_to_cpu ( status ) >> 1 ) & 0x7ff;

	if ( ! sts )
		return 0;
	switch ( sts ) {
	case NVME_SC_CONNECT_INVALID_HOST:
	case NVME_SC_CONNECT_INVALID_PARAM:
	case NVME_SC_ACCESS_DENIED:
		return -EACCES_CONNECT;
	case NVME_SC_AUTH_REQUIRED:
		return -EACCES_AUTH_REQUIRED;
	case NVME_SC_INVALID_NS:
		return -ENODEV_NS;
	default:
		return -EIO_STATUS;
	}
}

/**
 * Handle a complete PDU header
 *
 * @v queue		Queue
 * @ret rc		Return status code
 */
static int nvme_tcp_rx_header ( struct nvme_tcp_queue *queue ) {
	union nvme_tcp_pdu *pdu = &queue->rx;
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;
	struct nvme_tcp_cmd *cmd;
	size_t hlen = pdu->common.hlen;
	size_t pdo = pdu->common.pdo;
	size_t plen = le32_to_cpu ( pdu->common.plen );
	size_t start = ( pdo ? pdo : hlen );
	size_t offset;
	size_t len;
	int rc;

	if ( ( plen < hlen ) || ( pdo && ( pdo < hlen ) ) || ( start > plen ) )
		return -EPROTO_PDU;
	queue->rx_pad = ( start - hlen );
	queue->rx_data = ( plen - start );
	queue->rx_cmd = NULL;

	switch ( pdu->common.type ) {

	case NVME_TCP_ICRESP:
		if ( queue->ready || ( le16_to_cpu ( pdu->icresp.pfv ) != 0 ) ||
		     pdu->icresp.digest ) {
			DBGC ( ctrl, "NVMe %p q%d bad ICResp (pfv %d dgst %#x)\n",
			       ctrl, queue->qid, le16_to_cpu ( pdu->icresp.pfv ),
			       pdu->icresp.digest );
			return -EPROTO_PDU;
		}
		queue->cpda = ( ( pdu->icresp.cpda + 1 ) * 4 );
		queue->maxh2cdata = le32_to_cpu ( pdu->icresp.maxdata );
		if ( queue->maxh2cdata < 4096 )
			return -EPROTO_PDU;
		queue->ready = 1;
		DBGC ( ctrl, "NVMe %p q%d connected (cpda %zd maxh2cdata %zd)\n",
		       ctrl, queue->qid, queue->cpda, queue->maxh2cdata );
		queue->up ( queue );
		return 0;

	case NVME_TCP_RSP:
		if ( ( hlen != sizeof ( pdu->rsp ) ) || queue->rx_data )
			return -EPROTO_PDU;
		cmd = nvme_tcp_find ( queue, pdu->rsp.cqe.cid );
		if ( ! cmd ) {
			DBGC ( ctrl, "NVMe %p q%d response for unknown command "
			       "%#04x\n", ctrl, queue->qid,
			       le16_to_cpu ( pdu->rsp.cqe.cid ) );
			return -EPROTO_PDU;
		}
		rc = nvme_tcp_status_rc ( pdu->rsp.cqe.status );
		if ( rc != 0 ) {
			DBGC ( ctrl, "NVMe %p q%d command %#04x opcode %#02x "
			       "status %#04x\n", ctrl, queue->qid,
			       le16_to_cpu ( cmd->sqe.common.cid ),
			       cmd->sqe.common.opcode,
			       le16_to_cpu ( pdu->rsp.cqe.status ) );
		}
		if ( rc == 0 && cmd->in_got != cmd->in_len && cmd->in ) {
			DBGC ( ctrl, "NVMe %p q%d command %#04x got %zd of %zd "
			       "bytes\n", ctrl, queue->qid,
			       le16_to_cpu ( cmd->sqe.common.cid ),
			       cmd->in_got, cmd->in_len );
			rc = -EPROTO_PDU;
		}
		nvme_tcp_finish ( cmd, rc, &pdu->rsp.cqe );
		return 0;

	case NVME_TCP_C2H_DATA:
		if ( hlen != sizeof ( pdu->data ) )
			return -EPROTO_PDU;
		cmd = nvme_tcp_find ( queue, pdu->data.cccid );
		offset = le32_to_cpu ( pdu->data.datao );
		len = le32_to_cpu ( pdu->data.datal );
		if ( ( ! cmd ) || ( len != queue->rx_data ) ||
		     ( offset > cmd->in_len ) ||
		     ( len > ( cmd->in_len - offset ) ) ) {
			DBGC ( ctrl, "NVMe %p q%d bad C2HData %#04x %zx+%zx\n",
			       ctrl, queue->qid,
			       le16_to_cpu ( pdu->data.cccid ), offset, len );
			/* A command whose buffer was taken back still
			 * receives: its data are discarded below.
			 */
			if ( ! ( cmd && ( ! cmd->in ) &&
				 ( len == queue->rx_data ) ) )
				return -EPROTO_PDU;
		}
		queue->rx_cmd = cmd;
		queue->rx_offset = offset;
		return 0;

	case NVME_TCP_R2T:
		if ( ( hlen != sizeof ( pdu->r2t ) ) || queue->rx_data )
			return -EPROTO_PDU;
		return nvme_tcp_r2t ( queue, &pdu->r2t );

	case NVME_TCP_C2H_TERM:
		DBGC ( ctrl, "NVMe %p q%d terminated by controller: fes %#x\n",
		       ctrl, queue->qid, le16_to_cpu ( pdu->term.fes ) );
		return -EPROTO_TERM;

	default:
		DBGC ( ctrl, "NVMe %p q%d unexpected PDU type %#02x\n",
		       ctrl, queue->qid, pdu->common.type );
		return -EPROTO_PDU;
	}
}

/**
 * Handle the end of a PDU's data
 *
 * @v queue		Queue
 */
static void nvme_tcp_rx_done ( struct nvme_tcp_queue *queue ) {
	union nvme_tcp_pdu *pdu = &queue->rx;
	struct nvme_tcp_cmd *cmd = queue->rx_cmd;

	/* C2HData with SUCCESS stands for the response (SQ flow control
	 * disabled: never asked for, but allowed)
	 */
	if ( cmd && ( pdu->common.type == NVME_TCP_C2H_DATA ) &&
	     ( pdu->common.flags & NVME_TCP_F_DATA_SUCCESS ) &&
	     ( pdu->common.flags & NVME_TCP_F_DATA_LAST ) ) {
		nvme_tcp_finish ( cmd, 0, NULL );
	}
	queue->rx_cmd = NULL;
	queue->rx_state = NVME_TCP_RX_HEADER;
	queue->rx_hdr_len = 0;
}

/**
 * Receive data from the transport
 *
 * @v queue		Queue
 * @v iobuf		I/O buffer
 * @v meta		Metadata
 * @ret rc		Return status code
 */
static int nvme_tcp_socket_deliver ( struct nvme_tcp_queue *queue,
				     struct io_buffer *iobuf,
				     struct xfer_metadata *meta __unused ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;
	struct nvme_tcp_cmd *cmd;
	size_t want;
	size_t len;
	int rc = 0;

	/* Keep the controller alive while a handler may close it */
	ref_get ( &ctrl->refcnt );
	while ( iob_len ( iobuf ) ) {
		switch ( queue->rx_state ) {

		case NVME_TCP_RX_HEADER:
			want = ( ( queue->rx_hdr_len < sizeof ( queue->rx.common ) ) ?
				 sizeof ( queue->rx.common ) :
				 queue->rx.common.hlen );
			len = ( want - queue->rx_hdr_len );
			if ( len > iob_len ( iobuf ) )
				len = iob_len ( iobuf );
			memcpy ( ( ( ( void * ) &queue->rx ) + queue->rx_hdr_len ),
				 iobuf->data, len );
			iob_pull ( iobuf, len );
			queue->rx_hdr_len += len;
			if ( queue->rx_hdr_len == sizeof ( queue->rx.common ) ) {
				if ( ( queue->rx.common.hlen <
				       sizeof ( queue->rx.common ) ) ||
				     ( queue->rx.common.hlen >
				       sizeof ( queue->rx ) ) ) {
					rc = -EPROTO_PDU;
					goto out;
				}
			}
			if ( queue->rx_hdr_len < sizeof ( queue->rx.common ) ||
			     queue->rx_hdr_len < queue->rx.common.hlen )
				break;
			if ( ( rc = nvme_tcp_rx_header ( queue ) ) != 0 )
				goto out;
			if ( ctrl->state == NVME_TCP_CLOSED )
				goto out;
			queue->rx_state = NVME_TCP_RX_PAD;
			/* fall through */

		case NVME_TCP_RX_PAD:
			len = queue->rx_pad;
			if ( len > iob_len ( iobuf ) )
				len = iob_len ( iobuf );
			iob_pull ( iobuf, len );
			queue->rx_pad -= len;
			if ( queue->rx_pad )
				break;
			queue->rx_state = NVME_TCP_RX_DATA;
			/* fall through */

		case NVME_TCP_RX_DATA:
			len = queue->rx_data;
			if ( len > iob_len ( iobuf ) )
				len = iob_len ( iobuf );
			cmd = queue->rx_cmd;
			if ( cmd && cmd->in ) {
				memcpy ( ( cmd->in + queue->rx_offset ),
					 iobuf->data, len );
				cmd->in_got += len;
			}
			queue->rx_offset += len;
			iob_pull ( iobuf, len );
			queue->rx_data -= len;
			if ( ! queue->rx_data )
				nvme_tcp_rx_done ( queue );
			break;
		}
		if ( ctrl->state == NVME_TCP_CLOSED )
			break;
	}

 out:
	free_iob ( iobuf );
	if ( rc != 0 ) {
		DBGC ( ctrl, "NVMe %p q%d receive failed: %s\n",
		       ctrl, queue->qid, strerror ( rc ) );
		nvme_tcp_close ( ctrl, rc );
	}
	ref_put ( &ctrl->refcnt );
	return rc;
}

/**
 * Handle the transport closing
 *
 * @v queue		Queue
 * @v rc		Reason
 */
static void nvme_tcp_socket_close ( struct nvme_tcp_queue *queue, int rc ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;

	if ( rc == 0 )
		rc = -ECONNRESET;
	/* nvmet drops the connection on a failed authentication rather
	 * than answer the next Authentication Receive: say why
	 */
	if ( queue->auth_failed ) {
		rc = queue->auth_failed;
	} else if ( queue->auth_busy ) {
		rc = nvme_auth_refused_error();
	}
	DBGC ( ctrl, "NVMe %p q%d connection closed: %s\n",
	       ctrl, queue->qid, strerror ( rc ) );
	nvme_tcp_close ( ctrl, rc );
}

/**
 * Send ICReq once the transport can carry it (after the TLS handshake)
 *
 * @v queue		Queue
 */
static void nvme_tcp_socket_window_changed ( struct nvme_tcp_queue *queue ) {
	union nvme_tcp_pdu pdu;
	int rc;

	if ( queue->icreq_sent || ( ! xfer_window ( &queue->socket ) ) )
		return;
	queue->icreq_sent = 1;
	DBGC ( queue->ctrl, "NVMe %p q%d sending ICReq\n",
	       queue->ctrl, queue->qid );

	/* ICReq: protocol version 0, no digests, one R2T at a time */
	memset ( &pdu, 0, sizeof ( pdu ) );
	if ( ( rc = nvme_tcp_send ( queue, &pdu, NVME_TCP_ICREQ, 0,
				    sizeof ( pdu.icreq ), NULL, 0 ) ) != 0 )
		nvme_tcp_close ( queue->ctrl, rc );
}

static struct interface_operation nvme_tcp_socket_op[] = {
	INTF_OP ( xfer_deliver, struct nvme_tcp_queue *,
		  nvme_tcp_socket_deliver ),
	INTF_OP ( xfer_window_changed, struct nvme_tcp_queue *,
		  nvme_tcp_socket_window_changed ),
	INTF_OP ( intf_close, struct nvme_tcp_queue *, nvme_tcp_socket_close ),
};

static struct interface_descriptor nvme_tcp_socket_desc =
	INTF_DESC ( struct nvme_tcp_queue, socket, nvme_tcp_socket_op );

/**
 * Open a queue's connection and send ICReq
 *
 * @v queue		Queue
 * @ret rc		Return status code
 */
static int nvme_tcp_queue_open ( struct nvme_tcp_queue *queue ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;
	struct sockaddr_tcpip target;
	int rc;

	memcpy ( &target, &ctrl->peer, sizeof ( target ) );
	target.st_port = htons ( ctrl->port );
	if ( ( rc = nvme_tcp_secure ( &queue->socket, ctrl->host,
				      ( struct sockaddr * ) &target,
				      ctrl->hostnqn, ctrl->subnqn ) ) != 0 ) {
		DBGC ( ctrl, "NVMe %p q%d could not connect: %s\n",
		       ctrl, queue->qid, strerror ( rc ) );
		return rc;
	}
	/* Until ICResp: no data in our PDUs, so no alignment applies */
	queue->cpda = 4;
	return 0;
}

/******************************************************************************
 *
 * Commands
 *
 ******************************************************************************
 */

/**
 * Issue a fabrics or admin command with a fresh command structure
 *
 * @v queue		Queue
 * @v sqe		Submission queue entry (copied)
 * @v in		Data-in buffer, or NULL
 * @v in_len		Data-in length
 * @v done		Completion handler
 * @ret rc		Return status code
 */
static int nvme_tcp_issue_icd ( struct nvme_tcp_queue *queue,
				const union nvme_sqe *sqe, void *in,
				size_t in_len, const void *icd, size_t icd_len,
				nvme_tcp_done_t done ) {
	struct nvme_tcp_cmd *cmd;
	int rc;

	cmd = nvme_tcp_cmd_alloc ( done );
	if ( ! cmd )
		return -ENOMEM;
	memcpy ( &cmd->sqe, sqe, sizeof ( cmd->sqe ) );
	cmd->in = in;
	cmd->in_len = in_len;
	if ( icd_len && ( ( rc = nvme_tcp_cmd_icd ( cmd, icd,
						    icd_len ) ) != 0 ) ) {
		ref_put ( &cmd->refcnt );
		return rc;
	}
	if ( ( rc = nvme_tcp_submit ( queue, cmd ) ) != 0 )
		ref_put ( &cmd->refcnt );
	return rc;
}

/** Issue a command without in-capsule data */
static int nvme_tcp_issue ( struct nvme_tcp_queue *queue,
			    const union nvme_sqe *sqe, void *in,
			    size_t in_len, nvme_tcp_done_t done ) {
	return nvme_tcp_issue_icd ( queue, sqe, in, in_len, NULL, 0, done );
}

/**
 * Issue Connect on a queue
 *
 * @v queue		Queue
 * @v done		Completion handler
 * @ret rc		Return status code
 */
static int nvme_tcp_connect ( struct nvme_tcp_queue *queue,
			      nvme_tcp_done_t done ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;
	struct nvme_tcp_cmd *cmd;
	struct nvmf_connect_data *data;
	int rc;

	cmd = nvme_tcp_cmd_alloc ( done );
	if ( ! cmd )
		return -ENOMEM;
	data = zalloc ( sizeof ( *data ) );
	if ( ! data ) {
		ref_put ( &cmd->refcnt );
		return -ENOMEM;
	}
	memcpy ( &data->hostid, &ctrl->hostid, sizeof ( data->hostid ) );
	data->cntlid = cpu_to_le16 ( queue->qid ? ctrl->cntlid : 0xffff );
	strncpy ( data->subsysnqn, ctrl->subnqn,
		  ( sizeof ( data->subsysnqn ) - 1 ) );
	strncpy ( data->hostnqn, ctrl->hostnqn,
		  ( sizeof ( data->hostnqn ) - 1 ) );
	cmd->icd = data;
	cmd->icd_len = sizeof ( *data );
	cmd->sqe.connect.opcode = NVME_FABRICS_COMMAND;
	cmd->sqe.connect.fctype = NVME_FCTYPE_CONNECT;
	cmd->sqe.connect.qid = cpu_to_le16 ( queue->qid );
	cmd->sqe.connect.sqsize = cpu_to_le16 ( NVME_TCP_QUEUE_DEPTH - 1 );
	cmd->sqe.connect.kato =
		cpu_to_le32 ( queue->qid ? 0 : NVME_TCP_KATO_MS );
	if ( ( rc = nvme_tcp_submit ( queue, cmd ) ) != 0 )
		ref_put ( &cmd->refcnt );
	return rc;
}

/**
 * Issue Property Get
 *
 * @v ctrl		Controller
 * @v offset		Register offset
 * @v wide		64-bit register
 * @v done		Completion handler
 * @ret rc		Return status code
 */
static int nvme_tcp_prop_get ( struct nvme_tcp_ctrl *ctrl,
			       unsigned int offset, int wide,
			       nvme_tcp_done_t done ) {
	union nvme_sqe sqe;

	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.prop.opcode = NVME_FABRICS_COMMAND;
	sqe.prop.fctype = NVME_FCTYPE_PROPERTY_GET;
	sqe.prop.attrib = ( wide ? 1 : 0 );
	sqe.prop.offset = cpu_to_le32 ( offset );
	return nvme_tcp_issue ( &ctrl->admin, &sqe, NULL, 0, done );
}

/**
 * Issue Property Set (32-bit)
 *
 * @v ctrl		Controller
 * @v offset		Register offset
 * @v value		Value
 * @v done		Completion handler
 * @ret rc		Return status code
 */
static int nvme_tcp_prop_set ( struct nvme_tcp_ctrl *ctrl,
			       unsigned int offset, uint32_t value,
			       nvme_tcp_done_t done ) {
	union nvme_sqe sqe;

	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.prop.opcode = NVME_FABRICS_COMMAND;
	sqe.prop.fctype = NVME_FCTYPE_PROPERTY_SET;
	sqe.prop.offset = cpu_to_le32 ( offset );
	sqe.prop.value = cpu_to_le64 ( value );
	return nvme_tcp_issue ( &ctrl->admin, &sqe, NULL, 0, done );
}

/**
 * Issue Identify
 *
 * @v ctrl		Controller
 * @v cns		Controller or namespace structure
 * @v nsid		Namespace ID
 * @v done		Completion handler
 * @ret rc		Return status code
 */
static int nvme_tcp_identify ( struct nvme_tcp_ctrl *ctrl, unsigned int cns,
			       uint32_t nsid, nvme_tcp_done_t done ) {
	union nvme_sqe sqe;

	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.common.opcode = NVME_ADMIN_IDENTIFY;
	sqe.common.nsid = cpu_to_le32 ( nsid );
	sqe.common.cdw10 = cpu_to_le32 ( cns );
	memset ( ctrl->identify, 0, sizeof ( ctrl->identify ) );
	return nvme_tcp_issue ( &ctrl->admin, &sqe, ctrl->identify,
				sizeof ( ctrl->identify ), done );
}

/******************************************************************************
 *
 * DH-HMAC-CHAP on a queue (the messages are nvme_auth.c's)
 *
 ******************************************************************************
 */

/** Controller of a queue command */
#define QUEUE_OF( cmd ) ( (cmd)->queue )

/**
 * Issue Authentication Send or Receive
 *
 * @v queue		Queue
 * @v send		Send (else Receive)
 * @v data		Message to send
 * @v len		Message length
 * @v done		Completion handler
 * @ret rc		Return status code
 */
static int nvme_tcp_auth_cmd ( struct nvme_tcp_queue *queue, int send,
			       const void *data, size_t len,
			       nvme_tcp_done_t done ) {
	union nvme_sqe sqe;

	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.auth.opcode = NVME_FABRICS_COMMAND;
	sqe.auth.fctype = ( send ? NVME_FCTYPE_AUTH_SEND :
			    NVME_FCTYPE_AUTH_RECEIVE );
	sqe.auth.secp = NVME_AUTH_SECP;
	sqe.auth.spsp0 = 0x01;
	sqe.auth.spsp1 = 0x01;
	if ( send ) {
		sqe.auth.al_tl = cpu_to_le32 ( len );
		return nvme_tcp_issue_icd ( queue, &sqe, NULL, 0, data, len,
					    done );
	}
	sqe.auth.al_tl = cpu_to_le32 ( NVME_AUTH_RECEIVE_LEN );
	memset ( queue->auth_buf, 0, NVME_AUTH_RECEIVE_LEN );
	return nvme_tcp_issue ( queue, &sqe, queue->auth_buf,
				NVME_AUTH_RECEIVE_LEN, done );
}

/** Fail authentication on a queue */
static void nvme_tcp_auth_fail ( struct nvme_tcp_queue *queue, int rc ) {
	DBGC ( queue->ctrl, "NVMe %p q%d DH-HMAC-CHAP failed: %s\n",
	       queue->ctrl, queue->qid, strerror ( rc ) );
	nvme_tcp_close ( queue->ctrl, rc );
}

/** Success2 or Failure2 sent: the queue is authenticated, or not */
static void nvme_tcp_auth_finished ( struct nvme_tcp_cmd *cmd, int rc,
				     const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_queue *queue = QUEUE_OF ( cmd );

	if ( queue->auth_failed ) {
		nvme_tcp_auth_fail ( queue, queue->auth_failed );
		return;
	}
	if ( rc != 0 ) {
		nvme_tcp_auth_fail ( queue, rc );
		return;
	}
	queue->auth_busy = 0;
	DBGC ( queue->ctrl, "NVMe %p q%d authenticated%s\n", queue->ctrl,
	       queue->qid, ( queue->auth.bidirectional ?
			     " both ways" : "" ) );
	queue->connected ( queue );
}

/** Success1 received: check the controller's response */
static void nvme_tcp_auth_success1 ( struct nvme_tcp_cmd *cmd, int rc,
				     const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_queue *queue = QUEUE_OF ( cmd );
	uint8_t msg[16];
	size_t len;

	if ( rc != 0 ) {
		nvme_tcp_auth_fail ( queue, rc );
		return;
	}
	rc = nvme_auth_success1 ( &queue->auth, queue->auth_buf,
				  NVME_AUTH_RECEIVE_LEN );
	if ( rc < 0 ) {
		nvme_tcp_auth_fail ( queue, rc );
		return;
	}
	if ( ! queue->auth.bidirectional ) {
		nvme_auth_finish ( &queue->auth, 0, msg );
		queue->auth_busy = 0;
		queue->connected ( queue );
		return;
	}
	/* Tell the controller it failed, then stop */
	queue->auth_failed = ( rc ? nvme_auth_ctrl_error() : 0 );
	len = nvme_auth_finish ( &queue->auth, rc, msg );
	if ( ( rc = nvme_tcp_auth_cmd ( queue, 1, msg, len,
					nvme_tcp_auth_finished ) ) != 0 )
		nvme_tcp_auth_fail ( queue, rc );
}

/** Reply sent: receive Success1 */
static void nvme_tcp_auth_replied ( struct nvme_tcp_cmd *cmd, int rc,
				    const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_queue *queue = QUEUE_OF ( cmd );

	if ( ( rc != 0 ) ||
	     ( ( rc = nvme_tcp_auth_cmd ( queue, 0, NULL, 0,
					  nvme_tcp_auth_success1 ) ) != 0 ) )
		nvme_tcp_auth_fail ( queue, rc );
}

/** Challenge received: send the reply */
static void nvme_tcp_auth_challenged ( struct nvme_tcp_cmd *cmd, int rc,
				       const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_queue *queue = QUEUE_OF ( cmd );
	uint8_t *reply;
	int len;

	if ( rc != 0 ) {
		nvme_tcp_auth_fail ( queue, rc );
		return;
	}
	reply = malloc ( NVME_AUTH_REPLY_MAX );
	if ( ! reply ) {
		nvme_tcp_auth_fail ( queue, -ENOMEM );
		return;
	}
	len = nvme_auth_reply ( &queue->auth, queue->auth_buf,
				NVME_AUTH_RECEIVE_LEN, reply );
	if ( len < 0 ) {
		rc = len;
	} else {
		rc = nvme_tcp_auth_cmd ( queue, 1, reply, len,
					 nvme_tcp_auth_replied );
	}
	memset ( reply, 0, NVME_AUTH_REPLY_MAX );
	free ( reply );
	if ( rc != 0 )
		nvme_tcp_auth_fail ( queue, rc );
}

/** Negotiate sent: receive the challenge */
static void nvme_tcp_auth_negotiated ( struct nvme_tcp_cmd *cmd, int rc,
				       const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_queue *queue = QUEUE_OF ( cmd );

	if ( ( rc != 0 ) ||
	     ( ( rc = nvme_tcp_auth_cmd ( queue, 0, NULL, 0,
					  nvme_tcp_auth_challenged ) ) != 0 ) )
		nvme_tcp_auth_fail ( queue, rc );
}

/**
 * A queue's Connect succeeded: authenticate when the controller asks
 *
 * @v queue		Queue
 * @v result		Connect result (dword 0)
 */
static void nvme_tcp_queue_connected ( struct nvme_tcp_queue *queue,
				       uint32_t result ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;
	uint8_t msg[NVME_AUTH_NEGOTIATE_LEN];
	size_t len;
	int rc;

	if ( ! ( result & ( NVME_CONNECT_AUTHREQ_ATR |
			    NVME_CONNECT_AUTHREQ_ASCR ) ) ) {
		/* Holding the controller's secret means it must prove
		 * itself: a target that skips authentication is refused
		 */
		if ( nvme_auth_wants_ctrl() ) {
			nvme_tcp_close ( ctrl, -EACCES_NO_AUTH );
			return;
		}
		queue->connected ( queue );
		return;
	}
	rc = nvme_auth_init ( &queue->auth, ctrl->hostnqn, ctrl->subnqn,
			      ( queue->qid + 1 ) );
	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	if ( ! queue->auth_buf )
		queue->auth_buf = malloc ( NVME_AUTH_RECEIVE_LEN );
	if ( ! queue->auth_buf ) {
		nvme_tcp_close ( ctrl, -ENOMEM );
		return;
	}
	queue->auth_busy = 1;
	len = nvme_auth_negotiate ( &queue->auth, msg );
	if ( ( rc = nvme_tcp_auth_cmd ( queue, 1, msg, len,
					nvme_tcp_auth_negotiated ) ) != 0 )
		nvme_tcp_close ( ctrl, rc );
}

/******************************************************************************
 *
 * Controller bring-up
 *
 ******************************************************************************
 */

/** Controller of a bring-up command */
#define CTRL_OF( cmd ) ( (cmd)->queue->ctrl )

/**
 * Continue or fail bring-up
 *
 * @v ctrl		Controller
 * @v rc		Status of the step just issued
 */
static void nvme_tcp_step ( struct nvme_tcp_ctrl *ctrl, int rc ) {
	if ( rc != 0 )
		nvme_tcp_close ( ctrl, rc );
}

/** I/O queue connected and authenticated: the namespace is ready */
static void nvme_tcp_io_ready ( struct nvme_tcp_queue *queue ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;

	DBGC ( ctrl, "NVMe %p ready: nsid %d, %lld blocks of %zd bytes\n",
	       ctrl, ctrl->nsid, ( unsigned long long ) ctrl->blocks,
	       ctrl->blksize );
	ctrl->state = NVME_TCP_READY;
	/* What the booted OS needs to connect to this disk itself */
	nvme_handover_publish ( ctrl->host, ctrl->port, ctrl->subnqn,
				ctrl->nsid, ctrl->hostnqn, &ctrl->hostid );
	/* Keep the controller alive from now on */
	start_timer_fixed ( &ctrl->timer,
			    ( ( ctrl->kato * TICKS_PER_SEC ) / 2000 ) );
	xfer_window_changed ( &ctrl->block );
}

/** I/O queue's Connect answered */
static void nvme_tcp_io_connected ( struct nvme_tcp_cmd *cmd, int rc,
				    const struct nvme_cqe *cqe ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );

	if ( rc != 0 ) {
		DBGC ( ctrl, "NVMe %p I/O Connect failed: %s\n",
		       ctrl, strerror ( rc ) );
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	nvme_tcp_queue_connected ( &ctrl->io, le32_to_cpu ( cqe->result.u32 ) );
}

/** I/O queue's connection is up: Connect it to the controller */
static void nvme_tcp_io_up ( struct nvme_tcp_queue *queue ) {
	nvme_tcp_step ( queue->ctrl,
			nvme_tcp_connect ( queue, nvme_tcp_io_connected ) );
}

/** Namespace identified: note its size and open the I/O queue */
static void nvme_tcp_ns_identified ( struct nvme_tcp_cmd *cmd, int rc,
				     const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );
	struct nvme_id_ns *ns = ( ( void * ) ctrl->identify );
	unsigned int lbads;
	unsigned int i;

	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	lbads = ns->lbaf[ ns->flbas & 0x0f ].ds;
	ctrl->blocks = le64_to_cpu ( ns->nsze );
	if ( ( ! ctrl->blocks ) || ( lbads < 9 ) || ( lbads > 16 ) ) {
		DBGC ( ctrl, "NVMe %p nsid %d unusable (nsze %lld, lbads "
		       "%d)\n", ctrl, ctrl->nsid,
		       ( unsigned long long ) ctrl->blocks, lbads );
		nvme_tcp_close ( ctrl, -ENODEV_NS );
		return;
	}
	ctrl->blksize = ( 1 << lbads );
	/* The namespace's global identifier names it in the device path */
	for ( i = 0 ; i < sizeof ( ns->nguid ) ; i++ ) {
		if ( ns->nguid[i] )
			ctrl->nidt = NVME_NIDT_NGUID;
	}
	for ( i = 0 ; ( ! ctrl->nidt ) && ( i < sizeof ( ns->eui64 ) ) ; i++ ){
		if ( ns->eui64[i] )
			ctrl->nidt = NVME_NIDT_EUI64;
	}
	if ( ctrl->nidt == NVME_NIDT_NGUID ) {
		memcpy ( ctrl->nid, ns->nguid, sizeof ( ns->nguid ) );
	} else if ( ctrl->nidt == NVME_NIDT_EUI64 ) {
		memcpy ( ctrl->nid, ns->eui64, sizeof ( ns->eui64 ) );
	}
	nvme_tcp_step ( ctrl, nvme_tcp_queue_open ( &ctrl->io ) );
}

/** Active namespaces listed: take the first when the URI named none */
static void nvme_tcp_ns_listed ( struct nvme_tcp_cmd *cmd, int rc,
				 const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );
	uint32_t *list = ( ( void * ) ctrl->identify );

	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	ctrl->nsid = le32_to_cpu ( list[0] );
	if ( ! ctrl->nsid ) {
		nvme_tcp_close ( ctrl, -ENODEV_NS );
		return;
	}
	nvme_tcp_step ( ctrl, nvme_tcp_identify ( ctrl, NVME_ID_CNS_NS,
						  ctrl->nsid,
						  nvme_tcp_ns_identified ) );
}

/** Controller identified: note its limits, then find the namespace */
static void nvme_tcp_ctrl_identified ( struct nvme_tcp_cmd *cmd, int rc,
				       const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );
	struct nvme_id_ctrl *id = ( ( void * ) ctrl->identify );
	size_t mps = ( 4096 << ( ( ctrl->cap >> 48 ) & 0xf ) );
	uint32_t ioccsz;

	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	ctrl->mdts = ( id->mdts ? ( mps << id->mdts ) : 0 );
	/* IOCCSZ: I/O command capsule size in 16-byte units, the 64-byte
	 * command included
	 */
	memcpy ( &ioccsz, ( ctrl->identify + NVME_ID_CTRL_IOCCSZ ),
		 sizeof ( ioccsz ) );
	ioccsz = ( le32_to_cpu ( ioccsz ) * 16 );
	ctrl->icdsz = ( ( ioccsz > 64 ) ? ( ioccsz - 64 ) : 0 );
	DBGC ( ctrl, "NVMe %p controller %d mdts %zd in-capsule %zd\n",
	       ctrl, ctrl->cntlid, ctrl->mdts, ctrl->icdsz );
	if ( ctrl->nsid ) {
		rc = nvme_tcp_identify ( ctrl, NVME_ID_CNS_NS, ctrl->nsid,
					 nvme_tcp_ns_identified );
	} else {
		rc = nvme_tcp_identify ( ctrl, NVME_ID_CNS_NS_ACTIVE_LIST, 0,
					 nvme_tcp_ns_listed );
	}
	nvme_tcp_step ( ctrl, rc );
}

static void nvme_tcp_csts ( struct nvme_tcp_cmd *cmd, int rc,
			    const struct nvme_cqe *cqe );

/** CC written: poll CSTS until the controller is ready */
static void nvme_tcp_enabled ( struct nvme_tcp_cmd *cmd, int rc,
			       const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );

	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	/* CAP.TO is in units of 500 ms */
	ctrl->deadline = ( currticks() + ( ( ( ( ctrl->cap >> 24 ) & 0xff )
					     + 1 ) * TICKS_PER_SEC / 2 ) );
	nvme_tcp_step ( ctrl, nvme_tcp_prop_get ( ctrl, NVME_REG_CSTS, 0,
						  nvme_tcp_csts ) );
}

/** CSTS read during enable */
static void nvme_tcp_csts ( struct nvme_tcp_cmd *cmd, int rc,
			    const struct nvme_cqe *cqe ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );
	uint32_t csts;

	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	csts = le32_to_cpu ( cqe->result.u32 );
	if ( csts & NVME_CSTS_CFS ) {
		nvme_tcp_close ( ctrl, -EIO_STATUS );
		return;
	}
	if ( csts & NVME_CSTS_RDY ) {
		nvme_tcp_step ( ctrl, nvme_tcp_identify ( ctrl,
					NVME_ID_CNS_CTRL, 0,
					nvme_tcp_ctrl_identified ) );
		return;
	}
	if ( currticks() > ctrl->deadline ) {
		nvme_tcp_close ( ctrl, -ETIMEDOUT_READY );
		return;
	}
	nvme_tcp_step ( ctrl, nvme_tcp_prop_get ( ctrl, NVME_REG_CSTS, 0,
						  nvme_tcp_csts ) );
}

/** CAP read: enable the controller */
static void nvme_tcp_cap ( struct nvme_tcp_cmd *cmd, int rc,
			   const struct nvme_cqe *cqe ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );

	if ( rc != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	ctrl->cap = le64_to_cpu ( cqe->result.u64 );
	ctrl->cc = ( NVME_CC_ENABLE | NVME_CC_CSS_NVM | NVME_CC_IOSQES |
		     NVME_CC_IOCQES );
	nvme_tcp_step ( ctrl, nvme_tcp_prop_set ( ctrl, NVME_REG_CC, ctrl->cc,
						  nvme_tcp_enabled ) );
}

/** Admin queue connected: read the controller's capabilities */
static void nvme_tcp_admin_connected ( struct nvme_tcp_cmd *cmd, int rc,
				       const struct nvme_cqe *cqe ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );
	uint32_t result;

	if ( rc != 0 ) {
		DBGC ( ctrl, "NVMe %p admin Connect failed: %s\n",
		       ctrl, strerror ( rc ) );
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	result = le32_to_cpu ( cqe->result.u32 );
	ctrl->cntlid = ( result & 0xffff );
	ctrl->kato = NVME_TCP_KATO_MS;
	DBGC ( ctrl, "NVMe %p admin queue connected to controller %d\n",
	       ctrl, ctrl->cntlid );
	nvme_tcp_queue_connected ( &ctrl->admin, result );
}

/** Admin queue connected and authenticated: read the capabilities */
static void nvme_tcp_admin_ready ( struct nvme_tcp_queue *queue ) {
	struct nvme_tcp_ctrl *ctrl = queue->ctrl;

	nvme_tcp_step ( ctrl, nvme_tcp_prop_get ( ctrl, NVME_REG_CAP, 1,
						  nvme_tcp_cap ) );
}

/** Admin queue's connection is up: Connect it */
static void nvme_tcp_admin_up ( struct nvme_tcp_queue *queue ) {
	nvme_tcp_step ( queue->ctrl,
			nvme_tcp_connect ( queue, nvme_tcp_admin_connected ) );
}

/******************************************************************************
 *
 * Keep Alive, shutdown
 *
 ******************************************************************************
 */

/** Keep Alive answered */
static void nvme_tcp_kept_alive ( struct nvme_tcp_cmd *cmd, int rc,
				  const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );

	ctrl->keepalive_busy = 0;
	if ( rc != 0 ) {
		DBGC ( ctrl, "NVMe %p Keep Alive failed: %s\n",
		       ctrl, strerror ( rc ) );
		nvme_tcp_close ( ctrl, rc );
	}
}

/**
 * Keep-alive timer
 *
 * @v timer		Retry timer
 * @v over		Failure indicator
 */
static void nvme_tcp_timer_expired ( struct retry_timer *timer,
				     int over __unused ) {
	struct nvme_tcp_ctrl *ctrl =
		container_of ( timer, struct nvme_tcp_ctrl, timer );
	union nvme_sqe sqe;
	int rc;

	if ( ctrl->state != NVME_TCP_READY )
		return;
	start_timer_fixed ( &ctrl->timer,
			    ( ( ctrl->kato * TICKS_PER_SEC ) / 2000 ) );
	if ( ctrl->keepalive_busy )
		return;
	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.common.opcode = NVME_ADMIN_KEEP_ALIVE;
	if ( ( rc = nvme_tcp_issue ( &ctrl->admin, &sqe, NULL, 0,
				     nvme_tcp_kept_alive ) ) != 0 ) {
		nvme_tcp_close ( ctrl, rc );
		return;
	}
	ctrl->keepalive_busy = 1;
}

/** Nothing to do when a shutdown command completes: the close follows */
static void nvme_tcp_ignore ( struct nvme_tcp_cmd *cmd __unused,
			      int rc __unused,
			      const struct nvme_cqe *cqe __unused ) {
}

/**
 * Close the controller
 *
 * @v ctrl		Controller
 * @v rc		Reason
 */
static void nvme_tcp_close ( struct nvme_tcp_ctrl *ctrl, int rc ) {

	if ( ctrl->state == NVME_TCP_CLOSED )
		return;

	/* A controller that was in use is told to shut down normally
	 * first (CC.SHN), so the target can let go of it at once instead
	 * of waiting for the Keep Alive timeout.  The Property Set is
	 * sent and not waited for: TCP delivers it before the FIN.
	 */
	if ( ( ctrl->state == NVME_TCP_READY ) && ctrl->admin.ready ) {
		nvme_tcp_prop_set ( ctrl, NVME_REG_CC,
				    ( ctrl->cc | NVME_CC_SHN_NORMAL ),
				    nvme_tcp_ignore );
	}
	ctrl->state = NVME_TCP_CLOSED;
	ctrl->rc = rc;
	DBGC ( ctrl, "NVMe %p closed: %s\n", ctrl, strerror ( rc ) );
	stop_timer ( &ctrl->timer );
	nvme_tcp_fail_queue ( &ctrl->io, rc );
	nvme_tcp_fail_queue ( &ctrl->admin, rc );
	intfs_shutdown ( rc, &ctrl->io.socket, &ctrl->admin.socket,
			 &ctrl->block, NULL );
}

/******************************************************************************
 *
 * Block device interface
 *
 ******************************************************************************
 */

/** A block command completed: close its data interface with the status */
static void nvme_tcp_block_done ( struct nvme_tcp_cmd *cmd, int rc,
				  const struct nvme_cqe *cqe __unused ) {
	intf_shutdown ( &cmd->block, rc );
}

/** Identify namespace for read capacity completed */
static void nvme_tcp_capacity_done ( struct nvme_tcp_cmd *cmd, int rc,
				     const struct nvme_cqe *cqe __unused ) {
	struct nvme_tcp_ctrl *ctrl = CTRL_OF ( cmd );
	struct nvme_id_ns *ns = cmd->owned;
	struct block_device_capacity capacity;
	size_t max;

	if ( ( rc == 0 ) && cmd->in ) {
		ctrl->blocks = le64_to_cpu ( ns->nsze );
		memset ( &capacity, 0, sizeof ( capacity ) );
		capacity.blocks = ctrl->blocks;
		capacity.blksize = ctrl->blksize;
		max = NVME_TCP_MAX_TRANSFER;
		if ( ctrl->mdts && ( ctrl->mdts < max ) )
			max = ctrl->mdts;
		capacity.max_count = ( max / ctrl->blksize );
		block_capacity ( &cmd->block, &capacity );
	}
	intf_shutdown ( &cmd->block, rc );
}

/**
 * Issue a block command
 *
 * @v ctrl		Controller
 * @v data		Data interface
 * @v sqe		Submission queue entry
 * @v in		Data-in buffer
 * @v in_len		Data-in length
 * @v out		Data-out buffer
 * @v out_len		Data-out length
 * @v done		Completion handler
 * @v queue		Queue
 * @v owned		Buffer the command frees, or NULL (freed by the
 *			caller on failure)
 * @ret rc		Return status code
 */
static int nvme_tcp_block_issue ( struct nvme_tcp_ctrl *ctrl,
				  struct interface *data,
				  const union nvme_sqe *sqe,
				  void *in, size_t in_len,
				  const void *out, size_t out_len,
				  nvme_tcp_done_t done,
				  struct nvme_tcp_queue *queue, void *owned ) {
	struct nvme_tcp_cmd *cmd;
	int rc;

	if ( ctrl->state != NVME_TCP_READY )
		return ( ctrl->rc ? ctrl->rc : -ENOTCONN );
	cmd = nvme_tcp_cmd_alloc ( done );
	if ( ! cmd )
		return -ENOMEM;
	memcpy ( &cmd->sqe, sqe, sizeof ( cmd->sqe ) );
	cmd->in = in;
	cmd->in_len = in_len;
	if ( out_len && ( queue == &ctrl->io ) && ( out_len <= ctrl->icdsz ) ) {
		/* A write that fits in the capsule goes in it: nvmet sends
		 * no R2T for one (it waits for the data a Linux host puts
		 * there), and it saves a round trip
		 */
		if ( ( rc = nvme_tcp_cmd_icd ( cmd, out, out_len ) ) != 0 ) {
			ref_put ( &cmd->refcnt );
			return rc;
		}
	} else {
		cmd->out = out;
		cmd->out_len = out_len;
	}
	/* One reference for the queue, one for the data interface */
	ref_get ( &cmd->refcnt );
	if ( ( rc = nvme_tcp_submit ( queue, cmd ) ) != 0 ) {
		ref_put ( &cmd->refcnt );
		ref_put ( &cmd->refcnt );
		return rc;
	}
	cmd->owned = owned;
	intf_plug_plug ( &cmd->block, data );
	ref_put ( &cmd->refcnt );
	return 0;
}

/**
 * Read or write blocks
 *
 * @v ctrl		Controller
 * @v data		Data interface
 * @v opcode		NVM opcode
 * @v lba		Starting logical block address
 * @v count		Number of logical blocks
 * @v buffer		Data buffer
 * @v len		Length of data buffer
 * @ret rc		Return status code
 */
static int nvme_tcp_rw ( struct nvme_tcp_ctrl *ctrl, struct interface *data,
			 unsigned int opcode, uint64_t lba,
			 unsigned int count, void *buffer, size_t len ) {
	union nvme_sqe sqe;

	if ( ( ! count ) || ( count > 0x10000 ) ||
	     ( len != ( count * ctrl->blksize ) ) )
		return -EINVAL;
	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.rw.opcode = opcode;
	sqe.rw.nsid = cpu_to_le32 ( ctrl->nsid );
	sqe.rw.slba = cpu_to_le64 ( lba );
	sqe.rw.length = cpu_to_le16 ( count - 1 );
	if ( opcode == NVME_CMD_READ ) {
		return nvme_tcp_block_issue ( ctrl, data, &sqe, buffer, len,
					      NULL, 0, nvme_tcp_block_done,
					      &ctrl->io, NULL );
	} else {
		return nvme_tcp_block_issue ( ctrl, data, &sqe, NULL, 0,
					      buffer, len, nvme_tcp_block_done,
					      &ctrl->io, NULL );
	}
}

static int nvme_tcp_block_read ( struct nvme_tcp_ctrl *ctrl,
				 struct interface *data, uint64_t lba,
				 unsigned int count, void *buffer, size_t len ) {
	return nvme_tcp_rw ( ctrl, data, NVME_CMD_READ, lba, count,
			     buffer, len );
}

static int nvme_tcp_block_write ( struct nvme_tcp_ctrl *ctrl,
				  struct interface *data, uint64_t lba,
				  unsigned int count, void *buffer,
				  size_t len ) {
	return nvme_tcp_rw ( ctrl, data, NVME_CMD_WRITE, lba, count,
			     buffer, len );
}

static int nvme_tcp_block_read_capacity ( struct nvme_tcp_ctrl *ctrl,
					  struct interface *data ) {
	union nvme_sqe sqe;
	void *buf;
	int rc;

	/* A fresh Identify: the namespace may have grown since */
	buf = zalloc ( NVME_IDENTIFY_LEN );
	if ( ! buf )
		return -ENOMEM;
	memset ( &sqe, 0, sizeof ( sqe ) );
	sqe.common.opcode = NVME_ADMIN_IDENTIFY;
	sqe.common.nsid = cpu_to_le32 ( ctrl->nsid );
	sqe.common.cdw10 = cpu_to_le32 ( NVME_ID_CNS_NS );
	if ( ( rc = nvme_tcp_block_issue ( ctrl, data, &sqe, buf,
					   NVME_IDENTIFY_LEN, NULL, 0,
					   nvme_tcp_capacity_done,
					   &ctrl->admin, buf ) ) != 0 )
		free ( buf );
	return rc;
}

/** The SAN layer asks whether the device is ready */
static size_t nvme_tcp_block_window ( struct nvme_tcp_ctrl *ctrl ) {
	return ( ( ctrl->state == NVME_TCP_READY ) ? 1 : 0 );
}

/**
 * Describe the namespace as an EFI device path: the NIC's path, then an
 * NVMe-oF namespace node (UEFI 2.10 section 10.3.4.33)
 *
 * @v ctrl		Controller
 * @ret path		EFI device path, or NULL on error
 */
static EFI_DEVICE_PATH_PROTOCOL *
nvme_tcp_efi_describe ( struct nvme_tcp_ctrl *ctrl ) {
	struct net_device *netdev;
	EFI_DEVICE_PATH_PROTOCOL *netpath;
	EFI_DEVICE_PATH_PROTOCOL *path;
	EFI_DEVICE_PATH_PROTOCOL *end;
	NVME_OF_NAMESPACE_DEVICE_PATH *nspath;
	size_t prefix_len;
	size_t name_len;
	size_t ns_len;

	netdev = ( ctrl->have_peer ?
		   tcpip_netdev ( &ctrl->peer ) : last_opened_netdev() );
	if ( ! netdev )
		return NULL;
	netpath = efi_netdev_path ( netdev );
	if ( ! netpath )
		return NULL;
	prefix_len = efi_path_len ( netpath );
	name_len = ( strlen ( ctrl->subnqn ) + 1 /* NUL */ );
	ns_len = ( sizeof ( *nspath ) + name_len );
	path = zalloc ( prefix_len + ns_len + sizeof ( *end ) );
	if ( path ) {
		memcpy ( path, netpath, prefix_len );
		nspath = ( ( ( void * ) path ) + prefix_len );
		nspath->Header.Type = MESSAGING_DEVICE_PATH;
		nspath->Header.SubType = MSG_NVME_OF_NAMESPACE_DP;
		nspath->Header.Length[0] = ( ns_len & 0xff );
		nspath->Header.Length[1] = ( ns_len >> 8 );
		nspath->NamespaceIdType = ctrl->nidt;
		memcpy ( nspath->NamespaceId, ctrl->nid, sizeof ( ctrl->nid ) );
		memcpy ( nspath->SubsystemNqn, ctrl->subnqn, name_len );
		end = ( ( ( void * ) nspath ) + ns_len );
		efi_path_terminate ( end );
	}
	free ( netpath );
	return path;
}

static struct interface_operation nvme_tcp_block_op[] = {
	EFI_INTF_OP ( efi_describe, struct nvme_tcp_ctrl *,
		      nvme_tcp_efi_describe ),
	INTF_OP ( block_read, struct nvme_tcp_ctrl *, nvme_tcp_block_read ),
	INTF_OP ( block_write, struct nvme_tcp_ctrl *, nvme_tcp_block_write ),
	INTF_OP ( block_read_capacity, struct nvme_tcp_ctrl *,
		  nvme_tcp_block_read_capacity ),
	INTF_OP ( xfer_window, struct nvme_tcp_ctrl *,
		  nvme_tcp_block_window ),
	INTF_OP ( intf_close, struct nvme_tcp_ctrl *, nvme_tcp_close ),
};

static struct interface_descriptor nvme_tcp_block_desc =
	INTF_DESC ( struct nvme_tcp_ctrl, block, nvme_tcp_block_op );

/******************************************************************************
 *
 * URI opener
 *
 ******************************************************************************
 */

/**
 * Parse an nvme:// URI and the host identity settings
 *
 * @v ctrl		Controller
 * @v uri		URI
 * @ret rc		Return status code
 */
static int nvme_tcp_parse ( struct nvme_tcp_ctrl *ctrl, struct uri *uri ) {
	const char *query;
	char *end;
	int len;

	if ( ( ! uri->host ) || ( ! uri->host[0] ) || ( ! uri->path ) ||
	     ( uri->path[0] != '/' ) || ( ! uri->path[1] ) ||
	     ( strlen ( uri->path + 1 ) > 223 ) )
		return -EINVAL_URI;
	ctrl->host = strdup ( uri->host );
	ctrl->subnqn = strdup ( uri->path + 1 );
	if ( ( ! ctrl->host ) || ( ! ctrl->subnqn ) )
		return -ENOMEM;
	ctrl->port = uri_port ( uri, NVME_TCP_PORT );
	memset ( &ctrl->peer, 0, sizeof ( ctrl->peer ) );
	if ( sock_aton ( ctrl->host, ( struct sockaddr * ) &ctrl->peer ) == 0 )
		ctrl->have_peer = 1;

	/* Options: nsid=<n> */
	query = uri->equery;
	if ( query && ( strncmp ( query, "nsid=", 5 ) == 0 ) ) {
		ctrl->nsid = strtoul ( query + 5, &end, 10 );
		if ( *end || ( ! ctrl->nsid ) )
			return -EINVAL_URI;
	} else if ( query && query[0] ) {
		return -EINVAL_URI;
	}

	len = fetch_string_setting_copy ( NULL, &nvme_hostnqn_setting,
					  &ctrl->hostnqn );
	/* Absent (negative), empty or longer than an NQN may be: not set */
	if ( ( len <= 0 ) || ( len > 223 ) )
		return -EINVAL_HOSTNQN;
	/* Without a host ID setting, the system UUID stands for it */
	if ( fetch_uuid_setting ( NULL, &nvme_hostid_setting,
				  &ctrl->hostid ) < 0 )
		fetch_uuid_setting ( NULL, &uuid_setting, &ctrl->hostid );
	return 0;
}

/**
 * Open an nvme:// URI
 *
 * @v parent		Parent interface
 * @v uri		URI
 * @ret rc		Return status code
 */
static int nvme_tcp_open ( struct interface *parent, struct uri *uri ) {
	struct nvme_tcp_ctrl *ctrl;
	int rc;

	ctrl = zalloc ( sizeof ( *ctrl ) );
	if ( ! ctrl )
		return -ENOMEM;
	ref_init ( &ctrl->refcnt, nvme_tcp_free );
	intf_init ( &ctrl->block, &nvme_tcp_block_desc, &ctrl->refcnt );
	intf_init ( &ctrl->admin.socket, &nvme_tcp_socket_desc,
		    &ctrl->refcnt );
	intf_init ( &ctrl->io.socket, &nvme_tcp_socket_desc,
		    &ctrl->refcnt );
	timer_init ( &ctrl->timer, nvme_tcp_timer_expired, &ctrl->refcnt );
	ctrl->admin.ctrl = ctrl;
	ctrl->admin.qid = 0;
	ctrl->admin.up = nvme_tcp_admin_up;
	ctrl->admin.connected = nvme_tcp_admin_ready;
	INIT_LIST_HEAD ( &ctrl->admin.cmds );
	ctrl->io.ctrl = ctrl;
	ctrl->io.qid = 1;
	ctrl->io.up = nvme_tcp_io_up;
	ctrl->io.connected = nvme_tcp_io_ready;
	INIT_LIST_HEAD ( &ctrl->io.cmds );

	if ( ( rc = nvme_tcp_parse ( ctrl, uri ) ) != 0 )
		goto err;
	DBGC ( ctrl, "NVMe %p %s:%d %s as %s\n", ctrl, ctrl->host,
	       ctrl->port, ctrl->subnqn, ctrl->hostnqn );
	if ( ( rc = nvme_tcp_queue_open ( &ctrl->admin ) ) != 0 )
		goto err;

	intf_plug_plug ( &ctrl->block, parent );
	ref_put ( &ctrl->refcnt );
	return 0;

 err:
	nvme_tcp_close ( ctrl, rc );
	ref_put ( &ctrl->refcnt );
	return rc;
}

/** NVMe/TCP URI opener */
struct uri_opener nvme_tcp_uri_opener __uri_opener = {
	.scheme = "nvme",
	.open = nvme_tcp_open,
};


/**
 * Decode a 32-byte key in the NVMe interchange form (DH-HMAC-CHAP
 * secrets and TLS PSKs share it)
 *
 * @v text		<prefix><hh>:<base64(key || crc32)>:
 * @v prefix		"DHHC-1:" or "NVMeTLSkey-1:"
 * @v key		Key to fill in (32 bytes)
 * @ret hh		Transformation indicator (0: none, 1: SHA-256), or
 *			negative error (wrong form, size or CRC-32)
 */
int nvme_key_decode ( const char *text, const char *prefix, uint8_t *key ) {
	uint8_t raw[ 64 + 4 + 4 ];
	char b64[100];
	const char *p;
	const char *end;
	uint32_t crc;
	int len;
	int hh;

	if ( strncmp ( text, prefix, strlen ( prefix ) ) != 0 )
		return -EINVAL;
	p = ( text + strlen ( prefix ) );
	/* Only 00 and 01: larger hashes mean larger keys, not taken */
	if ( ( p[0] != '0' ) || ( p[1] < '0' ) || ( p[1] > '1' ) ||
	     ( p[2] != ':' ) )
		return -EINVAL;
	hh = ( p[1] - '0' );
	p += 3;
	end = strchr ( p, ':' );
	if ( ( ! end ) || ( end[1] != '\0' ) ||
	     ( ( size_t ) ( end - p ) >= sizeof ( b64 ) ) )
		return -EINVAL;
	memcpy ( b64, p, ( end - p ) );
	b64[ end - p ] = '\0';
	len = base64_decode ( b64, raw, sizeof ( raw ) );
	memset ( b64, 0, sizeof ( b64 ) );
	if ( len != ( 32 + 4 ) ) {
		memset ( raw, 0, sizeof ( raw ) );
		return -EINVAL;
	}
	crc = ~crc32_le ( ~0U, raw, 32 );
	if ( ( raw[32] | ( raw[33] << 8 ) | ( raw[34] << 16 ) |
	       ( ( uint32_t ) raw[35] << 24 ) ) != crc ) {
		memset ( raw, 0, sizeof ( raw ) );
		return -EINVAL;
	}
	memcpy ( key, raw, 32 );
	memset ( raw, 0, sizeof ( raw ) );
	return hh;
}
