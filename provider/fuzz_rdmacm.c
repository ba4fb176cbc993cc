/*
 * fuzz_rdmacm.c: libFuzzer harness for what softnic's librdmacm decodes:
 * the daemon's event records (to_event: IDs looked up by handle, a
 * connect request's new ID, addresses, private data) and the addresses
 * rdma_getaddrinfo parses. `make fuzz` builds it with clang beside the
 * provider's harness; TestProviderFuzz runs both.
 *
 * It includes rdmacm_event.c, so that its static functions are in reach.
 * The first input byte picks the target.
 */
#include "rdmacm_event.c"

#include <netdb.h>
#include <stdio.h>

/* fuzz_event decodes a record against a listener (handle 1) and an ID
 * (handle 2) of a channel, and checks what the program would see. */
static void fuzz_event(const uint8_t *d, size_t n)
{
	struct sn_cm_event rec;
	if (n < sizeof(rec))
		return;
	memcpy(&rec, d, sizeof(rec));
	struct cm_channel ch = {.ch.fd = -1};
	pthread_mutex_init(&ch.lock, NULL);
	enum rdma_port_space ps = rec.reserved & 1 ? RDMA_PS_UDP : RDMA_PS_TCP;
	struct cm_id *listen = cm_new_id(&ch, 1, NULL, ps), *id = cm_new_id(&ch, 2, NULL, ps);
	struct cm_event *e = to_event(&rec);
	if (e) {
		const struct rdma_conn_param *p = &e->ev.param.conn;
		if (p->private_data && (p->private_data != e->private_data || p->private_data_len > SN_CM_PRIVATE_MAX))
			abort();
		/* The event is about the ID the record names: a connect request's
		 * listener is whichever ID it names, its new ID a new one. */
		struct cm_id *got = to_cm_id(e->ev.id), *named = rec.id == 1 ? listen : id;
		if (rec.type == RDMA_CM_EVENT_CONNECT_REQUEST
			    ? e->ev.listen_id != &(rec.listen == 1 ? listen : id)->id || got->handle != rec.id
			    : got != named)
			abort();
		if (ps == RDMA_PS_UDP && (e->ev.param.ud.qp_num != rec.qpn || e->ev.param.ud.qkey != rec.qkey))
			abort();
		sa_family_t f = got->id.route.addr.src_addr.sa_family;
		if (f != AF_UNSPEC && f != AF_INET && f != AF_INET6)
			abort();
		free(e);
	}
	while (cm_lib.ids) {
		struct cm_id *next = cm_lib.ids->next;
		free(cm_lib.ids);
		cm_lib.ids = next;
	}
	pthread_mutex_destroy(&ch.lock);
}

/* fuzz_getaddrinfo parses numeric addresses and ports (no lookups). */
static void fuzz_getaddrinfo(const uint8_t *d, size_t n)
{
	char node[64] = {0}, service[16] = {0};
	if (n < 2)
		return;
	size_t nl = n - 2 < sizeof(node) - 1 ? n - 2 : sizeof(node) - 1;
	memcpy(node, d + 2, nl);
	snprintf(service, sizeof(service), "%u", d[1] * 257u);
	struct rdma_addrinfo hints = {.ai_flags = RAI_NUMERICHOST | (d[0] & RAI_PASSIVE),
				      .ai_port_space = d[0] & 2 ? RDMA_PS_UDP : RDMA_PS_TCP};
	struct rdma_addrinfo *res = NULL;
	if (rdma_getaddrinfo(node, service, &hints, &res) == 0) {
		struct sockaddr *sa = res->ai_flags & RAI_PASSIVE ? res->ai_src_addr : res->ai_dst_addr;
		if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
			abort();
		rdma_freeaddrinfo(res);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (n < 1)
		return 0;
	if (d[0] & 1)
		fuzz_event(d + 1, n - 1);
	else
		fuzz_getaddrinfo(d + 1, n - 1);
	return 0;
}
