/*
 * cm_addr.c: librdmacm's addressing as rdma-core's over the kernel's
 * rdma_cm gives it, through softnic's librdmacm.so.1: rdma_getaddrinfo
 * with the addresses in the hints (libfabric's, fi_pingpong's), binds to
 * 127.0.0.1 and to the wildcard addresses (no device, as the kernel's
 * cma_any_addr), connections to 127.0.0.1, 0.0.0.0 and the device's own
 * address, the device's PD in id->pd as soon as an ID has the device (the
 * same for every ID, gone with the last), and the errors of address
 * resolution: no route (ENETUNREACH at once), no host (ADDR_ERROR with
 * ETIMEDOUT after the timeout). Built by TestRDMACMAddressing against the
 * system's headers; argv: the device's IPv4 address, an address of its
 * subnet with no host, an address with no route. Prints "ok ..." per
 * check, "released" once every ID is gone (then waits for a line on
 * stdin, while the test counts the session's PDs), and "all checks
 * passed".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static int failed;

static void check(const char *what, int ok)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	if (!ok)
		failed = 1;
}

static struct sockaddr_in addr4(const char *a, int port)
{
	struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, a, &s.sin_addr);
	return s;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* next takes ch's next event, which must be want; it returns the event's
 * ID (the new one for a connect request) and its status. */
static struct rdma_cm_id *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int *status)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		exit(1);
	}
	if (ev->event != want) {
		printf("FAIL got %s (status %d), want %s\n", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		exit(1);
	}
	struct rdma_cm_id *id = ev->id;
	if (status)
		*status = ev->status;
	rdma_ack_cm_event(ev);
	return id;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return memcmp(a, b, sizeof(struct sockaddr_in)) == 0;
	return memcmp(a, b, sizeof(struct sockaddr_in6)) == 0;
}

static void getaddrinfo_checks(const char *mine)
{
	struct rdma_addrinfo *res = NULL;
	struct sockaddr_in src = addr4(mine, 7471), dst = addr4(mine, 7472);
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP, .ai_qp_type = IBV_QPT_RC,
				      .ai_src_addr = (struct sockaddr *)&src, .ai_src_len = sizeof(src)};
	int ret = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	check("rdma_getaddrinfo(NULL, NULL, passive hints with a source)",
	      ret == 0 && res && res->ai_flags == RAI_PASSIVE && res->ai_port_space == RDMA_PS_TCP &&
		      res->ai_qp_type == IBV_QPT_RC && res->ai_src_len == sizeof(src) &&
		      same_addr(res->ai_src_addr, (struct sockaddr *)&src) && !res->ai_dst_addr);
	if (!ret)
		rdma_freeaddrinfo(res);

	struct rdma_addrinfo active = {.ai_port_space = RDMA_PS_TCP,
				       .ai_src_addr = (struct sockaddr *)&src, .ai_src_len = sizeof(src),
				       .ai_dst_addr = (struct sockaddr *)&dst, .ai_dst_len = sizeof(dst)};
	ret = rdma_getaddrinfo(NULL, NULL, &active, &res);
	check("rdma_getaddrinfo(NULL, NULL, hints with both addresses)",
	      ret == 0 && res && !(res->ai_flags & RAI_PASSIVE) && same_addr(res->ai_dst_addr, (struct sockaddr *)&dst) &&
		      same_addr(res->ai_src_addr, (struct sockaddr *)&src));
	if (!ret)
		rdma_freeaddrinfo(res);

	errno = 0;
	ret = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	check("rdma_getaddrinfo(NULL, NULL, NULL): EINVAL", ret == -1 && errno == EINVAL);

	struct rdma_addrinfo ud = {.ai_qp_type = IBV_QPT_UD};
	ret = rdma_getaddrinfo("127.0.0.1", "7471", &ud, &res);
	check("rdma_getaddrinfo with a UD QP type: the UDP port space, the destination",
	      ret == 0 && res && res->ai_port_space == RDMA_PS_UDP && res->ai_qp_type == IBV_QPT_UD &&
		      res->ai_family == AF_INET && res->ai_dst_addr && !res->ai_src_addr && res->ai_flags == 0);
	if (!ret)
		rdma_freeaddrinfo(res);

	struct rdma_addrinfo numeric = {.ai_flags = RAI_NUMERICHOST};
	ret = rdma_getaddrinfo("localhost", "1", &numeric, &res);
	check("RAI_NUMERICHOST refuses a name", ret == EAI_NONAME);
	if (!ret)
		rdma_freeaddrinfo(res);
}

/* pair is a connection between two IDs of this process. */
struct pair {
	struct rdma_cm_id *cli, *srv;
	struct ibv_mr *cmr, *smr;
	char cbuf[64], sbuf[64];
};

static int qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 2, .max_recv_wr = 2,
								    .max_send_sge = 1, .max_recv_sge = 1}};
	return rdma_create_qp(id, NULL, &qa);
}

/* connect_to connects a new ID of cch to dst, which lid (on lch) listens
 * on, and sends a message over the connection. */
static void connect_to(const char *what, struct rdma_event_channel *cch, struct rdma_event_channel *lch,
		       struct sockaddr *dst, struct ibv_pd *device_pd, struct pair *p)
{
	char msg[160];
	memset(p, 0, sizeof(*p));
	if (rdma_create_id(cch, &p->cli, NULL, RDMA_PS_TCP) || rdma_resolve_addr(p->cli, NULL, dst, 2000)) {
		printf("FAIL %s: resolve: %s\n", what, strerror(errno));
		exit(1);
	}
	next(cch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	snprintf(msg, sizeof(msg), "%s: a resolved ID has the device and its PD", what);
	check(msg, p->cli->verbs && p->cli->pd && (!device_pd || p->cli->pd == device_pd));
	if (rdma_resolve_route(p->cli, 2000)) {
		perror("rdma_resolve_route");
		exit(1);
	}
	next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	if (qp(p->cli)) {
		perror("rdma_create_qp");
		exit(1);
	}
	snprintf(msg, sizeof(msg), "%s: rdma_create_qp without a PD uses id->pd", what);
	check(msg, p->cli->qp->pd == p->cli->pd);
	p->cmr = ibv_reg_mr(p->cli->pd, p->cbuf, sizeof(p->cbuf), IBV_ACCESS_LOCAL_WRITE);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	if (!p->cmr || rdma_connect(p->cli, &cp)) {
		perror("rdma_connect");
		exit(1);
	}
	p->srv = next(lch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	snprintf(msg, sizeof(msg), "%s: a connect request's ID has the device's PD", what);
	check(msg, p->srv->verbs && p->srv->pd && p->srv->pd == p->cli->pd);
	if (qp(p->srv) || !(p->smr = ibv_reg_mr(p->srv->pd, p->sbuf, sizeof(p->sbuf), IBV_ACCESS_LOCAL_WRITE)) ||
	    rdma_post_recv(p->srv, NULL, p->sbuf, sizeof(p->sbuf), p->smr) || rdma_accept(p->srv, NULL)) {
		perror("accept");
		exit(1);
	}
	next(cch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	next(lch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	snprintf(p->cbuf, sizeof(p->cbuf), "hello over %s", what);
	struct ibv_wc wc;
	if (rdma_post_send(p->cli, NULL, p->cbuf, strlen(p->cbuf) + 1, p->cmr, IBV_SEND_SIGNALED) ||
	    rdma_get_send_comp(p->cli, &wc) != 1 || wc.status != IBV_WC_SUCCESS || rdma_get_recv_comp(p->srv, &wc) != 1 ||
	    wc.status != IBV_WC_SUCCESS) {
		printf("FAIL %s: send: %s\n", what, strerror(errno));
		exit(1);
	}
	snprintf(msg, sizeof(msg), "%s: connected, the message went through", what);
	check(msg, strcmp(p->sbuf, p->cbuf) == 0);
}

static void close_pair(struct rdma_event_channel *cch, struct rdma_event_channel *lch, struct pair *p)
{
	rdma_disconnect(p->cli);
	next(cch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	next(lch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	ibv_dereg_mr(p->cmr);
	ibv_dereg_mr(p->smr);
	rdma_destroy_qp(p->cli);
	rdma_destroy_qp(p->srv);
	rdma_destroy_id(p->cli);
	rdma_destroy_id(p->srv);
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, struct sockaddr *a, const char *what)
{
	struct rdma_cm_id *id;
	char msg[160];
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_bind_addr(id, a)) {
		printf("FAIL bind %s: %s\n", what, strerror(errno));
		failed = 1;
		return NULL;
	}
	snprintf(msg, sizeof(msg), "bind %s: no device, no PD, a port", what);
	check(msg, !id->verbs && !id->pd && rdma_get_src_port(id) != 0);
	if (rdma_listen(id, 0)) {
		printf("FAIL listen on %s: %s\n", what, strerror(errno));
		failed = 1;
	}
	return id;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s MY_ADDR NO_HOST_ADDR NO_ROUTE_ADDR\n", argv[0]);
		return 2;
	}
	const char *mine = argv[1];
	getaddrinfo_checks(mine);

	struct rdma_event_channel *lch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	if (!lch || !cch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	/* What libfabric's fi_getinfo does for verbs;ofi_rxm: "localhost". */
	struct rdma_addrinfo lh = {.ai_flags = RAI_PASSIVE}, *res;
	if (rdma_getaddrinfo("localhost", NULL, &lh, &res)) {
		perror("rdma_getaddrinfo localhost");
		return 1;
	}
	struct rdma_cm_id *fab;
	check("rdma_bind_addr(localhost:0)", rdma_create_id(NULL, &fab, NULL, RDMA_PS_TCP) == 0 &&
						     rdma_bind_addr(fab, res->ai_src_addr) == 0 && !fab->verbs);
	rdma_destroy_id(fab);
	rdma_freeaddrinfo(res);

	struct sockaddr_in lo = addr4("127.0.0.1", 0);
	struct rdma_cm_id *l1 = listener(lch, (struct sockaddr *)&lo, "127.0.0.1:0");
	struct sockaddr_in to = addr4("127.0.0.1", ntohs(rdma_get_src_port(l1)));
	struct pair p;
	connect_to("127.0.0.1", cch, lch, (struct sockaddr *)&to, NULL, &p);
	struct ibv_pd *device_pd = p.cli->pd;
	struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(p.cli);
	check("a loopback connection's local address is 127.0.0.1", src->sin_family == AF_INET &&
									 src->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	struct pair q;
	struct sockaddr_in any_to = addr4("0.0.0.0", ntohs(rdma_get_src_port(l1)));
	connect_to("0.0.0.0", cch, lch, (struct sockaddr *)&any_to, device_pd, &q);
	close_pair(cch, lch, &q);
	close_pair(cch, lch, &p);
	rdma_destroy_id(l1);

	struct sockaddr_in any4 = addr4("0.0.0.0", 7481);
	struct rdma_cm_id *l2 = listener(lch, (struct sockaddr *)&any4, "0.0.0.0:7481");
	struct sockaddr_in own = addr4(mine, 7481);
	connect_to("the device's own address", cch, lch, (struct sockaddr *)&own, NULL, &p);
	close_pair(cch, lch, &p);
	rdma_destroy_id(l2);

	struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_port = htons(7482), .sin6_addr = IN6ADDR_ANY_INIT};
	struct rdma_cm_id *l3 = listener(lch, (struct sockaddr *)&any6, "[::]:7482");
	own.sin_port = htons(7482);
	connect_to("IPv4 to a listener on ::", cch, lch, (struct sockaddr *)&own, NULL, &p);
	close_pair(cch, lch, &p);
	rdma_destroy_id(l3);

	struct rdma_cm_id *id;
	struct sockaddr_in norte = addr4(argv[3], 7000);
	errno = 0;
	check("no route: rdma_resolve_addr fails with ENETUNREACH",
	      rdma_create_id(cch, &id, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(id, NULL, (struct sockaddr *)&norte, 1000) == -1 && errno == ENETUNREACH);
	rdma_destroy_id(id);

	struct sockaddr_in nobody = addr4(argv[2], 7000);
	int status = 0;
	double t0 = now();
	if (rdma_create_id(cch, &id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(id, NULL, (struct sockaddr *)&nobody, 1000)) {
		perror("resolve to no host");
		return 1;
	}
	next(cch, RDMA_CM_EVENT_ADDR_ERROR, &status);
	printf("no host: RDMA_CM_EVENT_ADDR_ERROR after %.2f s\n", now() - t0);
	check("no host: RDMA_CM_EVENT_ADDR_ERROR with -ETIMEDOUT", status == -ETIMEDOUT);
	rdma_destroy_id(id);

	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(lch);
	printf("released\n");
	fflush(stdout);
	char line[8];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	printf(failed ? "some checks failed\n" : "all checks passed\n");
	return failed;
}
