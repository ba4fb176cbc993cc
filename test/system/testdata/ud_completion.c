/*
 * ud_completion: what a UD receive's completion and GRH say, through the
 * provider (TestProviderUDCompletions), as programs written for ConnectX
 * read them (UCX's UD transport: wc.sl & 7 is the RoCE packet type, 2 for
 * IPv4, 1 for IPv6, and tells where the GRH holds the destination).
 *
 *   ud_completion ipv4|ipv6
 *
 * picks the port's first GID of that kind (IPv4-mapped, or a global IPv6
 * one), makes a UD QP asking for no inline data and one SGE, posts two
 * receives, prints "info QPN GID_INDEX GID" (GID as 32 hex digits) and
 * reads the peer's from stdin (the test relays them). It then sends the
 * peer a 16-byte inline datagram (the QP's inline room, as rxe rounds
 * it) and a 64-byte one with immediate data, and takes the peer's two:
 * the first with ibv_poll_cq, the second through the extended CQ
 * (ibv_start_poll and ibv_wc_read_*). For each: IBV_WC_GRH, the sender's
 * QPN, P_Key index 0, the SL, the byte count, the GRH's bytes as mlx5
 * and rxe lay them out (IPv4: 20 zero bytes, then the IPv4 header with a
 * valid checksum; IPv6: the IPv6 header), and an address vector
 * libibverbs' ibv_init_ah_from_wc makes of them. The exit status is the
 * number of checks that failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "checks.h"

#define QKEY 0x11111111
#define SLOT (40 + 256)
#define INLINE_LEN 16
#define IMM_LEN 64
/* A UD SEND's UDP payload: BTH, DETH, (immediate data,) the payload, the
 * ICRC (both payloads are multiples of 4: no pad). */
#define UD_BYTES(n, imm) (12 + 8 + ((imm) ? 4 : 0) + (n) + 4)

static int is_v4mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(g->raw, prefix, 12) == 0;
}

static int is_zero(const union ibv_gid *g)
{
	static const union ibv_gid zero;
	return memcmp(g, &zero, sizeof(zero)) == 0;
}

static uint16_t ipv4_sum(const uint8_t *h)
{
	uint32_t sum = 0;
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)h[i] << 8 | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7);
}

static int holds(const uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(seed * 31 + i * 7))
			return 0;
	return 1;
}

/* poll_one waits up to ten seconds for a completion on cq. */
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

/* check_grh checks a GRH from peer to me, of the kind v4 says, of a
 * datagram whose UDP payload (BTH to ICRC) is len bytes. */
static void check_grh(const uint8_t *grh, int v4, const union ibv_gid *me, const union ibv_gid *peer, size_t len)
{
	if (v4) {
		static const uint8_t zero[20];
		const uint8_t *ip = grh + 20;
		check(memcmp(grh, zero, 20) == 0, "IPv4: the GRH's first 20 bytes are zero");
		check(ip[0] == 0x45, "IPv4: the header follows, version 4, 20 bytes");
		check((size_t)(ip[2] << 8 | ip[3]) == 20 + 8 + len, "IPv4: its total length");
		check(ip[9] == 17, "IPv4: protocol UDP");
		check(ipv4_sum(ip) == 0xffff, "IPv4: its checksum is valid");
		check(memcmp(ip + 12, peer->raw + 12, 4) == 0 && memcmp(ip + 16, me->raw + 12, 4) == 0,
		      "IPv4: source and destination are the GIDs' addresses");
	} else {
		check(grh[0] >> 4 == 6, "IPv6: version 6");
		check((size_t)(grh[4] << 8 | grh[5]) == 8 + len, "IPv6: its payload length");
		check(grh[6] == 17, "IPv6: next header UDP");
		check(memcmp(grh + 8, peer->raw, 16) == 0 && memcmp(grh + 24, me->raw, 16) == 0,
		      "IPv6: source and destination GIDs");
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2 || (strcmp(argv[1], "ipv4") && strcmp(argv[1], "ipv6"))) {
		fprintf(stderr, "usage: ud_completion ipv4|ipv6\n");
		return 100;
	}
	int v4 = strcmp(argv[1], "ipv4") == 0;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		perror("ibv_open_device");
		return 100;
	}
	struct ibv_port_attr port;
	if (ibv_query_port(ctx, 1, &port))
		return 100;
	int gid_index = -1;
	union ibv_gid gid;
	for (int i = 0; i < port.gid_tbl_len && gid_index < 0; i++) {
		if (ibv_query_gid(ctx, 1, i, &gid) || is_zero(&gid))
			continue;
		if (v4 ? is_v4mapped(&gid) : (!is_v4mapped(&gid) && !(gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80)))
			gid_index = i;
	}
	if (gid_index < 0) {
		fprintf(stderr, "no %s GID\n", argv[1]);
		return 100;
	}

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_cq_init_attr_ex cqa = {.cqe = 4,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
						      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SL};
	struct ibv_cq_ex *rcq = ibv_create_cq_ex(ctx, &cqa);
	uint8_t *buf = calloc(3, SLOT);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 3 * SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!scq || !rcq || !mr) {
		perror("setup");
		return 100;
	}
	struct ibv_qp_init_attr qa = {.send_cq = scq, .recv_cq = ibv_cq_ex_to_cq(rcq), .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1, .max_inline_data = 0}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp) {
		perror("ibv_create_qp");
		return 100;
	}
	check(qa.cap.max_inline_data >= INLINE_LEN, "a QP asked for no inline data takes 16 bytes");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	struct ibv_qp_init_attr init;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return 100;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return 100;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return 100;
	check(ibv_query_qp(qp, &a, IBV_QP_CAP, &init) == 0 && a.cap.max_inline_data == qa.cap.max_inline_data,
	      "ibv_query_qp says the same inline room");
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)(buf + i * SLOT), .length = SLOT, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(qp, &wr, &bad))
			return 100;
	}

	printf("info %u %d ", qp->qp_num, gid_index);
	for (int i = 0; i < 16; i++)
		printf("%02x", gid.raw[i]);
	printf("\n");
	char line[128];
	unsigned peer_qpn;
	int peer_index;
	char hex[33];
	union ibv_gid peer;
	if (!fgets(line, sizeof(line), stdin) || sscanf(line, "info %u %d %32s", &peer_qpn, &peer_index, hex) != 3)
		return 100;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		sscanf(hex + 2 * i, "%2x", &b);
		peer.raw[i] = b;
	}

	struct ibv_ah_attr aha = {.is_global = 1, .port_num = 1,
				  .grh = {.dgid = peer, .sgid_index = gid_index, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aha);
	if (!ah) {
		perror("ibv_create_ah");
		return 100;
	}
	uint8_t payload[IMM_LEN];
	fill(payload, INLINE_LEN, qp->qp_num);
	struct ibv_sge sge = {.addr = (uintptr_t)payload, .length = INLINE_LEN};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
				 .wr = {.ud = {.ah = ah, .remote_qpn = peer_qpn, .remote_qkey = QKEY}}},
			   *bad;
	struct ibv_wc wc;
	check(ibv_post_send(qp, &wr, &bad) == 0, "a 16-byte inline send is taken");
	check(poll_one(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "and sent");
	uint8_t *out = buf + 2 * SLOT;
	fill(out, IMM_LEN, qp->qp_num + 1);
	struct ibv_sge sge2 = {.addr = (uintptr_t)out, .length = IMM_LEN, .lkey = mr->lkey};
	wr.sg_list = &sge2;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(0x12345678);
	wr.send_flags = IBV_SEND_SIGNALED;
	check(ibv_post_send(qp, &wr, &bad) == 0 && poll_one(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "a 64-byte send with immediate data is sent");

	/* The peer's first datagram, through ibv_poll_cq. */
	uint8_t want_sl = v4 ? 2 : 1;
	int got = poll_one(ibv_cq_ex_to_cq(rcq), &wc);
	check(got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 0,
	      "ibv_poll_cq: the first datagram arrives");
	check(wc.wc_flags == IBV_WC_GRH, "ibv_poll_cq: wc_flags is IBV_WC_GRH");
	check(wc.sl == want_sl, v4 ? "ibv_poll_cq: sl 2, IPv4 (ConnectX's packet type)"
				   : "ibv_poll_cq: sl 1, IPv6 (ConnectX's packet type)");
	check(wc.src_qp == peer_qpn && wc.qp_num == qp->qp_num, "ibv_poll_cq: source and own QPN");
	check(wc.pkey_index == 0 && wc.slid == 0 && wc.dlid_path_bits == 0, "ibv_poll_cq: P_Key index, SLID, path bits 0");
	check(wc.byte_len == 40 + INLINE_LEN && holds(buf + 40, INLINE_LEN, peer_qpn), "ibv_poll_cq: the 16 inline bytes");
	check_grh(buf, v4, &gid, &peer, UD_BYTES(INLINE_LEN, 0));
	struct ibv_ah_attr from;
	check(ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)buf, &from) == 0 && from.is_global &&
		      memcmp(from.grh.dgid.raw, peer.raw, 16) == 0 && from.grh.sgid_index == gid_index &&
		      from.sl == want_sl,
	      "ibv_init_ah_from_wc reads the GRH: the peer's GID, our GID's index");
	struct ibv_ah *back = ibv_create_ah_from_wc(pd, &wc, (struct ibv_grh *)buf, 1);
	check(back != NULL, "ibv_create_ah_from_wc makes an AH of it");

	/* The second, through the extended CQ. */
	struct ibv_poll_cq_attr pa = {0};
	time_t end = time(NULL) + 10;
	int err;
	while ((err = ibv_start_poll(rcq, &pa)) == ENOENT && time(NULL) < end)
		;
	check(err == 0 && rcq->status == IBV_WC_SUCCESS && rcq->wr_id == 1 && ibv_wc_read_opcode(rcq) == IBV_WC_RECV,
	      "ibv_start_poll: the second datagram arrives");
	if (err == 0) {
		check(ibv_wc_read_wc_flags(rcq) == (IBV_WC_GRH | IBV_WC_WITH_IMM), "read_wc_flags: GRH and immediate");
		check(ibv_wc_read_sl(rcq) == want_sl, "read_sl: the packet type");
		check(ibv_wc_read_src_qp(rcq) == peer_qpn && ibv_wc_read_qp_num(rcq) == qp->qp_num,
		      "read_src_qp, read_qp_num");
		check(ibv_wc_read_byte_len(rcq) == 40 + IMM_LEN && ntohl(ibv_wc_read_imm_data(rcq)) == 0x12345678,
		      "read_byte_len, read_imm_data");
		ibv_end_poll(rcq);
	}
	check(holds(buf + SLOT + 40, IMM_LEN, peer_qpn + 1), "the 64 bytes");
	check_grh(buf + SLOT, v4, &gid, &peer, UD_BYTES(IMM_LEN, 1));

	if (back)
		ibv_destroy_ah(back);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(ibv_cq_ex_to_cq(rcq));
	ibv_destroy_cq(scq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failed;
}
