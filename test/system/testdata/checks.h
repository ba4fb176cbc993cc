/*
 * checks.h: what the C test programs here share: a check says "ok  " or
 * "FAIL" and what it checked, one line each, and counts the failures for
 * the exit status; wait_line says a stop's name and waits for the test to
 * write a line to stdin (cProgram in cprogram_test.go); qp_init,
 * qp_rts and connect_qp take an RC QP to INIT and to RTS connected to a
 * peer, connect_self to itself.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int failed;

static inline void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failed++;
}

static inline void wait_line(const char *say)
{
	char line[64];
	printf("%s\n", say);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(100);
}

/* qp_init takes an RC QP to INIT with every remote right. */
static inline int qp_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						   IBV_ACCESS_REMOTE_ATOMIC};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* qp_rts takes a QP in INIT to RTS connected to QP dest_qpn at dgid, from
 * the port's GID sgid_index. */
static inline int qp_rts(struct ibv_qp *qp, int sgid_index, uint32_t dest_qpn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest_qpn,
				.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				.ah_attr = {.is_global = 1, .port_num = 1,
					    .grh = {.dgid = *dgid, .sgid_index = sgid_index, .hop_limit = 64}}};
	if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				.max_rd_atomic = 1};
	return ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* connect_qp takes a new RC QP to RTS connected to QP dest_qpn at dgid. */
static inline int connect_qp(struct ibv_qp *qp, int sgid_index, uint32_t dest_qpn, const union ibv_gid *dgid)
{
	return qp_init(qp) ? -1 : qp_rts(qp, sgid_index, dest_qpn, dgid);
}

/* connect_self takes qp to RTS connected to itself over the port's first
 * GID. */
static inline int connect_self(struct ibv_context *ctx, struct ibv_qp *qp)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return -1;
	return connect_qp(qp, 0, qp->qp_num, &gid);
}
