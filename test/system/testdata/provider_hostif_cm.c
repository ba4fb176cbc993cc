/*
 * provider_hostif_cm: softnic's librdmacm's side of destroying event
 * channels (TestProviderHostInterface). It includes rdmacm_core.c and
 * gives the library a provider entry point of its own that records every
 * command and answers it: rdma_destroy_event_channel sends
 * cm_destroy_channel (op 44, u32 channel) and closes the pipe (also when
 * the daemon answers EBUSY); a synchronous ID
 * (rdma_create_id without a channel) destroys its ID before its channel,
 * so that the daemon does not refuse with EBUSY. The exit status is the
 * number of checks that failed.
 */
#include "rdmacm_core.c"

#include <fcntl.h>

#include "checks.h"

/* The commands the library sent, in order, with the u32 that begins each
 * body. */
static struct {
	int op;
	uint32_t first;
} sent[64];
static int nsent;
static int32_t destroy_status; /* what cm_destroy_channel answers */
static uint32_t next_handle = 10;

static int fake_cm_call(struct ibv_context *context, int op, const void *req, size_t req_len, void *reply,
			size_t reply_len, int *fds, int max_fds)
{
	(void)context;
	if (nsent < 64) {
		sent[nsent].op = op;
		sent[nsent].first = 0;
		if (req_len >= 4)
			memcpy(&sent[nsent].first, req, 4);
		nsent++;
	}
	memset(reply, 0, reply_len);
	switch (op) {
	case SN_OP_CM_CREATE_CHANNEL: {
		int p[2];
		if (max_fds < 1 || reply_len != sizeof(struct sn_handle) || pipe2(p, O_CLOEXEC))
			return cm_fail(EINVAL);
		close(p[1]);
		fds[0] = p[0];
		((struct sn_handle *)reply)->handle = next_handle++;
		return 1;
	}
	case SN_OP_CM_CREATE_ID:
		((struct sn_handle *)reply)->handle = next_handle++;
		return 0;
	case SN_OP_CM_DESTROY_ID:
		return 0;
	case SN_OP_CM_DESTROY_CHANNEL:
		if (req_len != sizeof(struct sn_handle) || reply_len != 0)
			return cm_fail(EPROTO);
		return destroy_status ? cm_fail(-destroy_status) : 0;
	}
	return cm_fail(EPROTO);
}

static const struct softnic_rdmacm_ops fake_ops = {.abi = SOFTNIC_RDMACM_ABI, .cm_call = fake_cm_call};
static struct ibv_context fake_context;

static void fake_init(void)
{
	cm_lib.verbs = &fake_context;
	cm_lib.ops = &fake_ops;
}

/* sent_index is where op was sent with first after index from, or -1. */
static int sent_index(int from, int op, uint32_t first)
{
	for (int i = from; i < nsent; i++)
		if (sent[i].op == op && sent[i].first == first)
			return i;
	return -1;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_once(&cm_once, fake_init); /* the library's session is ours */
	printf("version %d\n", SN_VERSION);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	check(ch != NULL, "rdma_create_event_channel");
	if (!ch)
		return 100;
	uint32_t handle = ((struct cm_channel *)ch)->handle;
	int fd = ch->fd, before = nsent;
	rdma_destroy_event_channel(ch);
	int i = sent_index(before, SN_OP_CM_DESTROY_CHANNEL, handle);
	check(i >= 0 && nsent == before + 1, "rdma_destroy_event_channel sends cm_destroy_channel (op 44, its handle)");
	check(fcntl(fd, F_GETFD) < 0, "and closes the pipe");

	destroy_status = -EBUSY;
	ch = rdma_create_event_channel();
	check(ch != NULL, "another channel");
	if (!ch)
		return 100;
	fd = ch->fd;
	rdma_destroy_event_channel(ch);
	check(fcntl(fd, F_GETFD) < 0, "a channel the daemon keeps (EBUSY) has its pipe closed all the same");
	destroy_status = 0;

	before = nsent;
	struct rdma_cm_id *id;
	check(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "a synchronous ID");
	handle = ((struct cm_id *)id)->own->handle;
	uint32_t idh = ((struct cm_id *)id)->handle;
	check(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	int d = sent_index(before, SN_OP_CM_DESTROY_ID, idh), c = sent_index(before, SN_OP_CM_DESTROY_CHANNEL, handle);
	check(d >= 0 && c > d, "its ID is destroyed before its channel");
	return failed;
}
