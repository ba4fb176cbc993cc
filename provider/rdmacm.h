/*
 * rdmacm.h: softnic's librdmacm.so.1, a replacement for rdma-core's that
 * carries the connection manager through the daemon's cm_* commands
 * (docs/HOST-INTERFACE.md) instead of the kernel's /dev/infiniband/rdma_cm.
 *
 * The library opens the first softnic device with ibv_open_device (so
 * through the provider: one session) and runs every ID on that session,
 * using the provider's private entry point (softnic_rdmacm.h). An event
 * channel's fd is the daemon's pipe for it.
 */
#ifndef SOFTNIC_RDMACM_LIB_H
#define SOFTNIC_RDMACM_LIB_H

#include <pthread.h>
#include <stdint.h>

#include <rdma/rdma_cma.h>

#include "hostif.h"
#include "softnic_rdmacm.h"

#define CM_EXPORT __attribute__((visibility("default")))

/* The library's one session and what it learned of the device. */
struct cm_lib {
	struct ibv_context *verbs;
	const struct softnic_rdmacm_ops *ops;
	uint8_t max_responder, max_initiator; /* the device's READ and atomic depths */
	/* The device's PD, which every ID that has the device holds (id->pd,
	 * as rdma-core's ucma_get_device gives it) and QPs made without one
	 * take; pd_users counts the IDs, and the last one deallocates it. */
	struct ibv_pd *pd;
	int pd_users;
	/* The device's XRC domain (private), which XRC IDs' receive QPs and
	 * SRQs take as rdma-core's ucma_get_xrcd gives it; closed with pd. */
	struct ibv_xrcd *xrcd;
	pthread_mutex_t lock; /* the ID list, pd and pd_users */
	struct cm_id *ids;
};

extern struct cm_lib cm_lib;

/* An event as the program sees it, with room for its private data. */
struct cm_event {
	struct rdma_cm_event ev;
	uint8_t private_data[SN_CM_PRIVATE_MAX];
	struct cm_event *next;
};

/* An event channel: the daemon's, whose pipe is ch.fd. Events taken from
 * the daemon that a synchronous call did not want wait in stash. */
struct cm_channel {
	struct rdma_event_channel ch;
	uint32_t handle;
	pthread_mutex_t lock; /* one taker at a time; stash; the two below */
	struct cm_event *stash;
	/* sleepers: threads asleep on the pipe in rdma_get_cm_event;
	 * destroyed: rdma_destroy_event_channel came meanwhile, which then
	 * leaves the record to them (rdmacm_event.c, take_event). */
	int sleepers, destroyed;
};

/* A multicast group an ID joined, with the program's context for it. */
struct cm_mc {
	uint8_t addr[16]; /* as on the wire */
	void *context;
	struct cm_mc *next;
};

struct cm_id {
	struct rdma_cm_id id;
	uint32_t handle;
	struct cm_channel *events; /* where the daemon sends this ID's events */
	struct cm_channel *own; /* a synchronous ID's private channel */
	int sync;
	uint8_t peer_responder, peer_initiator; /* from a connect request */
	struct ibv_qp_init_attr *ep_attr; /* rdma_create_ep's, for rdma_get_request's IDs */
	int own_cqs; /* rdma_create_qp made the CQs and their channels */
	int has_dev; /* the ID has the device, and holds a use of cm_lib.pd */
	struct cm_mc *mcs; /* the groups joined, under cm_lib.lock */
	struct cm_id *next;
};

static inline struct cm_id *to_cm_id(struct rdma_cm_id *id)
{
	return (struct cm_id *)id;
}

/* rdmacm_core.c */
int cm_init(void);
int cm_call(int op, const void *req, size_t req_len, void *reply, size_t reply_len);
int cm_fail(int err);
struct cm_id *cm_find(uint32_t handle);
void cm_unlist(struct cm_id *id);
struct cm_id *cm_new_id(struct cm_channel *events, uint32_t handle, void *context, enum rdma_port_space ps);
uint16_t cm_addr_to_wire(const struct sockaddr *sa, uint8_t out[16]);
void cm_wire_to_addr(const uint8_t in[16], uint16_t port, struct sockaddr_storage *out);
void cm_set_addrs(struct cm_id *id, const struct sn_cm_addr_reply *r);
int cm_attach(struct cm_id *id);
int cm_any_addr(const uint8_t a[16]);

/* rdmacm_event.c */
int cm_wait(struct cm_id *id, enum rdma_cm_event_type want);
void cm_drop_events(struct cm_channel *c, struct rdma_cm_id *id);

/* rdmacm_mcast.c */
void *cm_mc_context(struct cm_id *id, const uint8_t a[16]);
void cm_free_mcs(struct cm_id *id);

/* rdmacm_qp.c */
int cm_create_qp(struct cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr, const uint64_t *send_ops);

#endif
