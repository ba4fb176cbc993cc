/*
 * provider_restart: a libibverbs program that outlives its softnic daemon
 * (TestProviderSurvivesDaemonRestart). It holds a PD, a completion
 * channel, a CQ, an RC QP and two MRs (one of whole pages, posix_memalign'd,
 * as perftest allocates), says "ready" and waits for a line on
 * stdin; meanwhile the test kills the daemon. Then every call must fail
 * cleanly (an error, not a crash and not a hang) and the teardown must
 * succeed, as after a hot-unplugged adapter, the pages keeping their
 * bytes. It says "closed" and waits for
 * a second line, while the test starts a new daemon, and then opens the
 * device again from a fresh device list and builds the same objects. The
 * exit status is the number of checks that failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "checks.h"

struct objects {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	/* Two whole pages. */
	struct ibv_mr *pmr;
	uint8_t *pages;
};

/* open_first opens the first device of a fresh device list. */
static struct ibv_context *open_first(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device (%d)\n", n);
		return NULL;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	return ctx;
}

/* build makes o's objects and moves the QP to INIT; 0 on success. */
static int build(struct objects *o)
{
	struct ibv_qp_init_attr init = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 16, .max_recv_wr = 16,
								      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				   .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	if (!(o->ctx = open_first()) || !(o->pd = ibv_alloc_pd(o->ctx)) ||
	    !(o->ch = ibv_create_comp_channel(o->ctx)) || !(o->cq = ibv_create_cq(o->ctx, 64, NULL, o->ch, 0)))
		return -1;
	init.send_cq = init.recv_cq = o->cq;
	if (!(o->qp = ibv_create_qp(o->pd, &init)) || !(o->buf = calloc(1, 4096)) ||
	    !(o->mr = ibv_reg_mr(o->pd, o->buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		return -1;
	if (posix_memalign((void **)&o->pages, 4096, 8192))
		return -1;
	for (int i = 0; i < 8192; i++)
		o->pages[i] = (uint8_t)(i * 13 + 1);
	if (!(o->pmr = ibv_reg_mr(o->pd, o->pages, 8192, IBV_ACCESS_LOCAL_WRITE)))
		return -1;
	return ibv_modify_qp(o->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* poll_until_gone polls the CQ until it reports an error: the provider
 * notices the daemon's end of the session within a bounded number of empty
 * polls. */
static int poll_until_gone(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	time_t deadline = time(NULL) + 20;
	while (time(NULL) < deadline) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return 1;
	}
	return 0;
}

/* after_daemon calls into every kind of object of a session whose daemon
 * was killed, then tears it all down. */
static void after_daemon(struct objects *o)
{
	check(poll_until_gone(o->cq), "ibv_poll_cq reports an error once the daemon is gone");
	struct ibv_sge sge = {.addr = (uintptr_t)o->buf, .length = 8, .lkey = o->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	check(ibv_post_send(o->qp, &wr, &bad) != 0 && bad == &wr, "ibv_post_send fails");
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad = NULL;
	check(ibv_post_recv(o->qp, &rwr, &rbad) != 0 && rbad == &rwr, "ibv_post_recv fails");
	errno = 0;
	check(ibv_reg_mr(o->pd, o->buf, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno != 0, "ibv_reg_mr fails with errno");
	errno = 0;
	check(ibv_create_cq(o->ctx, 16, NULL, NULL, 0) == NULL && errno != 0, "ibv_create_cq fails with errno");
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTR};
	check(ibv_modify_qp(o->qp, &attr, IBV_QP_STATE) != 0, "ibv_modify_qp fails");
	struct ibv_port_attr port;
	check(ibv_query_port(o->ctx, 1, &port) != 0, "ibv_query_port fails");
	/* An armed CQ's event will never come: the read of the channel must
	 * end (the daemon's end of the pipe is closed), not block. */
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	ibv_req_notify_cq(o->cq, 0);
	check(ibv_get_cq_event(o->ch, &ev_cq, &ev_ctx) != 0, "ibv_get_cq_event returns an error, not blocks");
	check(ibv_destroy_qp(o->qp) == 0, "ibv_destroy_qp succeeds");
	check(ibv_dereg_mr(o->mr) == 0, "ibv_dereg_mr succeeds");
	int kept = ibv_dereg_mr(o->pmr) == 0;
	for (int i = 0; i < 8192; i++)
		kept = kept && o->pages[i] == (uint8_t)(i * 13 + 1);
	check(kept, "ibv_dereg_mr of whole pages succeeds, their bytes unchanged");
	check(ibv_destroy_cq(o->cq) == 0, "ibv_destroy_cq succeeds");
	check(ibv_destroy_comp_channel(o->ch) == 0, "ibv_destroy_comp_channel succeeds");
	check(ibv_dealloc_pd(o->pd) == 0, "ibv_dealloc_pd succeeds");
	check(ibv_close_device(o->ctx) == 0, "ibv_close_device succeeds");
}

int main(void)
{
	struct objects first = {0}, again = {0};
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (build(&first) != 0) {
		perror("build the first objects");
		return 100;
	}
	wait_line("ready");
	after_daemon(&first);
	wait_line("closed");
	check(build(&again) == 0, "a new device list, context and objects on the new daemon");
	return failed;
}
