/*
 * rdmacm_event.c: events. The daemon queues each channel's events and
 * writes a byte to the channel's pipe for each; the library takes them
 * with cm_get_event until EAGAIN, and sleeps on the pipe when there is
 * none. Every byte read stands for at most one event taken, so a pipe
 * with an event waiting is never empty: a program that polls the
 * channel's fd does not miss one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm.h"

/* sleep_for_ever is what a thread asleep in rdma_get_cm_event does when
 * another thread destroys its channel: the kernel's read of a ucma file
 * holds the file, so its release waits, and the reader sleeps on until the
 * process ends (rping's event thread at exit does so). */
static void sleep_for_ever(void)
{
	for (;;)
		pause();
}

/* take_byte reads one byte of the pipe, waiting only if wait is set. */
static void take_byte(int fd, int wait)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	uint8_t b;
	if (wait || poll(&p, 1, 0) == 1) {
		if (read(fd, &b, 1) < 0) {
			/* EINTR or EAGAIN: the caller asks the daemon again */
		}
	}
}

/* try_record asks the daemon once for the channel's next event; with it,
 * it takes the event's byte from the pipe unless one was taken already
 * (credit). 0, or -1 with errno (EAGAIN: none waits). */
static int try_record(struct cm_channel *c, struct sn_cm_event *rec, int credit)
{
	struct {
		uint32_t channel;
	} __attribute__((packed)) req = {c->handle};
	if (cm_call(SN_OP_CM_GET_EVENT, &req, sizeof(req), rec, sizeof(*rec))) {
		/* The channel was destroyed meanwhile (another thread's
		 * rdma_destroy_event_channel): the kernel's closed fd says EBADF. */
		if (errno == ENOENT)
			errno = EBADF;
		return -1;
	}
	if (!credit)
		take_byte(c->ch.fd, 0);
	return 0;
}

/* conn_request makes the ID of a connect request, as the listener's. */
static struct cm_id *conn_request(const struct sn_cm_event *rec, struct cm_id *listen)
{
	struct cm_id *id = cm_new_id(listen->events, rec->id, listen->id.context, listen->id.ps);
	if (id)
		id->id.qp_type = listen->id.qp_type; /* an XRC listener's are XRC receive IDs */
	if (!id)
		return NULL;
	id->sync = listen->sync;
	id->peer_responder = rec->responder_resources;
	id->peer_initiator = rec->initiator_depth;
	if (cm_attach(id)) { /* the caller destroys the daemon's ID */
		cm_unlist(id);
		free(id);
		return NULL;
	}
	return id;
}

/* ud_param fills a UD ID's event: the peer's QP, Q_Key and address
 * vector (on RoCE a GRH to the peer's address as a GID). */
static void ud_param(struct rdma_ud_param *u, const struct sn_cm_event *rec, const void *data, size_t len)
{
	u->private_data = data;
	u->private_data_len = len > 255 ? 255 : len;
	u->qp_num = rec->qpn;
	u->qkey = rec->qkey;
	u->ah_attr.is_global = 1;
	u->ah_attr.port_num = 1;
	u->ah_attr.grh.sgid_index = rec->sgid_index;
	u->ah_attr.grh.hop_limit = rec->hop_limit;
	memcpy(u->ah_attr.grh.dgid.raw, rec->peer, 16);
}

/* to_event turns the daemon's record into the program's event, or NULL
 * when its ID is gone (the record is dropped). */
static struct cm_event *to_event(const struct sn_cm_event *rec)
{
	struct cm_id *listen = NULL, *id;
	if (rec->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		if (!(listen = cm_find(rec->listen)) || !(id = conn_request(rec, listen))) {
			struct sn_handle d = {rec->id}; /* rejects the request */
			cm_call(SN_OP_CM_DESTROY_ID, &d, sizeof(d), NULL, 0);
			return NULL;
		}
	} else if (!(id = cm_find(rec->id)))
		return NULL;
	struct cm_event *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	struct sn_cm_addr_reply a = {.local_port = rec->local_port, .peer_port = rec->peer_port};
	memcpy(a.local, rec->local, 16);
	memcpy(a.peer, rec->peer, 16);
	int mcast = rec->type == RDMA_CM_EVENT_MULTICAST_JOIN || rec->type == RDMA_CM_EVENT_MULTICAST_ERROR;
	if (rec->type != RDMA_CM_EVENT_ADDR_ERROR && !mcast) /* a multicast event's peer is the group */
		cm_set_addrs(id, &a);
	/* A resolved address has the device (cma.c's addr_handler acquires
	 * it), and with it the ID's PD. */
	int attach_err = rec->type == RDMA_CM_EVENT_ADDR_RESOLVED && cm_attach(id) ? errno : 0;
	e->ev.id = &id->id;
	e->ev.listen_id = listen ? &listen->id : NULL;
	e->ev.event = attach_err ? RDMA_CM_EVENT_ADDR_ERROR : rec->type;
	e->ev.status = attach_err ? -attach_err : rec->status;
	size_t len = rec->private_len < SN_CM_PRIVATE_MAX ? rec->private_len : SN_CM_PRIVATE_MAX;
	memcpy(e->private_data, rec->private_data, len);
	if (mcast) { /* the group's address vector; the join's context, as librdmacm gives it */
		ud_param(&e->ev.param.ud, rec, NULL, 0);
		e->ev.param.ud.private_data = cm_mc_context(id, rec->peer);
		return e;
	}
	if (id->id.qp_type == IBV_QPT_UD) {
		ud_param(&e->ev.param.ud, rec, len ? e->private_data : NULL, len);
		return e;
	}
	/* The daemon gives the peer's depths; the program sees its own side's,
	 * as the kernel reports them: what the peer issues is what we answer. */
	struct rdma_conn_param *p = &e->ev.param.conn;
	p->private_data = len ? e->private_data : NULL;
	p->private_data_len = len > 255 ? 255 : len;
	p->responder_resources = rec->initiator_depth;
	p->initiator_depth = rec->responder_resources;
	p->retry_count = rec->retry_count;
	p->rnr_retry_count = rec->rnr_retry_count;
	if (rec->type == RDMA_CM_EVENT_REJECTED || (rec->type == RDMA_CM_EVENT_UNREACHABLE && rec->reason))
		e->ev.status = rec->reason; /* the kernel's: the REJ's reason, a SIDR_REP's status */
	return e;
}

/* unstash takes the stash's first event for id (any with NULL). Called
 * with c->lock held. */
static struct cm_event *unstash(struct cm_channel *c, struct rdma_cm_id *id)
{
	for (struct cm_event **p = &c->stash; *p; p = &(*p)->next) {
		struct cm_event *e = *p;
		if (!id || e->ev.id == id || e->ev.listen_id == id) {
			*p = e->next;
			e->next = NULL;
			return e;
		}
	}
	return NULL;
}

static void stash(struct cm_channel *c, struct cm_event *e)
{
	struct cm_event **tail = &c->stash;
	while (*tail)
		tail = &(*tail)->next;
	*tail = e;
}

/* take_event returns the channel's next event for id (any with NULL),
 * from the stash or the daemon; others it meets go to the stash. It
 * sleeps on the pipe without the channel's lock, so that other threads
 * may destroy IDs meanwhile. */
static struct cm_event *take_event(struct cm_channel *c, struct rdma_cm_id *id)
{
	int credit = 0; /* a byte read while waiting, owed to the next event */
	for (;;) {
		pthread_mutex_lock(&c->lock);
		struct cm_event *e = unstash(c, id);
		struct sn_cm_event rec;
		int err = 0;
		if (!e && try_record(c, &rec, credit) == 0) {
			credit = 0;
			if ((e = to_event(&rec)) && id && e->ev.id != id && e->ev.listen_id != id) {
				stash(c, e);
				e = NULL;
			}
		} else if (!e)
			err = errno;
		pthread_mutex_unlock(&c->lock);
		if (e)
			return e;
		if (!err)
			continue;
		int fl = fcntl(c->ch.fd, F_GETFL);
		if (err != EAGAIN || fl < 0 || (fl & O_NONBLOCK)) {
			errno = err != EAGAIN ? err : (fl < 0 ? errno : EAGAIN);
			return NULL;
		}
		pthread_mutex_lock(&c->lock);
		c->sleepers++;
		pthread_mutex_unlock(&c->lock);
		take_byte(c->ch.fd, 1);
		pthread_mutex_lock(&c->lock);
		c->sleepers--;
		int destroyed = c->destroyed;
		pthread_mutex_unlock(&c->lock);
		if (destroyed)
			sleep_for_ever();
		credit = 1;
	}
}

CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return cm_fail(EINVAL);
	struct cm_event *e = take_event((struct cm_channel *)channel, NULL);
	if (!e)
		return -1;
	*event = &e->ev;
	return 0;
}

CM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return cm_fail(EINVAL);
	free((struct cm_event *)event);
	return 0;
}

/* cm_drop_events frees what the stash holds for id (everything with NULL). */
void cm_drop_events(struct cm_channel *c, struct rdma_cm_id *id)
{
	pthread_mutex_lock(&c->lock);
	for (struct cm_event **p = &c->stash; *p;) {
		struct cm_event *e = *p;
		if (!id || e->ev.id == id || e->ev.listen_id == id) {
			*p = e->next;
			free(e);
		} else
			p = &e->next;
	}
	pthread_mutex_unlock(&c->lock);
}

/* cm_wait is librdmacm's synchronous completion: for an ID made without a
 * channel, wait for its next event, keep it in id->event, and fail as
 * librdmacm does when it is not want or carries an error. */
int cm_wait(struct cm_id *id, enum rdma_cm_event_type want)
{
	if (!id->sync)
		return 0;
	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	struct cm_event *e = take_event(id->events, &id->id);
	if (!e)
		return -1;
	id->id.event = &e->ev;
	if (e->ev.event == RDMA_CM_EVENT_REJECTED)
		return cm_fail(ECONNREFUSED);
	if (e->ev.status)
		return cm_fail(e->ev.status < 0 ? -e->ev.status : e->ev.status);
	return e->ev.event == want ? 0 : cm_fail(EINVAL);
}

/* rdma_get_request takes a synchronous listener's next connect request;
 * with rdma_create_ep's QP attributes, the new ID gets its QP. */
CM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *l = to_cm_id(listen);
	if (!listen || !id || !l->sync)
		return cm_fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct cm_event *e;
	while ((e = take_event(l->events, listen)) && e->ev.event != RDMA_CM_EVENT_CONNECT_REQUEST)
		free(e); /* a listener has no other events */
	if (!e)
		return -1;
	struct cm_id *c = to_cm_id(e->ev.id);
	if (l->ep_attr) {
		struct ibv_qp_init_attr attr = *l->ep_attr;
		if (cm_create_qp(c, listen->pd, &attr, NULL)) {
			int err = errno;
			rdma_ack_cm_event(&e->ev);
			rdma_destroy_id(&c->id);
			return cm_fail(err);
		}
	}
	c->id.event = &e->ev;
	*id = &c->id;
	return 0;
}

/* migrate has the daemon send id's events to to. */
static int migrate(struct cm_id *c, struct cm_channel *to)
{
	struct sn_cm_migrate_req req = {.id = c->handle, .channel = to->handle};
	if (cm_call(SN_OP_CM_MIGRATE_ID, &req, sizeof(req), NULL, 0))
		return -1;
	c->events = to;
	c->id.channel = &to->ch;
	return 0;
}

/* move_stash moves what the library took from the daemon for id from one
 * channel's stash to another's. A connect request's new ID goes with it,
 * as the kernel gives it the channel its request is read from. */
static void move_stash(struct cm_channel *from, struct cm_channel *to, struct rdma_cm_id *id)
{
	struct cm_event *moved = NULL, **tail = &moved, *e;
	pthread_mutex_lock(&from->lock);
	while ((e = unstash(from, id))) {
		*tail = e;
		tail = &e->next;
	}
	pthread_mutex_unlock(&from->lock);
	for (e = moved; e; e = e->next)
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id == id)
			migrate(to_cm_id(e->ev.id), to);
	pthread_mutex_lock(&to->lock);
	while (moved) {
		e = moved;
		moved = e->next;
		e->next = NULL;
		stash(to, e);
	}
	pthread_mutex_unlock(&to->lock);
}

/* in_use reports whether an ID other than c gets its events on ch. */
static int in_use(struct cm_channel *ch, struct cm_id *c)
{
	pthread_mutex_lock(&cm_lib.lock);
	struct cm_id *i = cm_lib.ids;
	while (i && (i == c || i->events != ch))
		i = i->next;
	pthread_mutex_unlock(&cm_lib.lock);
	return i != NULL;
}

/* rdma_migrate_id sends the ID's events to channel from now on, those
 * not yet taken too; without a channel the ID becomes synchronous. A
 * synchronous ID's own channel goes once no ID uses it. */
CM_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct rdma_event_channel *own = NULL;
	if (!channel && !(channel = own = rdma_create_event_channel()))
		return -1;
	struct cm_channel *from = c->events, *to = (struct cm_channel *)channel, *old_own = c->own;
	if (migrate(c, to)) {
		int err = errno;
		if (own)
			rdma_destroy_event_channel(own);
		return cm_fail(err);
	}
	move_stash(from, to, id);
	c->own = (struct cm_channel *)own;
	c->sync = own != NULL;
	if (old_own && old_own != to && !in_use(old_own, c))
		rdma_destroy_event_channel(&old_own->ch);
	return 0;
}

static const char *const event_names[] = {
	"RDMA_CM_EVENT_ADDR_RESOLVED",	 "RDMA_CM_EVENT_ADDR_ERROR",	  "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR",	 "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR",	 "RDMA_CM_EVENT_UNREACHABLE",	  "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED",	 "RDMA_CM_EVENT_DISCONNECTED",	  "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN",	 "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
};

CM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	unsigned i = event;
	return i < sizeof(event_names) / sizeof(event_names[0]) ? event_names[i] : "UNKNOWN EVENT";
}
