/*
 * raw_flow.c: raw packet QPs and flows through the provider. "eperm":
 * without CAP_NET_RAW, ibv_create_qp of IBV_QPT_RAW_PACKET and
 * ibv_create_wq fail with EPERM. "recv": a raw QP with a flow on UDP
 * port 5678 to a group MAC; after "go", exactly one frame, the matching
 * one, whole. "send": a frame to port 9999, then one to port 5678.
 */
#include <errno.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "checks.h"

static const uint8_t group[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};

enum { SLOT = 256, FRAME = 14 + 20 + 8 + 32 };

/* frame builds an Ethernet/IPv4/UDP frame to the group, to UDP port. */
static void frame(uint8_t *f, uint16_t port)
{
	memset(f, 0, FRAME);
	memcpy(f, group, 6);
	f[6] = 0x02;
	f[12] = 0x08;
	f[14] = 0x45;
	f[14 + 3] = FRAME - 14;
	f[14 + 8] = 64;
	f[14 + 9] = 17;
	uint8_t *udp = f + 34;
	udp[0] = 0x04, udp[1] = 0xd2; /* 1234 */
	udp[2] = port >> 8, udp[3] = port & 0xff;
	udp[5] = FRAME - 34;
	for (int i = 0; i < 32; i++)
		udp[8 + i] = (uint8_t)(i * 7 + port);
}

static struct ibv_qp *raw_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	return ibv_create_qp(pd, &ia);
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* poll_one waits up to 5 s for a completion. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < 5000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		usleep(1000);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	check(ctx != NULL, "open the device");
	if (!ctx)
		return 1;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static uint8_t buf[5 * SLOT];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	check(pd && cq && mr, "a PD, a CQ and a region");
	if (!strcmp(mode, "eperm")) {
		errno = 0;
		struct ibv_qp *qp = raw_qp(pd, cq);
		check(!qp && errno == EPERM, "a raw packet QP without CAP_NET_RAW: EPERM");
		struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1, .pd = pd, .cq = cq};
		errno = 0;
		check(!ibv_create_wq(ctx, &wa) && errno == EPERM, "a receive work queue without it: EPERM");
		return failed;
	}
	struct ibv_qp *qp = raw_qp(pd, cq);
	check(qp && !to_rts(qp), "a raw packet QP in RTS");
	if (!qp)
		return 1;
	if (!strcmp(mode, "send")) {
		uint16_t ports[2] = {9999, 5678};
		for (int i = 0; i < 2; i++) {
			uint8_t *f = buf + 4 * SLOT;
			frame(f, ports[i]);
			struct ibv_sge sge = {(uintptr_t)f, FRAME, mr->lkey};
			struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED}, *bad;
			struct ibv_wc wc;
			check(!ibv_post_send(qp, &wr, &bad) && poll_one(cq, &wc) && wc.status == IBV_WC_SUCCESS,
			      "a frame sent");
		}
		return failed;
	}
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = {(uintptr_t)(buf + i * SLOT), SLOT, mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		ibv_post_recv(qp, &wr, &bad);
	}
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
		struct ibv_flow_spec_tcp_udp udp;
	} fa = {
		.attr = {.type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .num_of_specs = 2, .port = 1},
		.eth = {.type = IBV_FLOW_SPEC_ETH, .size = sizeof(fa.eth)},
		.udp = {.type = IBV_FLOW_SPEC_UDP, .size = sizeof(fa.udp)},
	};
	memcpy(fa.eth.val.dst_mac, group, 6);
	memset(fa.eth.mask.dst_mac, 0xff, 6);
	fa.udp.val.dst_port = htons(5678);
	fa.udp.mask.dst_port = 0xffff;
	struct ibv_flow *flow = ibv_create_flow(qp, &fa.attr);
	check(flow != NULL, "a flow on the group's UDP port 5678");
	check(ibv_destroy_qp(qp) == EBUSY, "a QP with a flow is busy");
	wait_line("ready");
	struct ibv_wc wc;
	uint8_t want[FRAME];
	frame(want, 5678);
	check(poll_one(cq, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0 && wc.byte_len == FRAME &&
		      !memcmp(buf, want, FRAME),
	      "the matching frame, whole, in the first receive");
	check(ibv_poll_cq(cq, 1, &wc) == 0, "no other frame");
	check(flow && !ibv_destroy_flow(flow) && !ibv_destroy_qp(qp), "the flow, then the QP, destroyed");
	return failed;
}
