/*
 * channel_destroy: channels a program makes and destroys in turn must not
 * pile up in the daemon (TestProviderDestroysChannels; #32: about 20,000
 * undestroyable completion channels took the daemon to its descriptor
 * limit). It says "ready" and waits for a line, then makes and destroys
 * COUNT completion channels (ibv_create_comp_channel, ibv_destroy_comp_channel)
 * and COUNT event channels (rdma_create_event_channel,
 * rdma_destroy_event_channel), checks that a channel with a CQ on it is
 * EBUSY and is destroyed once the CQ is, says "done" and waits for a line
 * while the test counts the daemon's descriptors. The exit status is the
 * number of checks that failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "checks.h"

#define COUNT 2000

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		perror("opening the device");
		return 100;
	}
	/* librdmacm's session opens at its first call. */
	struct rdma_event_channel *first = rdma_create_event_channel();
	check(first != NULL, "rdma_create_event_channel");
	if (!first)
		return 100;
	rdma_destroy_event_channel(first);
	wait_line("ready");

	int made = 0, destroyed = 0;
	for (int i = 0; i < COUNT; i++) {
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		made += ch != NULL;
		destroyed += ch && ibv_destroy_comp_channel(ch) == 0;
	}
	char what[128];
	snprintf(what, sizeof(what), "%d completion channels made and destroyed (%d, %d)", COUNT, made, destroyed);
	check(made == COUNT && destroyed == COUNT, what);
	made = 0;
	for (int i = 0; i < COUNT; i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		made += ch != NULL;
		if (ch)
			rdma_destroy_event_channel(ch);
	}
	snprintf(what, sizeof(what), "%d event channels made and destroyed (%d)", COUNT, made);
	check(made == COUNT, what);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	check(cq != NULL, "a CQ on a completion channel");
	if (!cq)
		return 100;
	check(ibv_destroy_comp_channel(ch) == EBUSY, "the channel is EBUSY while the CQ is on it");
	check(ibv_destroy_cq(cq) == 0 && ibv_destroy_comp_channel(ch) == 0, "and is destroyed once the CQ is");
	wait_line("done");
	check(ibv_close_device(ctx) == 0, "the context closes");
	ibv_free_device_list(list);
	return failed;
}
