/*
 * provider.h: the softnic libibverbs provider's objects. Each wraps the
 * libibverbs object it extends (first, so that libibverbs' pointer is
 * ours) and holds the daemon's handle of it and, for queues, the shared
 * rings the daemon passed.
 */
#ifndef SOFTNIC_PROVIDER_H
#define SOFTNIC_PROVIDER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "abi34.h"
#include "hostif.h"

#define sn_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct sn_channel;

/*
 * What the processes that share a session share: its process and those
 * it forks, which the daemon lets make the session's objects
 * (daemon/sharers.go). One command at a time on the socket, whoever
 * sends it, so that each reads its own reply: a page mapped shared and
 * anonymous, which fork keeps shared, holds a process-shared, robust
 * lock and the sequence numbers.
 */
struct sn_calls {
	pthread_mutex_t lock;
	uint32_t seq;
};

/* sn_calls_new maps and initializes a session's sn_calls; NULL with errno. */
struct sn_calls *sn_calls_new(void);
void sn_calls_free(struct sn_calls *calls);

/*
 * A session with the daemon: one per ibv_open_device, shared by the
 * contexts ibv_import_device makes of that context's command descriptor
 * (import.c), as the kernel's imported context is the same uverbs file:
 * every handle is the session's, whichever context made it. The last
 * context to close, in any order, ends it.
 */
struct sn_session {
	int refs; /* contexts on it (atomic) */
	pid_t pid; /* the process that opened it */
	int sock; /* the control socket (SOCK_SEQPACKET) */
	int gone; /* the daemon closed the socket: the session's objects are gone (atomic) */
	struct sn_calls *calls; /* one command at a time on the socket, from any context or process */
	uint8_t *page; /* the session page: doorbell and sleeping words */
	int doorbell_fd; /* the daemon's eventfd, written only while it sleeps */
	struct sn_hello_reply limits;
	pthread_mutex_t channel_lock;
	struct sn_channel *channels; /* completion channels made through the daemon */
};

/* A device context, on its session. */
struct sn_context {
	struct verbs_context vctx; /* first: libibverbs allocates us with it */
	struct sn_session *s;
	struct sn_context *next; /* the process's softnic contexts (import.c) */
};

/* A completion channel created by the interposed ibv_create_comp_channel. */
struct sn_channel {
	struct ibv_comp_channel ch;
	uint32_t handle;
	struct sn_channel *next;
};

struct sn_parent_domain;

struct sn_pd {
	struct ibv_pd ibv;
	uint32_t handle; /* a parent domain's: its contained PD's */
	struct sn_parent_domain *parent; /* set: this is a parent domain (domain.c) */
	int parents; /* parent domains holding this PD (atomic) */
};

struct sn_mr {
	struct sn_verbs_mr vmr;
	uint32_t handle;
};

struct sn_mw {
	struct ibv_mw ibv;
	uint32_t handle;
};

struct sn_ah {
	struct ibv_ah ibv;
	uint32_t handle;
};

/* The client's side of a work queue in shared memory. */
struct sn_wq {
	uint8_t *ring; /* its header, then depth entries of stride bytes */
	uint32_t mask, stride;
	uint32_t next; /* the next entry to fill; published as the producer index */
	pthread_spinlock_t lock; /* posters of one queue take turns */
};

struct sn_cq {
	union { /* ibv_create_cq_ex's CQs are ibv_cq_ex, which extends ibv_cq */
		struct ibv_cq ibv;
		struct ibv_cq_ex ex;
	};
	uint32_t handle;
	uint8_t *ring;
	size_t size;
	uint32_t mask;
	uint32_t next; /* the next entry to poll */
	uint32_t empty_polls; /* polls in a row that found nothing */
	pthread_spinlock_t lock;
	struct sn_cq_entry cur; /* the entry an extended poll (ibv_start_poll) is at */
};

/* The device clock: the host's CLOCK_REALTIME in ns (a 1 GHz clock, in
 * kHz as hca_core_clock gives it), which the daemon stamps completions
 * with (verbs/clock.go says why that clock). */
#define SN_HCA_CORE_CLOCK_KHZ 1000000

struct sn_qp {
	struct sn_verbs_qp vqp;
	uint32_t handle;
	uint8_t *mem; /* the send queue's ring, then the receive queue's */
	size_t size;
	struct sn_wq sq, rq;
	int has_rq; /* no receive queue with an SRQ */
	int sig_all; /* sq_sig_all: every send is signaled */
	uint32_t max_inline, max_send_sge, max_recv_sge;
	/* What query_qp answers: the attributes modify_qp set, and for a CM
	 * ID's QP (cm_id, the ID's handle) those the daemon set, fetched for
	 * each state it passed (cm_fetched: bit 0 INIT, 1 RTR, 2 RTS); under
	 * attr_lock. */
	pthread_mutex_t attr_lock;
	struct ibv_qp_attr attr;
	struct ibv_qp_cap cap;
	uint32_t cm_id;
	int cm_fetched;
	/* The work requests built between ibv_wr_start and ibv_wr_complete
	 * (extended.c): the first one's index, the first error, and the one
	 * being built, whose header goes into its entry when it is done. */
	uint32_t wr_first;
	int wr_err;
	uint8_t *wr_entry;
	struct sn_send_entry wr_cur;
};

struct sn_srq {
	struct ibv_srq ibv;
	/* struct verbs_srq's fields after its ibv_srq: an XRC SRQ's. */
	enum ibv_srq_type srq_type;
	void *xrcd;
	struct ibv_cq *cq;
	uint32_t srq_num;
	uint32_t handle;
	uint8_t *mem;
	size_t size;
	struct sn_wq wq;
	uint32_t max_sge, limit;
	int tm; /* a tag matching SRQ (tm.c), made by create_srq_ex */
};

/* An XRC domain (struct verbs_xrcd's layout). */
struct sn_xrcd {
	struct ibv_xrcd ibv;
	uint32_t comp_mask;
	uint32_t handle;
};

/* sn_pd_handle is the daemon's handle of pd. */
static inline uint32_t sn_pd_handle(struct ibv_pd *pd)
{
	return sn_container_of(pd, struct sn_pd, ibv)->handle;
}

static inline struct sn_context *to_ctx(struct ibv_context *c)
{
	return sn_container_of(c, struct sn_context, vctx.context);
}

/* sn_qp_state is the QP's state as the daemon last published it (it
 * follows the program's modify_qp, rdma_cm's moves and the transport's
 * moves to ERR alike). */
static inline enum ibv_qp_state sn_qp_state(struct sn_qp *qp)
{
	return __atomic_load_n((uint32_t *)(qp->mem + SN_WQ_STATE), __ATOMIC_ACQUIRE);
}

/* A send is refused at once in RESET, INIT and RTR, a receive in RESET
 * (IBTA C10-97.2.1: an immediate error, EINVAL as Linux rxe gives). */
static inline int sn_send_refused(struct sn_qp *qp)
{
	enum ibv_qp_state s = sn_qp_state(qp);
	return s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR;
}

static inline int sn_recv_refused(struct sn_qp *qp)
{
	return sn_qp_state(qp) == IBV_QPS_RESET;
}

/* control.c */
#define SN_MAX_SEND_FDS 8 /* descriptors a message may carry (the fuzz harness's replies too) */
struct sn_session *sn_session_new(void);
void sn_session_put(struct sn_session *s);
int sn_connect(struct sn_context *ctx, const char *ibdev_name);
int sn_hello(struct sn_context *ctx);
int sn_call(struct sn_context *ctx, enum sn_op op, const void *req, size_t req_len, void *reply, size_t reply_len,
	    int *fds, int max_fds);
int sn_call_fds(struct sn_context *ctx, enum sn_op op, const void *req, size_t req_len, const int *send_fds,
		int nsend, void *reply, size_t reply_len, int *fds, int max_fds);
void *sn_map_ring(int fd, size_t size);
void sn_ring_doorbell(struct sn_context *ctx);
int sn_daemon_gone(struct sn_context *ctx, int look);
int sn_destroy_handle(struct sn_context *ctx, enum sn_op op, uint32_t handle);

/* device.c */
extern const struct sn_device_ops sn_device_ops;
int sn_is_softnic(struct ibv_context *context);
void *sn_alloc_shared(struct ibv_context *context, size_t len, uint32_t *handle);
void sn_free_shared(struct ibv_context *context, void *addr, size_t len, uint32_t handle);
void sn_set_ops(struct sn_context *ctx);

/* objects.c, qp.c, datapath.c: the context's operations */
struct ibv_pd *sn_alloc_pd(struct ibv_context *context);
int sn_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *sn_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va, int access);
int sn_dereg_mr(struct sn_verbs_mr *mr);
int sn_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sges);
int sn_rereg_mr(struct sn_verbs_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access);
struct ibv_mw *sn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sn_dealloc_mw(struct ibv_mw *mw);
int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
void sn_put_bind(struct sn_send_entry *h, uint32_t rkey, const struct ibv_mw_bind_info *info);
struct ibv_ah *sn_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int sn_destroy_ah(struct ibv_ah *ah);
int sn_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
struct ibv_flow *sn_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *attr);
int sn_destroy_flow(struct ibv_flow *flow);
int sn_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
struct ibv_cq *sn_create_cq(struct ibv_context *context, int cqe, struct ibv_comp_channel *channel, int vector);
int sn_destroy_cq(struct ibv_cq *cq);
int sn_resize_cq(struct ibv_cq *cq, int cqe);
struct ibv_srq *sn_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
struct ibv_srq *sn_srq_created(struct ibv_context *context, struct sn_srq *srq, const struct sn_create_srq_reply *r,
			       int n, int fd, struct ibv_srq_attr *attr);
struct ibv_srq *sn_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int sn_post_srq_ops(struct ibv_srq *srq, struct ibv_ops_wr *wr, struct ibv_ops_wr **bad);
void sn_tm_caps(struct ibv_tm_caps *caps);
int sn_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int sn_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int sn_destroy_srq(struct ibv_srq *srq);
struct ibv_qp *sn_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
struct ibv_qp *sn_create_qp_for(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t cm_id);
struct ibv_qp *sn_create_qp_req(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, int op, void *req, size_t len,
				size_t handle_off);
struct ibv_qp *sn_create_rss_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_wq *sn_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *attr);
int sn_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr);
int sn_destroy_wq(struct ibv_wq *wq);
struct ibv_rwq_ind_table *sn_create_rwq_ind_table(struct ibv_context *context, struct ibv_rwq_ind_table_init_attr *attr);
int sn_destroy_rwq_ind_table(struct ibv_rwq_ind_table *table);
void sn_qp_remember(struct ibv_qp_attr *m, const struct ibv_qp_attr *a, int mask);
void sn_qp_record(struct sn_qp *qp, const struct ibv_qp_attr *a, int mask);
int sn_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int sn_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
int sn_destroy_qp(struct ibv_qp *qp);
int sn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sn_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sn_cq_empty(struct sn_cq *cq);
int sn_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int sn_wq_init(struct sn_wq *wq, uint8_t *ring, uint32_t depth, uint32_t stride);
int sn_srq_map(struct ibv_context *context, struct sn_srq *srq, int n, int fd, uint32_t handle, uint32_t depth,
	       uint32_t stride);

/* xrc.c: XRC domains, SRQs and receive QPs */
struct ibv_xrcd *sn_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
int sn_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *sn_create_xrc_srq(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int sn_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_qp *sn_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr);
struct ibv_qp *sn_create_xrc_recv_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *sn_xrc_recv_qp(struct ibv_context *context, enum sn_op op, uint32_t qpn, struct ibv_xrcd *xrcd,
			      void *qp_context);

/* extended.c: ibv_create_cq_ex's polling, ibv_create_qp_ex's ibv_wr_* */
struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *sn_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *sn_create_qp_wr(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t cm_id, const uint64_t *ops);

/* dm.c: device memory */
struct ibv_dm *sn_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr);
int sn_free_dm(struct ibv_dm *dm);
struct ibv_mr *sn_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t off, size_t length, unsigned int access);
struct ibv_dm *sn_import_dm(struct ibv_context *context, uint32_t handle);
void sn_unimport_dm(struct ibv_dm *dm);

/* domain.c: thread domains and parent domains */
struct ibv_td *sn_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr);
int sn_dealloc_td(struct ibv_td *td);
struct ibv_pd *sn_alloc_parent_domain(struct ibv_context *context, struct ibv_parent_domain_init_attr *attr);
int sn_dealloc_parent_domain(struct sn_pd *pd);
int sn_is_parent_domain(struct ibv_context *context, struct ibv_pd *pd);

/* import.c: contexts of one session (ibv_import_device) and imported objects */
void sn_context_register(struct sn_context *ctx);
void sn_context_unregister(struct sn_context *ctx);
struct ibv_pd *sn_import_pd(struct ibv_context *context, uint32_t handle);
void sn_unimport_pd(struct ibv_pd *pd);
struct ibv_mr *sn_import_mr(struct ibv_pd *pd, uint32_t handle);
void sn_unimport_mr(struct ibv_mr *mr);

/* channel.c */
uint32_t sn_channel_handle(struct sn_context *ctx, struct ibv_comp_channel *ch);

#endif
