/*
 * provider_cq: completion timestamps, the device clock and ibv_resize_cq
 * through the provider (TestProviderCQ), on an RC QP connected to itself.
 * A CQ made with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP gives each completion
 * the device clock's time it was made at, between two readings of
 * ibv_query_rt_values_ex taken around the post and after the completion
 * came (the clock is the host's CLOCK_REALTIME in ns, hca_core_clock 1 GHz,
 * so the wall-clock reading is the same). ibv_resize_cq keeps the
 * completions a CQ holds, each once, refuses fewer entries than it holds
 * (EINVAL), and keeps an arm. ibv_create_cq_ex's errnos are mlx5's. The
 * exit status is the number of checks that failed.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "checks.h"

static uint64_t device_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	if (ibv_query_rt_values_ex(ctx, &v) || !(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
		return 0;
	return (uint64_t)v.raw_clock.tv_sec * 1000000000u + (uint64_t)v.raw_clock.tv_nsec;
}

/* send posts a signaled SEND of 8 bytes of buf and its receive. */
static int send(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t id)
{
	uint8_t *buf = mr->addr;
	struct ibv_sge rs = {(uintptr_t)buf + 64 * (id % 32), 64, mr->lkey}, ss = {(uintptr_t)buf + 4096, 8, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = id, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_send_wr swr = {.wr_id = id, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED}, *sbad;
	return ibv_post_recv(qp, &rwr, &rbad) || ibv_post_send(qp, &swr, &sbad);
}

/* poll_one waits for one completion of cq into wc. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 100000000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n == 1 && wc->status == IBV_WC_SUCCESS;
	}
	return 0;
}

/* take_ts takes one completion of an extended CQ and its timestamps. */
static int take_ts(struct ibv_cq_ex *cq, uint64_t *id, uint64_t *ts, uint64_t *wall)
{
	struct ibv_poll_cq_attr attr = {0};
	for (long i = 0; i < 100000000; i++) {
		int err = ibv_start_poll(cq, &attr);
		if (err == ENOENT)
			continue;
		if (err)
			return 0;
		int ok = cq->status == IBV_WC_SUCCESS;
		*id = cq->wr_id;
		*ts = ibv_wc_read_completion_ts(cq);
		*wall = ibv_wc_read_completion_wallclock_ns(cq);
		ibv_end_poll(cq);
		return ok;
	}
	return 0;
}

static void check_timestamps(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr)
{
	struct ibv_device_attr_ex attr;
	check(ibv_query_device_ex(ctx, NULL, &attr) == 0 && attr.completion_timestamp_mask == UINT64_MAX &&
		      attr.hca_core_clock == 1000000,
	      "completion_timestamp_mask all ones, hca_core_clock 1 GHz (in kHz)");
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK << 1};
	check(ibv_query_rt_values_ex(ctx, &v) == EINVAL, "ibv_query_rt_values_ex of an unknown value: EINVAL");
	struct ibv_cq_init_attr_ex cattr = {
		.cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
				      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS, .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cattr);
	check(cq != NULL, "ibv_create_cq_ex with both timestamps, single-threaded");
	struct ibv_cq_init_attr_ex bad = cattr;
	bad.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &bad) && errno == EOPNOTSUPP, "an overrun-ignoring CQ: EOPNOTSUPP");
	bad = cattr;
	bad.comp_mask = 1u << 7;
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &bad) && errno == EINVAL, "an unknown comp_mask bit: EINVAL");
	errno = 0;
	check(!ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors) && errno == EINVAL,
	      "a comp_vector out of range: EINVAL");
	if (!cq)
		return;
	struct ibv_qp_init_attr qattr = {.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
					 .qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 4, .max_recv_wr = 4,
									.max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qattr);
	if (!qp || connect_self(ctx, qp)) {
		check(0, "an RC QP connected to itself");
		return;
	}
	uint64_t before = device_clock(ctx);
	check(before != 0 && send(qp, mr, 1) == 0, "the clock read, a SEND posted");
	uint64_t id[2], ts[2], wall[2];
	int ok = take_ts(cq, &id[0], &ts[0], &wall[0]) && take_ts(cq, &id[1], &ts[1], &wall[1]);
	uint64_t after = device_clock(ctx);
	check(ok && id[0] == 1 && id[1] == 1, "the SEND's and the receive's completions");
	for (int i = 0; ok && i < 2; i++)
		ok = before <= ts[i] && ts[i] <= after && wall[i] == ts[i];
	check(ok, "each stamped between the clock's readings, wall clock the same ns");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

static void check_resize(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ch ? ibv_create_cq(ctx, 4, NULL, ch, 0) : NULL;
	struct ibv_qp_init_attr qattr = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = scq && rcq ? ibv_create_qp(pd, &qattr) : NULL;
	if (!qp || connect_self(ctx, qp)) {
		check(0, "two CQs, a channel and an RC QP connected to itself");
		return;
	}
	/* The receive completes before its SEND is acknowledged, so once
	 * the sends completed rcq holds the three receives. */
	struct ibv_wc wc;
	int ok = 1;
	for (uint64_t i = 0; ok && i < 3; i++)
		ok = send(qp, mr, i) == 0 && poll_one(scq, &wc) && wc.wr_id == i;
	check(ok, "three SENDs, their receives held in a CQ of 4");
	check(ibv_resize_cq(rcq, 2) == EINVAL && rcq->cqe == 4, "ibv_resize_cq below what it holds: EINVAL");
	check(ibv_resize_cq(rcq, 0) == EINVAL, "ibv_resize_cq to 0: EINVAL");
	check(ibv_resize_cq(rcq, 20) == 0 && rcq->cqe >= 20, "ibv_resize_cq to 20 holding three");
	for (uint64_t i = 3; ok && i < 20; i++)
		ok = send(qp, mr, i) == 0 && poll_one(scq, &wc) && wc.wr_id == i;
	check(ok, "17 more, more than the old ring held");
	for (uint64_t i = 0; ok && i < 20; i++)
		ok = poll_one(rcq, &wc) && wc.wr_id == i && wc.opcode == IBV_WC_RECV;
	check(ok && ibv_poll_cq(rcq, 1, &wc) == 0, "the 20 receives, each once, in order");

	check(ibv_req_notify_cq(rcq, 0) == 0 && ibv_resize_cq(rcq, 1) == 0 && rcq->cqe >= 1,
	      "armed, then resized to 1");
	check(send(qp, mr, 20) == 0 && poll_one(scq, &wc), "a SEND after the resize");
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	struct ibv_cq *ev = NULL;
	void *evctx;
	check(poll(&pfd, 1, 20000) == 1 && ibv_get_cq_event(ch, &ev, &evctx) == 0 && ev == rcq,
	      "the arm made before the resize sends its event");
	if (ev)
		ibv_ack_cq_events(ev, 1);
	check(poll_one(rcq, &wc) && wc.wr_id == 20, "its receive, from the new ring");
	ibv_destroy_qp(qp);
	check(ibv_destroy_cq(rcq) == 0 && ibv_destroy_cq(scq) == 0 && ibv_destroy_comp_channel(ch) == 0,
	      "destroying the QP, the CQs and the channel");
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	uint8_t *buf = calloc(1, 8192);
	struct ibv_mr *mr = pd && buf ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr) {
		perror("opening the device");
		return 100;
	}
	check_timestamps(ctx, pd, mr);
	check_resize(ctx, pd, mr);
	return failed;
}
