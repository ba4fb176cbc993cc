/*
 * cm_misuse.c: a librdmacm program that calls things out of order and
 * with arguments softnic cannot serve; each call must fail with the errno
 * librdmacm's callers expect, and the daemon must stay up. Built by
 * TestRDMACMMisuse against the system's headers, run through softnic exec
 * (softnic's librdmacm.so.1). Prints "all checks passed" or what failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

static int failed;

static void expect(const char *what, int ret, int want_errno)
{
	if (ret != -1 || errno != want_errno) {
		printf("FAIL %s: returned %d errno %d (%s), want -1 errno %d (%s)\n", what, ret, errno,
		       strerror(errno), want_errno, strerror(want_errno));
		failed = 1;
	} else
		printf("ok %s: %s\n", what, strerror(errno));
}

static struct sockaddr_in addr4(const char *a, int port)
{
	struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, a, &s.sin_addr);
	return s;
}

int main(int argc, char **argv)
{
	const char *mine = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	struct rdma_cm_id *id = NULL, *ib = NULL;
	expect("IPoIB port space", rdma_create_id(ch, &ib, NULL, RDMA_PS_IPOIB), EINVAL);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	expect("connect before resolving", rdma_connect(id, NULL), EINVAL);
	expect("accept without a request", rdma_accept(id, NULL), EINVAL);
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 1, .max_recv_wr = 1}};
	expect("QP before a device", rdma_create_qp(id, NULL, &qa), EINVAL);
	expect("disconnect unconnected", rdma_disconnect(id), EINVAL);
	struct sockaddr_in other = addr4("192.0.2.1", 7000);
	expect("bind to an address not ours", rdma_bind_addr(id, (struct sockaddr *)&other), EADDRNOTAVAIL);
	struct sockaddr_in me = addr4(mine, 7300);
	if (rdma_bind_addr(id, (struct sockaddr *)&me)) {
		perror("rdma_bind_addr");
		return 1;
	}
	struct rdma_cm_id *id2 = NULL;
	if (rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (rdma_listen(id, 1)) {
		perror("rdma_listen");
		return 1;
	}
	expect("bind to a port another ID listens on", rdma_bind_addr(id2, (struct sockaddr *)&me), EADDRINUSE);
	uint8_t timeout = 32, tos = 0x20, ack = 18;
	int reuse = 1;
	expect("ACK timeout above 31", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1), EINVAL);
	expect("REUSEADDR", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &reuse, sizeof(reuse)), ENOSYS);
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, 1) ||
	    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1)) {
		printf("FAIL an ACK timeout and a traffic class: %s\n", strerror(errno));
		failed = 1;
	}
	expect("migrate nothing", rdma_migrate_id(NULL, ch), EINVAL);
	expect("raw rsocket", rsocket(AF_INET, SOCK_RAW, 0), ENOTSUP);
	expect("stream rsocket of UDP", rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), ENOTSUP);
	int ds = rsocket(AF_INET, SOCK_DGRAM, 0);
	uint16_t short_size = 16;
	expect("datagram rsocket's queue size in 2 bytes", rsetsockopt(ds, SOL_RDMA, RDMA_SQSIZE, &short_size, 2), EINVAL);
	expect("datagram rsocket's queue size from nowhere", rsetsockopt(ds, SOL_RDMA, RDMA_SQSIZE, NULL, 4), EINVAL);
	rclose(ds);
	expect("init_qp_attr without attributes", rdma_init_qp_attr(id, NULL, NULL), EINVAL);
	struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR};
	int qmask = 0;
	expect("init_qp_attr for RTR with no connection", rdma_init_qp_attr(id, &rtr, &qmask), EINVAL);
	expect("establish with no connect response", rdma_establish(id), EINVAL);
	struct sockaddr_in mc = {.sin_family = AF_INET};
	expect("join_multicast of no group", rdma_join_multicast(id, (struct sockaddr *)&mc, NULL), EINVAL);
	mc.sin_addr.s_addr = htonl(0xef010203); /* 239.1.2.3 */
	expect("join_multicast on a TCP ID", rdma_join_multicast(id, (struct sockaddr *)&mc, NULL), EINVAL);
	expect("leave_multicast of a group not joined", rdma_leave_multicast(id, (struct sockaddr *)&mc), EADDRNOTAVAIL);
	expect("SRQ without attributes", rdma_create_srq(id, NULL, NULL), EINVAL);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	/* The ID bound to the device's address has the device's PD in id->pd
	 * (rdma-core's ucma_get_device), which rdma_create_srq leaves. */
	struct ibv_pd *device_pd = id->pd;
	if (!pd || !device_pd || rdma_create_srq(id, pd, &sa) || !id->srq || id->pd != device_pd) {
		printf("FAIL rdma_create_srq: %s\n", strerror(errno));
		failed = 1;
	} else
		printf("ok rdma_create_srq: the ID has its SRQ\n");
	expect("a second SRQ", rdma_create_srq(id, pd, &sa), EINVAL);
	rdma_destroy_srq(id);
	struct ibv_srq_init_attr_ex xa = {.comp_mask = IBV_SRQ_INIT_ATTR_TYPE, .srq_type = IBV_SRQT_XRC,
					  .attr = {.max_wr = 4, .max_sge = 1}};
	/* An XRC SRQ, as rdma-core's: in the library's XRC domain, with a
	 * receive CQ of the ID's, which rdma_destroy_srq takes with it. */
	uint32_t srqn = 0;
	if (id->srq || rdma_create_srq_ex(id, &xa) || !id->srq || !id->recv_cq || ibv_get_srq_num(id->srq, &srqn) ||
	    !srqn) {
		printf("FAIL rdma_create_srq_ex of an XRC SRQ: %s\n", strerror(errno));
		failed = 1;
	} else
		printf("ok rdma_create_srq_ex: an XRC SRQ, number %u\n", srqn);
	rdma_destroy_srq(id);
	if (id->srq || id->recv_cq) {
		printf("FAIL rdma_destroy_srq left the XRC SRQ or its CQ\n");
		failed = 1;
	}
	struct ibv_qp_init_attr_ex qx = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 1, .max_recv_wr = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_TSO};
	expect("a QP with TSO", rdma_create_qp_ex(id, &qx), EOPNOTSUPP);
	qx.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp_ex *qpx = NULL;
	if (rdma_create_qp_ex(id, &qx) || !id->qp || !(qpx = ibv_qp_to_qp_ex(id->qp)) || !qpx->wr_send ||
	    !qpx->wr_rdma_write || qpx->wr_rdma_read) {
		printf("FAIL rdma_create_qp_ex with send_ops_flags: %s\n", strerror(errno));
		failed = 1;
	} else
		printf("ok rdma_create_qp_ex with send_ops_flags: the QP has the ibv_wr_* operations asked for\n");
	rdma_destroy_qp(id);
	struct rdma_cm_event *ev;
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	expect("no event waits (non-blocking)", rdma_get_cm_event(ch, &ev), EAGAIN);
	expect("ack nothing", rdma_ack_cm_event(NULL), EINVAL);
	expect("destroy nothing", rdma_destroy_id(NULL), EINVAL);
	if (rdma_destroy_id(id2) || rdma_destroy_id(id)) {
		perror("rdma_destroy_id");
		failed = 1;
	}
	rdma_destroy_event_channel(ch);
	if (pd && ibv_dealloc_pd(pd)) {
		printf("FAIL ibv_dealloc_pd after rdma_destroy_srq: %s\n", strerror(errno));
		failed = 1;
	}
	printf(failed ? "some checks failed\n" : "all checks passed\n");
	return failed;
}
