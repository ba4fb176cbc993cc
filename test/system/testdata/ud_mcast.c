/*
 * ud_mcast: UD multicast through the provider (TestProviderUDMulticast):
 * ibv_attach_mcast and ibv_detach_mcast, and datagrams to a group.
 *
 *   ud_mcast recv|send
 *
 * Both attach two UD QPs of the device's first IPv4 GID to the group
 * 239.47.1.1 (as ::ffff:239.47.1.1) and post receives; the checks of
 * the device's multicast caps and of what ibv_attach_mcast and
 * ibv_detach_mcast refuse (EINVAL: an RC QP, a GID that is not a group,
 * a group the QP is not in) run on both. "recv" then prints "ready" and
 * waits for a line; "send" sends COUNT datagrams to QPN 0xFFFFFF from
 * a third QP, not attached, once the test relayed its "info QPN" line
 * to the receiver and told it "go". Each attached QP, the sender's device's two
 * as the peer's, must take COUNT datagrams from the sender's QPN, with
 * the group as the GRH's destination. The exit status is the number of
 * checks that failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "checks.h"

#define QKEY 0x22222222
#define COUNT 4
#define LEN 64
#define SLOT (40 + LEN)

static union ibv_gid group;

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = COUNT, .max_recv_wr = COUNT, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return NULL;
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return NULL;
	return qp;
}

/* refusals checks what ibv_attach_mcast and ibv_detach_mcast refuse. */
static void refusals(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_qp *ud, const union ibv_gid *own)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *rc = ibv_create_qp(pd, &ia);
	check(rc && ibv_attach_mcast(rc, &group, 0) == EINVAL, "attach an RC QP: EINVAL");
	check(ibv_attach_mcast(ud, own, 0) == EINVAL, "attach to a unicast GID: EINVAL");
	union ibv_gid other = group;
	other.raw[15]++;
	check(ibv_detach_mcast(ud, &other, 0) == EINVAL, "detach from a group not joined: EINVAL");
	check(ibv_attach_mcast(ud, &other, 0) == 0 && ibv_attach_mcast(ud, &other, 0) == 0 &&
		      ibv_detach_mcast(ud, &other, 0) == 0 && ibv_detach_mcast(ud, &other, 0) == EINVAL,
	      "attach twice, detach once, then EINVAL");
	if (rc)
		ibv_destroy_qp(rc);
}

/* take waits for COUNT datagrams on each of the two QPs, from src. */
static void take(struct ibv_cq *cq, struct ibv_qp **qps, uint32_t src, const uint8_t *buf)
{
	int got[2] = {0, 0}, bad = 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (got[0] + got[1] < 2 * COUNT) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (n < 0 || now.tv_sec - start.tv_sec > 20)
			break;
		if (n == 0)
			continue;
		int i = wc.qp_num == qps[0]->qp_num ? 0 : wc.qp_num == qps[1]->qp_num ? 1 : -1;
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || i < 0 || wc.src_qp != src ||
		    wc.byte_len != SLOT || !(wc.wc_flags & IBV_WC_GRH))
			bad++;
		else {
			const uint8_t *grh = buf + wc.wr_id * SLOT;
			if (memcmp(grh + 20 + 16, group.raw + 12, 4)) /* the IPv4 header's destination */
				bad++;
			got[i]++;
		}
	}
	char what[128];
	snprintf(what, sizeof(what), "each attached QP took %d datagrams from QP %u (%d and %d, %d bad)", COUNT, src, got[0],
		 got[1], bad);
	check(got[0] == COUNT && got[1] == COUNT && !bad, what);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2 || (strcmp(argv[1], "recv") && strcmp(argv[1], "send"))) {
		fprintf(stderr, "usage: ud_mcast recv|send\n");
		return 100;
	}
	int sender = strcmp(argv[1], "send") == 0;
	inet_pton(AF_INET6, "::ffff:239.47.1.1", group.raw);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_port_attr port;
	if (!ctx || ibv_query_port(ctx, 1, &port)) {
		perror("ibv_open_device");
		return 100;
	}
	int gid_index = -1;
	union ibv_gid own;
	for (int i = 0; i < port.gid_tbl_len && gid_index < 0; i++)
		if (!ibv_query_gid(ctx, 1, i, &own) && own.raw[10] == 0xff && own.raw[11] == 0xff)
			gid_index = i;
	struct ibv_device_attr da;
	check(!ibv_query_device(ctx, &da) && da.max_mcast_grp == 1024 && da.max_mcast_qp_attach == 56 &&
		      da.max_total_mcast_qp_attach == 1024 * 56,
	      "max_mcast_grp 1024, max_mcast_qp_attach 56, max_total_mcast_qp_attach their product");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4 * COUNT, NULL, NULL, 0);
	uint8_t *buf = calloc(2 * COUNT + 1, SLOT);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, (2 * COUNT + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp *qps[2] = {cq ? ud_qp(pd, cq) : NULL, cq ? ud_qp(pd, cq) : NULL};
	struct ibv_cq *scq = ibv_create_cq(ctx, COUNT, NULL, NULL, 0);
	struct ibv_qp *src = sender && scq ? ud_qp(pd, scq) : NULL;
	if (gid_index < 0 || !mr || !qps[0] || !qps[1] || (sender && !src)) {
		perror("setup");
		return 100;
	}
	for (int q = 0; q < 2; q++) {
		check(ibv_attach_mcast(qps[q], &group, 0) == 0, "ibv_attach_mcast");
		for (int i = 0; i < COUNT; i++) {
			uint64_t slot = q * COUNT + i;
			struct ibv_sge sge = {.addr = (uintptr_t)(buf + slot * SLOT), .length = SLOT, .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
			if (ibv_post_recv(qps[q], &wr, &bad))
				return 100;
		}
	}
	refusals(pd, cq, qps[0], &own);
	if (!sender) {
		/* The test relays the sender's "info QPN" line. */
		char line[64];
		unsigned int from = 0;
		printf("ready\n");
		if (!fgets(line, sizeof(line), stdin) || sscanf(line, "info %u", &from) != 1)
			return 100;
		take(cq, qps, from, buf);
	} else {
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
					 .grh = {.dgid = group, .sgid_index = gid_index, .hop_limit = 1}};
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		check(ah != NULL, "ibv_create_ah to the group");
		printf("info %u\n", src->qp_num);
		wait_line("go");
		uint8_t *out = buf + 2 * COUNT * SLOT;
		memset(out, 0x5a, LEN);
		for (int i = 0; ah && i < COUNT; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)out, .length = LEN, .lkey = mr->lkey};
			struct ibv_send_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED,
						 .wr.ud = {.ah = ah, .remote_qpn = 0xffffff, .remote_qkey = QKEY}},
					   *bad;
			check(ibv_post_send(src, &wr, &bad) == 0, "ibv_post_send to QPN 0xFFFFFF");
		}
		/* The sender's own device's attached QPs get the datagrams
		 * too (loopback), beside its send completions. */
		take(cq, qps, src->qp_num, buf);
		if (ah)
			ibv_destroy_ah(ah);
	}
	check(ibv_detach_mcast(qps[0], &group, 0) == 0 && ibv_detach_mcast(qps[1], &group, 0) == 0, "ibv_detach_mcast");
	printf(failed ? "%d checks failed\n" : "all checks passed\n", failed);
	return failed;
}
