/*
 * checks.h: what the C test programs here share: a check says "ok  " or
 * "FAIL" and what it checked, one line each, and counts the failures for
 * the exit status; wait_line says a stop's name and waits for the test to
 * write a line to stdin (cProgram in cprogram_test.go); memfd_backed
 * tells memory the provider shares with the daemon (provider/sharemem.c);
 * connect_self makes an RC QP its own peer.
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

/* memfd_backed says whether the mapping that holds p is the provider's
 * memfd. */
static inline int memfd_backed(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= (uintptr_t)p && (uintptr_t)p < hi) {
			found = strstr(line, "memfd:softnic-mr") != NULL;
			break;
		}
	}
	if (f)
		fclose(f);
	return found;
}

/* connect_self takes qp to RTS connected to itself over the port's first
 * GID. */
static inline int connect_self(struct ibv_context *ctx, struct ibv_qp *qp)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return -1;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						   IBV_ACCESS_REMOTE_ATOMIC};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
				.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				.ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .hop_limit = 64}}};
	if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				.max_rd_atomic = 1};
	return ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}
