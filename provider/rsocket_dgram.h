/*
 * rsocket_dgram.h: what the files of datagram rsockets share: rdma-core's
 * wire headers, the socket's state, and the steps one file lends another
 * (rsocket_dgram.c describes the protocol).
 */
#ifndef SOFTNIC_RSOCKET_DGRAM_H
#define SOFTNIC_RSOCKET_DGRAM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "rsocket_int.h"

#define DS_UDP_TAG 0x55555555
#define DS_HDR4 8
#define DS_HDR6 24
#define DS_UDP4 16
#define DS_UDP6 28
#define DS_GRH 40 /* a UD receive's first bytes */
#define DS_DEF_MEM (1 << 17)
#define DS_DEF_QSIZE 384
#define DS_DEF_INLINE 64
#define DS_HOP_LIMIT 64

/* rdma-core's struct ds_header, byte for byte. */
struct ds_wire_hdr {
	uint8_t version;
	uint8_t length;
	uint16_t port; /* network order */
	union {
		uint32_t ipv4;
		struct {
			uint32_t flowinfo;
			uint8_t addr[16];
		} ipv6;
	} addr;
};

/* rdma-core's struct ds_udp_header, byte for byte. */
struct ds_wire_udp {
	uint32_t tag; /* big-endian */
	uint8_t version;
	uint8_t op;
	uint8_t length;
	uint8_t reserved;
	uint32_t qpn; /* big-endian; the low 24 bits */
	union {
		uint32_t ipv4;
		uint8_t ipv6[16];
	} addr;
};

_Static_assert(sizeof(struct ds_wire_hdr) == DS_HDR6 && offsetof(struct ds_wire_hdr, port) == 2 &&
		       offsetof(struct ds_wire_hdr, addr) == 4,
	       "ds_header: version, length, port, address");
_Static_assert(sizeof(struct ds_wire_udp) == DS_UDP6 && offsetof(struct ds_wire_udp, op) == 5 &&
		       offsetof(struct ds_wire_udp, qpn) == 8 && offsetof(struct ds_wire_udp, addr) == 12,
	       "ds_udp_header: tag, version, op, length, reserved, qpn, address");

union ds_addr {
	struct sockaddr sa;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
};

struct ds_qp {
	struct ds_qp *next;
	struct rdma_cm_id *id;
	union ds_addr local;
	struct ds_wire_hdr hdr; /* what starts each of its datagrams */
	struct ibv_mr *smr, *rmr;
	uint8_t *rbuf; /* rq_size slots of RS_SNDLOWAT, then the GRH's room */
	int cq_armed;
};

/* A peer: addr must come first (the tree compares it). */
struct ds_dest {
	union ds_addr addr;
	struct ds_qp *qp;
	struct ibv_ah *ah; /* NULL until the peer told its QPN */
	uint32_t qpn;
};

/* A received datagram: in a QP's receive slot, or (from UDP) copied. */
struct ds_msg {
	struct ds_qp *qp;
	uint32_t offset, length; /* length counts the header */
	uint8_t *copy;
};

struct ds_sock {
	int epfd;
	pthread_mutex_t lock;
	struct ds_qp *qps;
	void *dests; /* tsearch tree of struct ds_dest */
	struct ds_dest *conn;
	uint8_t *sbuf; /* sq_size send slots of RS_SNDLOWAT */
	int *free_slots, nfree;
	struct ds_msg *msgs; /* a ring of rq_size + 1 */
	int head, tail, rqe_avail;
	int dead; /* a completion channel hung up: the daemon is gone */
};

size_t ds_addrlen(const struct sockaddr *sa);
int ds_norm(const struct sockaddr *sa, socklen_t len, union ds_addr *out);
int ds_cmp(const void *a, const void *b);
void ds_gid(const union ds_addr *a, union ibv_gid *g);
void ds_format_hdr(struct ds_wire_hdr *h, const union ds_addr *a);
int ds_valid_hdr(const struct ds_wire_hdr *h, uint32_t len);
int ds_init_ep(struct rsock *rs);
int ds_post_recv(struct rsock *rs, struct ds_qp *qp, uint32_t offset);
void ds_free_qp(struct rsock *rs, struct ds_qp *qp);
int ds_src(struct rsock *rs, const union ds_addr *dst, union ds_addr *src);
struct ds_dest *ds_get_dest(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
void ds_set_ah(struct ds_dest *d, uint32_t qpn);
void ds_step(const struct rsock *rs, int *i);
void ds_progress(struct rsock *rs);
void ds_arm_cqs(struct rsock *rs);
void ds_take_events_locked(struct rsock *rs);
int ds_have_data(struct rsock *rs);
int ds_can_send(struct rsock *rs);
int ds_all_sent(struct rsock *rs);
int ds_wait(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs));
void ds_set_src(const struct ds_wire_hdr *h, struct sockaddr *addr, socklen_t *addrlen);
void ds_free_dest(void *p);

#endif
