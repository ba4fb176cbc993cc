/*
 * rdmacm_core.c: the library's session, event channels and IDs, and the
 * address calls (bind, resolve, listen).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devmatch.h"
#include "rdmacm.h"

struct cm_lib cm_lib = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t cm_once = PTHREAD_ONCE_INIT;
static int cm_init_err;

/* cm_fail sets errno and returns -1, librdmacm's way. */
int cm_fail(int err)
{
	errno = err;
	return -1;
}

/* find_ops finds the provider's private entry point: in the global scope
 * when the provider is preloaded (softnic exec), else in the provider
 * libibverbs loaded from RDMAV_DRIVERS. */
static const struct softnic_rdmacm_ops *find_ops(void)
{
	softnic_rdmacm_ops_fn fn = (softnic_rdmacm_ops_fn)dlvsym(RTLD_DEFAULT, SOFTNIC_RDMACM_OPS, SOFTNIC_RDMACM_VERSION);
	const char *drivers = getenv("RDMAV_DRIVERS");
	if (!fn && drivers && *drivers) {
		char path[4096];
		int n = snprintf(path, sizeof(path), "%s-rdmav34.so", drivers);
		void *h = n > 0 && (size_t)n < sizeof(path) ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
		if (h)
			fn = (softnic_rdmacm_ops_fn)dlvsym(h, SOFTNIC_RDMACM_OPS, SOFTNIC_RDMACM_VERSION);
	}
	const struct softnic_rdmacm_ops *ops = fn ? fn() : NULL;
	return ops && ops->abi == SOFTNIC_RDMACM_ABI ? ops : NULL;
}

/* local_addr reports whether an interface of the caller's network
 * namespace has address a (16 bytes, IPv4 mapped). */
static int local_addr(const struct ifaddrs *ifs, const uint8_t a[16])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET && memcmp(a, mapped, 12) == 0 &&
		    memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr, a + 12, 4) == 0)
			return 1;
		if (i->ifa_addr->sa_family == AF_INET6 &&
		    memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, a, 16) == 0)
			return 1;
	}
	return 0;
}

/* in_netns reports whether the device's interface lives in the caller's
 * network namespace: an address of its GID table (a RoCE GID is an
 * interface's address) is one of this namespace's interfaces', link-local
 * ones aside (fe80::/10 may repeat across namespaces). The kernel's
 * rdma_cm takes only the devices whose netdev is in the caller's
 * namespace (cma.c matches a request to the listeners of its netdev's
 * namespace), so a listener here must not sit on another's device. */
static int in_netns(struct ibv_context *ctx, const struct ifaddrs *ifs)
{
	static const uint8_t zero[16];
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		return 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		if (ibv_query_gid(ctx, 1, i, &g) || memcmp(g.raw, zero, 16) == 0)
			continue;
		if (g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80)
			continue;
		if (local_addr(ifs, g.raw))
			return 1;
	}
	return 0;
}

/* open_device opens the first softnic device libibverbs lists whose
 * interface is in the caller's network namespace (in_netns): only the
 * devices libibverbs shows the program, and of those only the ones the
 * kernel's rdma_cm would take here. ENODEV if there is none. */
static struct ibv_context *open_device(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs)) {
		int err = errno;
		ibv_free_device_list(list);
		errno = err;
		return NULL;
	}
	struct ibv_context *ctx = NULL;
	int err = ENODEV;
	for (int i = 0; i < n && !ctx; i++) {
		if (!sn_devmatch(ibv_get_device_name(list[i]), list[i]->ibdev_path))
			continue;
		if (!(ctx = ibv_open_device(list[i]))) {
			err = errno;
			continue;
		}
		if (!in_netns(ctx, ifs)) {
			ibv_close_device(ctx);
			ctx = NULL;
		}
	}
	freeifaddrs(ifs);
	ibv_free_device_list(list);
	errno = ctx ? 0 : err;
	return ctx;
}

static void init_once(void)
{
	cm_lib.verbs = open_device();
	if (!cm_lib.verbs) {
		cm_init_err = errno ? errno : ENODEV;
		return;
	}
	cm_lib.ops = find_ops();
	struct ibv_device_attr a;
	if (!cm_lib.ops || ibv_query_device(cm_lib.verbs, &a)) {
		ibv_close_device(cm_lib.verbs);
		cm_lib.verbs = NULL;
		cm_init_err = ENOSYS; /* a provider without the CM's entry point */
		return;
	}
	cm_lib.max_responder = a.max_qp_rd_atom > 255 ? 255 : a.max_qp_rd_atom;
	cm_lib.max_initiator = a.max_qp_init_rd_atom > 255 ? 255 : a.max_qp_init_rd_atom;
}

/* cm_init opens the library's session once; 0 or -1 with errno. */
int cm_init(void)
{
	pthread_once(&cm_once, init_once);
	return cm_init_err ? cm_fail(cm_init_err) : 0;
}

/* cm_call sends a CM command on the session; 0 or -1 with errno. */
int cm_call(int op, const void *req, size_t req_len, void *reply, size_t reply_len)
{
	if (cm_init())
		return -1;
	int n = cm_lib.ops->cm_call(cm_lib.verbs, op, req, req_len, reply, reply_len, NULL, 0);
	return n < 0 ? -1 : 0;
}

CM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	if (cm_init())
		return NULL;
	struct cm_channel *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	struct sn_handle r;
	int fd = -1;
	int n = cm_lib.ops->cm_call(cm_lib.verbs, SN_OP_CM_CREATE_CHANNEL, NULL, 0, &r, sizeof(r), &fd, 1);
	if (n != 1) {
		int e = n == 0 ? EPROTO : errno; /* EMFILE: the user's descriptors are at the daemon's bound */
		if (n == 0) { /* a channel without its pipe is no use */
			struct sn_handle req = {r.handle};
			cm_call(SN_OP_CM_DESTROY_CHANNEL, &req, sizeof(req), NULL, 0);
		}
		free(c);
		errno = e;
		return NULL;
	}
	c->ch.fd = fd;
	c->handle = r.handle;
	pthread_mutex_init(&c->lock, NULL);
	return &c->ch;
}

/* rdma_destroy_event_channel has the daemon destroy the channel
 * (cm_destroy_channel), then closes its pipe. The call returns nothing,
 * as librdmacm's: a channel the daemon keeps (EBUSY: an ID still has its
 * events on it) stays with the session until it ends. */
CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cm_channel *c = (struct cm_channel *)channel;
	/* First marked, so that a thread the daemon's closing wakes finds it so. */
	pthread_mutex_lock(&c->lock);
	c->destroyed = 1;
	int asleep = c->sleepers;
	pthread_mutex_unlock(&c->lock);
	struct sn_handle req = {c->handle};
	int e = errno;
	cm_call(SN_OP_CM_DESTROY_CHANNEL, &req, sizeof(req), NULL, 0);
	errno = e;
	cm_drop_events(c, NULL);
	close(c->ch.fd);
	if (asleep)
		return; /* the sleepers sleep on (take_event), with the record */
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* cm_new_id makes the library's record of daemon ID handle and lists it. */
struct cm_id *cm_new_id(struct cm_channel *events, uint32_t handle, void *context, enum rdma_port_space ps)
{
	struct cm_id *id = calloc(1, sizeof(*id));
	if (!id)
		return NULL;
	id->handle = handle;
	id->events = events;
	id->id.channel = &events->ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	pthread_mutex_lock(&cm_lib.lock);
	id->next = cm_lib.ids;
	cm_lib.ids = id;
	pthread_mutex_unlock(&cm_lib.lock);
	return id;
}

/* cm_find returns the ID the daemon calls handle, or NULL. */
struct cm_id *cm_find(uint32_t handle)
{
	pthread_mutex_lock(&cm_lib.lock);
	struct cm_id *id = cm_lib.ids;
	while (id && id->handle != handle)
		id = id->next;
	pthread_mutex_unlock(&cm_lib.lock);
	return id;
}

/* cm_unlist takes id off the library's list. */
void cm_unlist(struct cm_id *id)
{
	pthread_mutex_lock(&cm_lib.lock);
	for (struct cm_id **p = &cm_lib.ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
	pthread_mutex_unlock(&cm_lib.lock);
}

/* put_pd lets go of one ID's use of the device's PD; the last use
 * deallocates it, as rdma-core's ucma_put_device (a PD that QPs still use
 * stays, for the next ID). */
static void put_pd(void)
{
	pthread_mutex_lock(&cm_lib.lock);
	if (cm_lib.pd_users > 0 && --cm_lib.pd_users == 0) {
		if (cm_lib.xrcd && ibv_close_xrcd(cm_lib.xrcd) == 0)
			cm_lib.xrcd = NULL;
		if (cm_lib.pd && ibv_dealloc_pd(cm_lib.pd) == 0)
			cm_lib.pd = NULL;
	}
	pthread_mutex_unlock(&cm_lib.lock);
}

/* cm_attach gives an ID the device once the daemon's ID has it (a bind
 * to a device's address, a resolved address, a connect request), with
 * the device's PD as id->pd, as rdma-core's ucma_get_device does (pyverbs
 * and others use it): the same PD for every ID, allocated by the first.
 * 0, or -1 with errno. */
int cm_attach(struct cm_id *id)
{
	if (id->has_dev)
		return 0;
	if (!cm_lib.verbs) { /* no device opened: nothing to attach to */
		errno = ENODEV;
		return -1;
	}
	pthread_mutex_lock(&cm_lib.lock);
	if (!cm_lib.pd)
		cm_lib.pd = ibv_alloc_pd(cm_lib.verbs);
	struct ibv_pd *pd = cm_lib.pd;
	if (pd)
		cm_lib.pd_users++;
	pthread_mutex_unlock(&cm_lib.lock);
	if (!pd)
		return -1;
	id->has_dev = 1;
	id->id.verbs = cm_lib.verbs;
	id->id.port_num = 1;
	if (!id->id.pd)
		id->id.pd = pd;
	return 0;
}

/* rdma_create_id: without a channel the ID is synchronous (each call
 * waits for its event on a channel of its own), as librdmacm's. */
CM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			     enum rdma_port_space ps)
{
	if (!id)
		return cm_fail(EINVAL);
	struct rdma_event_channel *own = NULL;
	if (!channel && !(channel = own = rdma_create_event_channel()))
		return -1;
	struct cm_channel *c = (struct cm_channel *)channel;
	struct sn_cm_create_id_req req = {.channel = c->handle, .port_space = ps};
	struct sn_handle r;
	struct cm_id *cid = NULL;
	if (cm_call(SN_OP_CM_CREATE_ID, &req, sizeof(req), &r, sizeof(r)) == 0 &&
	    !(cid = cm_new_id(c, r.handle, context, ps))) {
		struct sn_handle d = {r.handle};
		cm_call(SN_OP_CM_DESTROY_ID, &d, sizeof(d), NULL, 0);
		errno = ENOMEM;
	}
	if (!cid) {
		int err = errno;
		if (own)
			rdma_destroy_event_channel(own);
		return cm_fail(err);
	}
	cid->own = (struct cm_channel *)own;
	cid->sync = own != NULL;
	*id = &cid->id;
	return 0;
}

CM_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_handle req = {c->handle};
	int ret = cm_call(SN_OP_CM_DESTROY_ID, &req, sizeof(req), NULL, 0);
	if (ret && errno != ENOENT)
		return ret;
	cm_unlist(c);
	if (c->has_dev)
		put_pd();
	if (id->event)
		rdma_ack_cm_event(id->event);
	cm_drop_events(c->events, id);
	if (c->own)
		rdma_destroy_event_channel(&c->own->ch);
	cm_free_mcs(c); /* the daemon left them with the ID */
	free(c->ep_attr);
	free(c);
	return 0;
}

/* cm_addr_to_wire encodes a socket address for the host interface (IPv6,
 * IPv4 mapped) and returns its port as a number; NULL or another family
 * is none. */
uint16_t cm_addr_to_wire(const struct sockaddr *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &in->sin_addr, 4);
		return ntohs(in->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		memcpy(out, &in6->sin6_addr, 16);
		return ntohs(in6->sin6_port);
	}
	return 0;
}

/* cm_wire_to_addr decodes an address of the host interface; a mapped
 * IPv4 address becomes AF_INET, all zero with port 0 nothing. */
void cm_wire_to_addr(const uint8_t in[16], uint16_t port, struct sockaddr_storage *out)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t zero[16];
	memset(out, 0, sizeof(*out));
	if (memcmp(in, zero, 16) == 0 && port == 0)
		return;
	if (memcmp(in, mapped, 12) == 0) {
		struct sockaddr_in *s = (struct sockaddr_in *)out;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, in + 12, 4);
		return;
	}
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
	s6->sin6_family = AF_INET6;
	s6->sin6_port = htons(port);
	memcpy(&s6->sin6_addr, in, 16);
}

/* cm_any_addr reports whether a wire address is what the kernel's
 * cma_any_addr calls any: unspecified (:: or ::ffff:0.0.0.0) or loopback
 * (::1, 127.0.0.0/8). A bind to one attaches no device. */
int cm_any_addr(const uint8_t a[16])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t zero[16], one[16] = {[15] = 1};
	if (memcmp(a, mapped, 12) == 0)
		return a[12] == 127 || (a[12] == 0 && a[13] == 0 && a[14] == 0 && a[15] == 0);
	return memcmp(a, zero, 16) == 0 || memcmp(a, one, 16) == 0;
}

/* cm_set_addrs records the ID's addresses as the daemon gives them. */
void cm_set_addrs(struct cm_id *id, const struct sn_cm_addr_reply *r)
{
	cm_wire_to_addr(r->local, r->local_port, &id->id.route.addr.src_storage);
	cm_wire_to_addr(r->peer, r->peer_port, &id->id.route.addr.dst_storage);
}

CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_cm_bind_req req = {.id = c->handle};
	req.port = cm_addr_to_wire(addr, req.addr);
	struct sn_cm_addr_reply r;
	if (cm_call(SN_OP_CM_BIND, &req, sizeof(req), &r, sizeof(r)))
		return -1;
	cm_set_addrs(c, &r);
	/* A device's address puts the ID on the device, as the kernel's
	 * rdma_bind_addr; a wildcard or loopback one does not. */
	return cm_any_addr(r.local) ? 0 : cm_attach(c);
}

CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
				int timeout_ms)
{
	if (!id || !dst_addr || (dst_addr->sa_family != AF_INET && dst_addr->sa_family != AF_INET6))
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_cm_resolve_addr_req req = {.id = c->handle, .timeout_ms = timeout_ms < 0 ? 0 : timeout_ms};
	cm_addr_to_wire(src_addr, req.src);
	req.dst_port = cm_addr_to_wire(dst_addr, req.dst);
	if (cm_call(SN_OP_CM_RESOLVE_ADDR, &req, sizeof(req), NULL, 0))
		return -1;
	return cm_wait(c, RDMA_CM_EVENT_ADDR_RESOLVED);
}

CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_cm_id_timeout_req req = {.id = c->handle, .timeout_ms = timeout_ms < 0 ? 0 : timeout_ms};
	if (cm_call(SN_OP_CM_RESOLVE_ROUTE, &req, sizeof(req), NULL, 0))
		return -1;
	return cm_wait(c, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

CM_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_cm_id_timeout_req req = {.id = c->handle, .timeout_ms = backlog > 0 ? backlog : 0};
	struct sn_cm_addr_reply r;
	if (cm_call(SN_OP_CM_LISTEN, &req, sizeof(req), &r, sizeof(r)))
		return -1;
	cm_set_addrs(c, &r);
	return 0;
}

CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.src_addr;
	return sa->sa_family == AF_INET6 ? id->route.addr.src_sin6.sin6_port : id->route.addr.src_sin.sin_port;
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.dst_addr;
	return sa->sa_family == AF_INET6 ? id->route.addr.dst_sin6.sin6_port : id->route.addr.dst_sin.sin_port;
}

CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	if (cm_init())
		return NULL;
	struct ibv_context **list = calloc(2, sizeof(*list));
	if (!list)
		return NULL;
	list[0] = cm_lib.verbs;
	if (num_devices)
		*num_devices = 1;
	return list;
}

CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}
