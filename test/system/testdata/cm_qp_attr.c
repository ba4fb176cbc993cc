/*
 * cm_qp_attr: what ibv_query_qp says of an rdma_cm ID's QP, which the
 * daemon moved to RTS, and a 16-byte inline send on a QP that asked for
 * no inline data, as rdma_xclient -c r posts (TestProviderCMQPAttributes).
 *
 *   cm_qp_attr server ADDR PORT   listens on ADDR:PORT, says "listening"
 *   cm_qp_attr client ADDR PORT   connects to it
 *
 * Both sides make their QP with max_send_sge 1 and max_inline_data 0 (as
 * rdma_xclient does) and set the ACK timeout with rdma_set_option before
 * connecting or accepting: the client 18, the server 19. The client asks
 * for responder resources 2, initiator depth 3, retry count 5, RNR retry
 * count 6; the server answers 3 and 2, with RNR retry count 4. As the
 * kernel's rdma_cm sets them: the passive side's QP takes the REQ's retry
 * and RNR retry counts, the active side's its own retry count and the
 * REP's RNR retry count; each side's READ depth is what the other
 * answers for. The server queries its QP right after rdma_accept, before
 * ESTABLISHED (as rdma-core's test_rdmacm.py does), the client after
 * ESTABLISHED. Then each sends the other, inline, 16 bytes of what its
 * query said (QPN, both PSNs, timeout, both READ depths, path MTU), and
 * checks that the peer's agree with its own: its destination QPN is the
 * peer's QP, its receive PSN the peer's send PSN and the reverse, the same
 * path MTU. The exit status is the number of checks that failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>

#include "checks.h"

#define MSG_LEN 16

/* What a side tells the other of its QP: 16 bytes, sent inline. */
struct report {
	uint32_t qpn, sq_psn, rq_psn;
	uint8_t timeout, max_rd_atomic, max_dest_rd_atomic, path_mtu;
} __attribute__((packed));
_Static_assert(sizeof(struct report) == MSG_LEN, "report");

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		exit(100);
	}
	if (ev->event != want || ev->status) {
		fprintf(stderr, "event %s (status %d), not %s\n", rdma_event_str(ev->event), ev->status,
			rdma_event_str(want));
		exit(100);
	}
	return ev;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[MSG_LEN];
};

/* make_qp gives id its QP as rdma_xclient asks for it, and a receive. */
static void make_qp(struct side *s, uint8_t timeout)
{
	s->pd = ibv_alloc_pd(s->id->verbs);
	s->cq = s->pd ? ibv_create_cq(s->id->verbs, 8, NULL, NULL, 0) : NULL;
	s->mr = s->cq ? ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr a = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	if (!s->mr || rdma_create_qp(s->id, s->pd, &a)) {
		perror("rdma_create_qp");
		exit(100);
	}
	check(a.cap.max_inline_data >= MSG_LEN, "rdma_create_qp: a QP asked for no inline data takes 16 bytes");
	if (rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout))) {
		perror("rdma_set_option");
		exit(100);
	}
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = sizeof(s->buf), .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(s->id->qp, &wr, &bad))
		exit(100);
}

/* query checks what ibv_query_qp says of the connected QP, returns it in
 * *a and its report in *r. */
static void query(struct side *s, struct ibv_qp_attr *a, struct report *r, uint8_t timeout, uint8_t retry,
		  uint8_t rnr_retry, uint8_t rd, uint8_t dest_rd)
{
	struct ibv_qp_init_attr init;
	int mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER |
		   IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_AV | IBV_QP_CAP;
	if (ibv_query_qp(s->id->qp, a, mask, &init)) {
		perror("ibv_query_qp");
		exit(100);
	}
	struct ibv_port_attr port;
	if (ibv_query_port(s->id->verbs, 1, &port))
		exit(100);
	check(a->qp_state == IBV_QPS_RTS, "ibv_query_qp: RTS");
	check(a->timeout == timeout, "ibv_query_qp: the ACK timeout rdma_set_option set");
	check(a->retry_cnt == retry, "ibv_query_qp: the retry count");
	check(a->rnr_retry == rnr_retry, "ibv_query_qp: the RNR retry count");
	check(a->max_rd_atomic == rd && a->max_dest_rd_atomic == dest_rd, "ibv_query_qp: the READ depths");
	check(a->min_rnr_timer == 12, "ibv_query_qp: the minimum RNR timer the daemon sets (0.64 ms)");
	check(a->path_mtu == port.active_mtu, "ibv_query_qp: the path MTU, the port's active MTU");
	check(a->dest_qp_num != 0 && a->sq_psn < (1u << 24) && a->rq_psn < (1u << 24), "ibv_query_qp: peer QPN, PSNs");
	const int remote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	check((a->qp_access_flags & remote) == remote, "ibv_query_qp: remote access, for a peer with READ depth");
	check(a->port_num == 1 && a->ah_attr.is_global && a->ah_attr.grh.hop_limit > 0,
	      "ibv_query_qp: port 1, a global route");
	check(a->cap.max_inline_data >= MSG_LEN && init.cap.max_inline_data == a->cap.max_inline_data,
	      "ibv_query_qp: the inline room");
	*r = (struct report){.qpn = s->id->qp->qp_num, .sq_psn = a->sq_psn, .rq_psn = a->rq_psn, .timeout = a->timeout,
			     .max_rd_atomic = a->max_rd_atomic, .max_dest_rd_atomic = a->max_dest_rd_atomic,
			     .path_mtu = a->path_mtu};
}

/* send_report sends r inline (no registered memory: the bytes are in the
 * entry) and waits for its completion. It returns whether the peer's
 * report came meanwhile (its receive completed first: the bytes are in
 * buf). */
static int send_report(struct side *s, const struct report *r)
{
	struct ibv_sge sge = {.addr = (uintptr_t)r, .length = sizeof(*r)};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED},
			   *bad;
	check(ibv_post_send(s->id->qp, &wr, &bad) == 0, "a 16-byte inline send is taken");
	struct ibv_wc wc;
	int n, received = 0;
	while ((n = poll_one(s->cq, &wc)) == 1 && wc.wr_id != 7)
		received = wc.status == IBV_WC_SUCCESS && wc.byte_len == MSG_LEN;
	check(n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "and completes");
	return received;
}

/* take_report waits for the peer's report (or finds it taken already by
 * send_report's polling) and checks it against our QP's attributes. */
static void take_report(struct side *s, const struct ibv_qp_attr *a, int received)
{
	struct ibv_wc wc;
	if (!received)
		received = poll_one(s->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == MSG_LEN;
	check(received, "the peer's 16 bytes arrive");
	struct report p;
	memcpy(&p, s->buf, sizeof(p));
	check(a->dest_qp_num == p.qpn, "our destination QPN is the peer's QP");
	check(a->rq_psn == p.sq_psn && a->sq_psn == p.rq_psn, "our PSNs are the peer's the other way round");
	check(a->max_rd_atomic == p.max_dest_rd_atomic && a->max_dest_rd_atomic == p.max_rd_atomic,
	      "our READ depths match the peer's");
	check(a->path_mtu == p.path_mtu, "the peer's path MTU is ours");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: cm_qp_attr server|client ADDR PORT\n");
		return 100;
	}
	int server = strcmp(argv[1], "server") == 0;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
	if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1)
		return 100;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct side s = {0};
	struct rdma_cm_event *ev;
	struct ibv_qp_attr a;
	struct report mine;
	if (!ch)
		return 100;
	if (server) {
		struct rdma_cm_id *listen;
		if (rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) || rdma_bind_addr(listen, (struct sockaddr *)&sin) ||
		    rdma_listen(listen, 1)) {
			perror("listen");
			return 100;
		}
		printf("listening\n");
		ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		s.id = ev->id;
		check(ev->param.conn.responder_resources == 3 && ev->param.conn.initiator_depth == 2,
		      "the request's depths, from our side");
		rdma_ack_cm_event(ev);
		make_qp(&s, 19);
		struct rdma_conn_param p = {.responder_resources = 3, .initiator_depth = 2, .retry_count = 1,
					    .rnr_retry_count = 4};
		if (rdma_accept(s.id, &p)) {
			perror("rdma_accept");
			return 100;
		}
		/* After rdma_accept the QP is in RTS with what the daemon set. */
		query(&s, &a, &mine, 19, 5, 6, 2, 3);
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
		take_report(&s, &a, 0);
		send_report(&s, &mine);
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_destroy_qp(s.id);
		rdma_destroy_id(s.id);
		rdma_destroy_id(listen);
	} else {
		if (rdma_create_id(ch, &s.id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(s.id, NULL, (struct sockaddr *)&sin, 2000)) {
			perror("rdma_resolve_addr");
			return 100;
		}
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(s.id, 2000))
			return 100;
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		make_qp(&s, 18);
		struct rdma_conn_param p = {.responder_resources = 2, .initiator_depth = 3, .retry_count = 5,
					    .rnr_retry_count = 6};
		if (rdma_connect(s.id, &p)) {
			perror("rdma_connect");
			return 100;
		}
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
		query(&s, &a, &mine, 18, 5, 4, 3, 2);
		take_report(&s, &a, send_report(&s, &mine));
		rdma_disconnect(s.id);
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_destroy_qp(s.id);
		rdma_destroy_id(s.id);
	}
	ibv_dereg_mr(s.mr);
	ibv_destroy_cq(s.cq);
	ibv_dealloc_pd(s.pd);
	rdma_destroy_event_channel(ch);
	return failed;
}
