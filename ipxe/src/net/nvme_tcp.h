#ifndef _NVME_TCP_H
#define _NVME_TCP_H

/** @file
 *
 * NVMe over TCP: wire structures (NVMe base specification 2.0 and the
 * NVMe/TCP transport specification 1.0), all little-endian.
 *
 */

FILE_LICENCE ( GPL2_OR_LATER );

#include <stdint.h>
#include <ipxe/interface.h>
#include <ipxe/socket.h>
#include <ipxe/uuid.h>

/** Default NVMe/TCP port (IANA "nvme-tcp"; seed 004's data port is 4421) */
#define NVME_TCP_PORT 4420

/** Queue depth asked for in Connect (admin and I/O) */
#define NVME_TCP_QUEUE_DEPTH 32

/** Keep Alive timeout asked for in the admin Connect (ms) */
#define NVME_TCP_KATO_MS 10000

/** Largest single Read or Write we issue (bytes) */
#define NVME_TCP_MAX_TRANSFER ( 128 * 1024 )

/** Identify data length */
#define NVME_IDENTIFY_LEN 4096

/** PDU types */
enum nvme_tcp_pdu_type {
	NVME_TCP_ICREQ = 0x00,
	NVME_TCP_ICRESP = 0x01,
	NVME_TCP_H2C_TERM = 0x02,
	NVME_TCP_C2H_TERM = 0x03,
	NVME_TCP_CMD = 0x04,
	NVME_TCP_RSP = 0x05,
	NVME_TCP_H2C_DATA = 0x06,
	NVME_TCP_C2H_DATA = 0x07,
	NVME_TCP_R2T = 0x09,
};

/** Data PDU flags */
#define NVME_TCP_F_DATA_LAST 0x04
#define NVME_TCP_F_DATA_SUCCESS 0x08

/** PDU common header */
struct nvme_tcp_hdr {
	uint8_t type;
	uint8_t flags;
	uint8_t hlen;
	uint8_t pdo;
	uint32_t plen;
} __attribute__ (( packed ));

/** SGL descriptor */
struct nvme_sgl {
	uint64_t addr;
	uint32_t length;
	uint8_t rsvd[3];
	uint8_t type;
} __attribute__ (( packed ));

/** SGL: data block, offset into the capsule's in-capsule data */
#define NVME_SGL_INCAPSULE 0x01
/** SGL: transport data block (C2HData, or H2CData on R2T) */
#define NVME_SGL_TRANSPORT 0x5a

/** Command flags: PSDT = SGL for data and metadata */
#define NVME_CMD_SGL_METABUF 0x40

/** Generic submission queue entry */
struct nvme_common_command {
	uint8_t opcode;
	uint8_t flags;
	uint16_t cid;
	uint32_t nsid;
	uint32_t cdw2[2];
	uint64_t metadata;
	struct nvme_sgl dptr;
	uint32_t cdw10;
	uint32_t cdw11;
	uint32_t cdw12;
	uint32_t cdw13;
	uint32_t cdw14;
	uint32_t cdw15;
} __attribute__ (( packed ));

/** Read and Write */
struct nvme_rw_command {
	uint8_t opcode;
	uint8_t flags;
	uint16_t cid;
	uint32_t nsid;
	uint32_t cdw2[2];
	uint64_t metadata;
	struct nvme_sgl dptr;
	uint64_t slba;
	uint16_t length;
	uint16_t control;
	uint32_t dsmgmt;
	uint32_t reftag;
	uint16_t apptag;
	uint16_t appmask;
} __attribute__ (( packed ));

/** Fabrics Connect */
struct nvmf_connect_command {
	uint8_t opcode;
	uint8_t resv1;
	uint16_t cid;
	uint8_t fctype;
	uint8_t resv2[19];
	struct nvme_sgl dptr;
	uint16_t recfmt;
	uint16_t qid;
	uint16_t sqsize;
	uint8_t cattr;
	uint8_t resv3;
	uint32_t kato;
	uint8_t resv4[12];
} __attribute__ (( packed ));

/** Fabrics Property Get / Set */
struct nvmf_property_command {
	uint8_t opcode;
	uint8_t resv1;
	uint16_t cid;
	uint8_t fctype;
	uint8_t resv2[19];
	struct nvme_sgl dptr;
	uint8_t attrib;
	uint8_t resv3[3];
	uint32_t offset;
	uint64_t value;
	uint8_t resv4[8];
} __attribute__ (( packed ));

/** Fabrics Authentication Send / Receive */
struct nvmf_auth_command {
	uint8_t opcode;
	uint8_t resv1;
	uint16_t cid;
	uint8_t fctype;
	uint8_t resv2[19];
	struct nvme_sgl dptr;
	uint8_t resv3;
	uint8_t spsp0;
	uint8_t spsp1;
	uint8_t secp;
	uint32_t al_tl;
	uint8_t resv4[16];
} __attribute__ (( packed ));

/** A submission queue entry */
union nvme_sqe {
	struct nvme_common_command common;
	struct nvme_rw_command rw;
	struct nvmf_connect_command connect;
	struct nvmf_property_command prop;
	struct nvmf_auth_command auth;
	uint8_t bytes[64];
};

/** A completion queue entry */
struct nvme_cqe {
	union {
		uint16_t u16;
		uint32_t u32;
		uint64_t u64;
	} __attribute__ (( packed )) result;
	uint16_t sq_head;
	uint16_t sq_id;
	uint16_t cid;
	uint16_t status;
} __attribute__ (( packed ));

/** Connect data (in-capsule) */
struct nvmf_connect_data {
	union uuid hostid;
	uint16_t cntlid;
	char resv4[238];
	char subsysnqn[256];
	char hostnqn[256];
	char resv5[256];
} __attribute__ (( packed ));

/** ICReq */
struct nvme_tcp_icreq_pdu {
	struct nvme_tcp_hdr hdr;
	uint16_t pfv;
	uint8_t hpda;
	uint8_t digest;
	uint32_t maxr2t;
	uint8_t rsvd[112];
} __attribute__ (( packed ));

/** ICResp */
struct nvme_tcp_icresp_pdu {
	struct nvme_tcp_hdr hdr;
	uint16_t pfv;
	uint8_t cpda;
	uint8_t digest;
	uint32_t maxdata;
	uint8_t rsvd[112];
} __attribute__ (( packed ));

/** Command capsule (without in-capsule data) */
struct nvme_tcp_cmd_pdu {
	struct nvme_tcp_hdr hdr;
	union nvme_sqe sqe;
} __attribute__ (( packed ));

/** Response capsule */
struct nvme_tcp_rsp_pdu {
	struct nvme_tcp_hdr hdr;
	struct nvme_cqe cqe;
} __attribute__ (( packed ));

/** C2HData / H2CData */
struct nvme_tcp_data_pdu {
	struct nvme_tcp_hdr hdr;
	uint16_t cccid;
	uint16_t ttag;
	uint32_t datao;
	uint32_t datal;
	uint8_t rsvd[4];
} __attribute__ (( packed ));

/** R2T */
struct nvme_tcp_r2t_pdu {
	struct nvme_tcp_hdr hdr;
	uint16_t cccid;
	uint16_t ttag;
	uint32_t r2to;
	uint32_t r2tl;
	uint8_t rsvd[4];
} __attribute__ (( packed ));

/** C2HTermReq */
struct nvme_tcp_term_pdu {
	struct nvme_tcp_hdr hdr;
	uint16_t fes;
	uint8_t fei[4];
	uint8_t rsvd[10];
} __attribute__ (( packed ));

/** Any PDU header */
union nvme_tcp_pdu {
	struct nvme_tcp_hdr common;
	struct nvme_tcp_icreq_pdu icreq;
	struct nvme_tcp_icresp_pdu icresp;
	struct nvme_tcp_cmd_pdu cmd;
	struct nvme_tcp_rsp_pdu rsp;
	struct nvme_tcp_data_pdu data;
	struct nvme_tcp_r2t_pdu r2t;
	struct nvme_tcp_term_pdu term;
};

/** Opcodes */
#define NVME_ADMIN_IDENTIFY 0x06
#define NVME_ADMIN_KEEP_ALIVE 0x18
#define NVME_FABRICS_COMMAND 0x7f
#define NVME_CMD_WRITE 0x01
#define NVME_CMD_READ 0x02

/** Fabrics command types */
#define NVME_FCTYPE_PROPERTY_SET 0x00
#define NVME_FCTYPE_CONNECT 0x01
#define NVME_FCTYPE_PROPERTY_GET 0x04
#define NVME_FCTYPE_AUTH_SEND 0x05
#define NVME_FCTYPE_AUTH_RECEIVE 0x06

/** Identify CNS values */
#define NVME_ID_CNS_NS 0x00
#define NVME_ID_CNS_CTRL 0x01
#define NVME_ID_CNS_NS_ACTIVE_LIST 0x02

/** Controller properties */
#define NVME_REG_CAP 0x00
#define NVME_REG_CC 0x14
#define NVME_REG_CSTS 0x1c

#define NVME_CC_ENABLE 0x00000001
#define NVME_CC_CSS_NVM 0x00000000
#define NVME_CC_SHN_NORMAL 0x00004000
#define NVME_CC_IOSQES ( 6 << 16 )
#define NVME_CC_IOCQES ( 4 << 20 )
#define NVME_CSTS_RDY 0x00000001
#define NVME_CSTS_CFS 0x00000002

/** Connect result: authentication required (TP 8006) */
#define NVME_CONNECT_AUTHREQ_ATR ( 1U << 17 )
#define NVME_CONNECT_AUTHREQ_ASCR ( 1U << 18 )

/** Status codes (SCT << 8 | SC) */
#define NVME_SC_INVALID_NS 0x00b
#define NVME_SC_CONNECT_INVALID_PARAM 0x182
#define NVME_SC_CONNECT_INVALID_HOST 0x184
#define NVME_SC_AUTH_REQUIRED 0x191
#define NVME_SC_ACCESS_DENIED 0x286

/** Namespace identifier types */
#define NVME_NIDT_EUI64 0x01
#define NVME_NIDT_NGUID 0x02

/** Identify Controller (the fields used here) */
struct nvme_id_ctrl {
	uint16_t vid;
	uint16_t ssvid;
	char sn[20];
	char mn[40];
	char fr[8];
	uint8_t rab;
	uint8_t ieee[3];
	uint8_t cmic;
	uint8_t mdts;
	uint16_t cntlid;
	uint8_t rest[4016];
} __attribute__ (( packed ));

/** Offset of IOCCSZ in the Identify Controller data (fabrics) */
#define NVME_ID_CTRL_IOCCSZ 1792

/** LBA format */
struct nvme_lbaf {
	uint16_t ms;
	uint8_t ds;
	uint8_t rp;
} __attribute__ (( packed ));

/** Identify Namespace (the fields used here) */
struct nvme_id_ns {
	uint64_t nsze;
	uint64_t ncap;
	uint64_t nuse;
	uint8_t nsfeat;
	uint8_t nlbaf;
	uint8_t flbas;
	uint8_t rest1[77];
	uint8_t nguid[16];
	uint8_t eui64[8];
	struct nvme_lbaf lbaf[64];
	uint8_t rest2[3712];
} __attribute__ (( packed ));

/** AUTH_Negotiate length */
#define NVME_AUTH_NEGOTIATE_LEN 72
/** Largest DH-HMAC-CHAP_Reply (header, two 32-byte values, ffdhe2048) */
#define NVME_AUTH_REPLY_MAX ( 16 + 2 * 32 + 256 )
/** Receive buffer for Authentication Receive */
#define NVME_AUTH_RECEIVE_LEN 1024
/** DH-HMAC-CHAP security protocol */
#define NVME_AUTH_SECP 0xe9

/** One DH-HMAC-CHAP transaction */
struct nvme_auth {
	/** Host NQN */
	const char *hostnqn;
	/** Subsystem NQN */
	const char *subnqn;
	/** Transaction ID */
	unsigned int t_id;
	/** Controller must authenticate itself */
	int bidirectional;
	/** Transformed host key */
	uint8_t host_key[32];
	/** Transformed controller key */
	uint8_t ctrl_key[32];
	/** Our sequence number for the controller's response */
	uint32_t seq2;
	/** The controller's response we expect */
	uint8_t expect[32];
};

extern int nvme_auth_init ( struct nvme_auth *auth, const char *hostnqn,
			    const char *subnqn, unsigned int t_id );
extern int nvme_auth_wants_ctrl ( void );
extern size_t nvme_auth_negotiate ( struct nvme_auth *auth, uint8_t *buf );
extern int nvme_auth_reply ( struct nvme_auth *auth, const uint8_t *msg,
			     size_t len, uint8_t *reply );
extern int nvme_auth_success1 ( struct nvme_auth *auth, const uint8_t *msg,
				size_t len );
extern int nvme_auth_ctrl_error ( void );
extern int nvme_auth_refused_error ( void );
extern size_t nvme_auth_finish ( struct nvme_auth *auth, int failed,
				 uint8_t *buf );

extern int nvme_tcp_secure ( struct interface *xfer, const char *host,
			     struct sockaddr *peer, const char *hostnqn,
			     const char *subnqn );
extern int nvme_key_decode ( const char *text, const char *prefix,
			     uint8_t *key );
extern int nvme_tls_retained_psk ( const char *hostnqn, uint8_t *retained );
extern void nvme_handover_publish ( const char *host, unsigned int port,
				    const char *subnqn, uint32_t nsid,
				    const char *hostnqn,
				    const union uuid *hostid );

#endif /* _NVME_TCP_H */
