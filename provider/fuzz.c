/*
 * fuzz.c: libFuzzer harness for what the provider decodes: the daemon's
 * control replies (header, body, descriptors), create_qp's ring layout,
 * and completion queue entries, polled both ways. `make fuzz` builds it with clang; the Go
 * test TestProviderFuzz runs it for a while.
 *
 * It includes the sources it reaches into, so that their static functions
 * are in reach. The first input byte picks the target.
 */
#include "control.c"
#include "datapath.c"
#include "extended.c"
#include "qp.c"

#include <fcntl.h>
#include <stdio.h>

/* open_fds counts the open descriptors below 256: a leak raises it. */
static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 256; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* send_reply queues msg on sock with nfds descriptors of /dev/null. */
static void send_reply(int sock, const uint8_t *msg, size_t len, int nfds)
{
	int fds[SN_MAX_SEND_FDS];
	for (int i = 0; i < nfds; i++)
		fds[i] = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (send_message(sock, msg, len, fds, nfds))
		abort();
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

/* fuzz_call answers one command with the input as the reply. */
static void fuzz_call(const uint8_t *d, size_t n)
{
	if (n < 2 || n > SN_MAX_MESSAGE + 2)
		return;
	int before = open_fds(), sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
		abort();
	struct sn_session s = {.sock = sv[0]};
	struct sn_context ctx = {.s = &s};
	s.calls = sn_calls_new();
	if (!s.calls)
		abort();
	send_reply(sv[1], d + 2, n - 2, d[1] % 6);
	int fds[3];
	uint8_t reply[64];
	size_t reply_len = d[0] >> 3; /* 0 to 31 bytes */
	int got = sn_call(&ctx, SN_OP_CREATE_QP, reply, 8, reply_len ? reply : NULL, reply_len, fds, 3);
	if (got > 3)
		abort();
	for (int i = 0; i < got; i++)
		close(fds[i]);
	close(sv[0]);
	close(sv[1]);
	sn_calls_free(s.calls);
	if (open_fds() != before)
		abort(); /* a descriptor leaked */
}

/* fuzz_qp_layout checks create_qp replies against a memfd of some size. */
static void fuzz_qp_layout(const uint8_t *d, size_t n)
{
	struct sn_create_qp_reply r;
	uint32_t size;
	if (n < 1 + sizeof(r) + sizeof(size))
		return;
	memcpy(&r, d + 1, sizeof(r));
	memcpy(&size, d + 1 + sizeof(r), sizeof(size));
	int fd = memfd_create("fuzz-qp", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, size % (1 << 22)) < 0)
		abort();
	struct sn_qp qp = {0};
	if (map_qp(&qp, &r, 1, fd) == 0) {
		/* every entry the queues hand out lies in the mapping */
		uint8_t *last = qp.sq.ring + SN_RING_HEADER + (size_t)qp.sq.mask * qp.sq.stride + qp.sq.stride - 1;
		if (last >= qp.mem + qp.size)
			abort();
		*last = 0;
		munmap(qp.mem, qp.size);
	}
}

/* fuzz_cq polls a CQ ring filled with the input. */
static void fuzz_cq(const uint8_t *d, size_t n)
{
	enum { DEPTH = 8 };
	static uint8_t ring[SN_RING_HEADER + DEPTH * SN_CQ_ENTRY] __attribute__((aligned(64)));
	struct sn_cq cq = {.ring = ring, .mask = DEPTH - 1};
	memset(ring, 0, sizeof(ring));
	if (n < 2)
		return;
	cq.next = d[1];
	size_t body = n - 2 < DEPTH * SN_CQ_ENTRY ? n - 2 : DEPTH * SN_CQ_ENTRY;
	memcpy(ring + SN_RING_HEADER, d + 2, body);
	pthread_spin_init(&cq.lock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_wc wc[DEPTH + 1];
	int got = sn_poll_cq(&cq.ibv, d[0] % (DEPTH + 2), wc);
	if (got > DEPTH + 1)
		abort();
	/* The same entries the extended way (ibv_start_poll and on): at
	 * most one pass over the ring, each field readable. */
	cq.next = d[1];
	struct ibv_poll_cq_attr attr = {0};
	if (cq_start_poll(&cq.ex, &attr) == 0) {
		int taken = 0;
		do {
			taken++;
			(void)(cq_read_opcode(&cq.ex) + cq_read_byte_len(&cq.ex) + cq_read_imm_data(&cq.ex) +
			       cq_read_qp_num(&cq.ex) + cq_read_src_qp(&cq.ex) + cq_read_wc_flags(&cq.ex) +
			       cq_read_slid(&cq.ex) + cq_read_sl(&cq.ex) + cq_read_dlid_path_bits(&cq.ex) +
			       cq_read_completion_ts(&cq.ex));
		} while (cq_next_poll(&cq.ex) == 0);
		cq_end_poll(&cq.ex);
		if (taken > DEPTH)
			abort();
	}
	pthread_spin_destroy(&cq.lock);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (n < 1)
		return 0;
	switch (d[0] % 3) {
	case 0:
		fuzz_call(d + 1, n - 1);
		break;
	case 1:
		fuzz_qp_layout(d, n);
		break;
	default:
		fuzz_cq(d + 1, n - 1);
	}
	return 0;
}
