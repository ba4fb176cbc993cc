/*
 * rsocket_int.h: softnic's rsockets, stream sockets over an RC QP that
 * speak rdma-core's rsockets protocol (librdmacm/rsocket.c), so that a
 * softnic rsocket talks to one on rxe or hardware.
 *
 * The protocol, as the peer expects it:
 *  - The connect request and its answer carry struct rs_wire_conn (40
 *    bytes): version 1, flags (IOMAP; NET when the host is big-endian),
 *    the receive queue depth as the peer's first credits (big-endian),
 *    the iomap size (scaled), and two rs_wire_sge in big-endian: the
 *    target SGL (where the peer writes credit updates; length = entries)
 *    and the first half of the receive buffer.
 *  - Every message is an RDMA WRITE WITH IMMEDIATE whose immediate is
 *    op << 29 | data: DATA (bytes written into the receive buffer),
 *    SGL (a credit update: data is the sequence number the sender may
 *    send up to; the write itself put the next free half of the receive
 *    buffer into the target SGL), IOMAP_SGL, CTRL (disconnect, shutdown,
 *    keepalive; zero-length).
 *  - Receives carry no buffer: the immediate is the message.
 */
#ifndef SOFTNIC_RSOCKET_INT_H
#define SOFTNIC_RSOCKET_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>

enum {
	RS_OP_DATA = 0,
	RS_OP_WRITE = 2, /* never sent: marks riowrite's completions */
	RS_OP_SGL = 4,
	RS_OP_IOMAP_SGL = 6,
	RS_OP_CTRL = 7,
};

enum { RS_CTRL_DISCONNECT, RS_CTRL_KEEPALIVE, RS_CTRL_SHUTDOWN };

#define RS_MSG(op, data) (((uint32_t)(op) << 29) | (uint32_t)(data))
#define RS_MSG_OP(m) ((m) >> 29)
#define RS_MSG_DATA(m) ((m)&0x1fffffff)
#define RS_WR_RECV (1ULL << 63)

#define RS_CONN_FLAG_NET (1 << 0)
#define RS_CONN_FLAG_IOMAP (1 << 1)

#define RS_SNDLOWAT 2048
#define RS_OLAP_START 2048
#define RS_MAX_TRANSFER 65536
#define RS_QP_MIN 16
#define RS_QP_MAX 0xfffe
#define RS_CTRL_SLOTS 4 /* control messages in flight; a power of 2 */
#define RS_SGL_ENTRIES 2

/* An SGE as the protocol writes it into the peer's target SGL. */
struct rs_wire_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/* An iomap entry: the peer's window at offset. */
struct rs_wire_iomap {
	uint64_t offset;
	struct rs_wire_sge sge;
};

struct rs_wire_conn {
	uint8_t version;
	uint8_t flags;
	uint16_t credits; /* big-endian */
	uint8_t reserved[3];
	uint8_t target_iomap_size;
	struct rs_wire_sge target_sgl; /* fields big-endian */
	struct rs_wire_sge data_buf;   /* fields big-endian */
};

/* rdma-core's struct rs_conn_data and struct rs_sge, byte for byte. */
_Static_assert(sizeof(struct rs_wire_conn) == 40, "rs_conn_data is 40 bytes on the wire");
_Static_assert(offsetof(struct rs_wire_conn, credits) == 2 && offsetof(struct rs_wire_conn, target_iomap_size) == 7 &&
		       offsetof(struct rs_wire_conn, target_sgl) == 8 && offsetof(struct rs_wire_conn, data_buf) == 24,
	       "rs_conn_data's fields");
_Static_assert(sizeof(struct rs_wire_sge) == 16 && offsetof(struct rs_wire_sge, key) == 8 &&
		       offsetof(struct rs_wire_sge, length) == 12,
	       "rs_sge: addr, key, length");
_Static_assert(sizeof(struct rs_wire_iomap) == 24, "rs_iomap: offset, then an rs_sge");

enum rs_state {
	RS_INIT = 0,
	RS_BOUND = 0x1,
	RS_LISTENING = 0x2,
	/* connecting or accepting, awaiting the CM event the state names */
	RS_OPENING = 0x10,
	RS_RESOLVING_ADDR = RS_OPENING | 0x20,
	RS_RESOLVING_ROUTE = RS_OPENING | 0x40,
	RS_CONNECTING = RS_OPENING | 0x80,
	RS_ACCEPTING = RS_OPENING | 0x08,
	RS_CONNECTED = 0x100,
	RS_WRITABLE = 0x200,
	RS_READABLE = 0x400,
	RS_RDWR = RS_CONNECTED | RS_WRITABLE | RS_READABLE,
	RS_CONNECT_ERROR = 0x800,
	RS_DISCONNECTED = 0x1000,
	RS_ERROR = 0x2000,
};

/* A region riomap offered: PROT_WRITE ones take a slot of the peer's
 * iomap, and are sent to it (pending) before the next send. */
struct rs_iomap_mr {
	uint64_t offset;
	struct ibv_mr *mr;
	int index; /* the slot in the peer's iomap; -1: not offered */
	int pending;
	struct rs_iomap_mr *next;
};

struct rs_msg {
	uint32_t op, data;
};

struct rsock {
	int fd; /* the number the program knows it by: the CM channel's fd */
	struct rdma_cm_id *id;
	int state, err;
	struct sockaddr_storage dst; /* where a connecting socket goes */
	int fs_flags; /* O_NONBLOCK */
	uint64_t so_opts, tcp_opts; /* options set, by bit number */
	int keepalive_time;
	int swap_sgl; /* the peer's byte order differs from ours */

	/* sizes, settable until the socket connects */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline, target_iomap_size;

	pthread_mutex_t slock, rlock, cq_lock, wait_lock;
	int cq_armed, unack_cqe;

	/* control messages: sequence and the completed limit */
	unsigned ctrl_seqno, ctrl_max_seqno;
	/* DATA messages sent (and the peer's limit); messages consumed and
	 * the point at which to give the peer credits again */
	uint16_t sseq_no, sseq_comp, rseq_no, rseq_comp;
	int sqe_avail;

	/* the peer's target SGL (where credits go) and iomap */
	int remote_sge;
	struct rs_wire_sge remote_sgl, remote_iomap;

	/* our target SGL, which the peer writes: where to send data */
	struct ibv_mr *target_mr;
	void *target_list;
	volatile struct rs_wire_sge *target_sgl;
	struct rs_wire_iomap *target_iomap;
	int target_sge;

	/* receive buffer the peer writes into, and the messages that say so */
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	int rbuf_bytes_avail, rbuf_free_offset, rbuf_offset;
	struct rs_msg *rmsg;
	int rmsg_head, rmsg_tail;

	pthread_mutex_t map_lock; /* iomaps */
	struct rs_iomap_mr *iomaps;
	int iomap_pending;

	/* the pages that hold rbuf, sbuf and target_list when the daemon
	 * shares them (rs_bufs); else NULL, and each is its own allocation */
	void *shared;
	size_t shared_len;
	uint32_t shared_handle;

	/* send buffer, a ring: ssgl[0].addr is where the next copy goes */
	uint8_t *sbuf;
	struct ibv_mr *smr;
	int sbuf_bytes_avail;
	struct ibv_sge ssgl[2];

	struct ds_sock *ds; /* a datagram rsocket's (rsocket_dgram.c); NULL for a stream one */
};

/* rsocket_core.c */
struct rsock *rs_get(int fd);
int rs_fail(int err);
int rs_nonblock(struct rsock *rs, int flags);
struct rsock *rs_first(int *next);
int rs_do_connect(struct rsock *rs);
int rs_opened(struct rsock *rs);
int rs_table_set(int fd, struct rsock *rs);

/* rsocket_bufs.c */
int rs_bufs(struct rsock *rs);
void rs_free_bufs(struct rsock *rs);

/* rsocket_send.c */
int rs_write_msg(struct rsock *rs, struct ibv_sge *sgl, int nsge, uint32_t msg, int flags, uint64_t addr,
		 uint32_t rkey, uint32_t wr_data);
int rs_post_ctrl(struct rsock *rs, uint32_t msg);
int rs_ctrl_avail(struct rsock *rs);
int rs_send_keepalive(struct rsock *rs);
void rs_send_done(struct rsock *rs, const struct ibv_wc *wc);
int rs_can_send(struct rsock *rs);
int rs_conn_can_send(struct rsock *rs);
int rs_wait_send(struct rsock *rs, int nonblock);
uint32_t rs_next_xfer(struct rsock *rs, uint32_t *olen, size_t left);
int rs_conn_can_ctrl(struct rsock *rs);
int rs_all_sends_done(struct rsock *rs);
int rs_stage(struct rsock *rs, const void *buf, uint32_t len, struct ibv_sge *sgl, int *flags);

/* rsocket_recv.c */
int rs_post_recv(struct rsock *rs);
int rs_take_cq_event(struct rsock *rs);
int rs_process(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs));
int rs_have_data(struct rsock *rs);
int rs_conn_have_data(struct rsock *rs);

/* rsocket_conf.c: /etc/rdma/rsocket's settings (rs_conf_load first) */
struct rs_conf {
	uint32_t polling_time, mem_default, wmem_default, sqsize_default, rqsize_default, inline_default,
		iomap_size;
};
extern struct rs_conf rs_conf;
void rs_conf_load(void);

/* rsocket_keepalive.c */
int rs_keepalive_set(struct rsock *rs, int on);
void rs_keepalive_forget(struct rsock *rs);

/* rsocket_io.c */
int rs_send_iomaps(struct rsock *rs, int nonblock);
void rs_free_iomaps(struct rsock *rs);

/* rsocket_dgram.c: datagram rsockets, which the r* calls hand to these */
struct iovec;
struct ds_sock;
int ds_socket(int domain, int type, int protocol);
int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
int ds_shutdown(struct rsock *rs, int how);
void ds_close(struct rsock *rs);
ssize_t ds_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
		 socklen_t tolen);
ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen);
short ds_revents(struct rsock *rs, short events);
int ds_arm(struct rsock *rs, short events);
void ds_take_events(struct rsock *rs);
int ds_setsockopt(struct rsock *rs, int level, int name, const void *val, socklen_t len);
int ds_getsockopt(struct rsock *rs, int level, int name, void *val, socklen_t *len);

#endif
