/*
 * fork_child.c: forked children on their parent's context, as through the
 * kernel's uverbs: each makes and destroys the session's objects (PDs,
 * device memory, CQs) while its siblings and the parent do the same on the
 * one socket, every command answered to its own process; a child's
 * ibv_reg_mr is EACCES (the daemon reaches only the parent's memory); the
 * parent's session goes on after the children exit.
 */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checks.h"

enum { CHILDREN = 4, ROUNDS = 200 };

/* churn makes and destroys objects ROUNDS times; it returns the failures. */
static int churn(struct ibv_context *ctx)
{
	int bad = 0;
	for (int i = 0; i < ROUNDS; i++) {
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		bad += !pd || ibv_dealloc_pd(pd);
		struct ibv_alloc_dm_attr da = {.length = 4096};
		struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
		bad += !dm || ibv_free_dm(dm);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		bad += !cq || ibv_destroy_cq(cq);
		struct ibv_port_attr port;
		bad += ibv_query_port(ctx, 1, &port) || port.state != IBV_PORT_ACTIVE;
	}
	return bad;
}

/* child's exit status: 1 for failed commands, 2 for a region registered. */
static int child(struct ibv_context *ctx, struct ibv_pd *pd)
{
	int status = churn(ctx) ? 1 : 0;
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (mr || errno != EACCES)
		status |= 2;
	return status;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		printf("FAIL open device\n");
		return 1;
	}
	fflush(stdout);
	pid_t kids[CHILDREN];
	for (int i = 0; i < CHILDREN; i++) {
		kids[i] = fork();
		if (kids[i] == 0)
			_exit(child(ctx, pd));
	}
	check(churn(ctx) == 0, "the parent's commands, beside its children's, all answered");
	int ran = 0, refused = 0;
	for (int i = 0; i < CHILDREN; i++) {
		int st;
		if (kids[i] > 0 && waitpid(kids[i], &st, 0) == kids[i] && WIFEXITED(st)) {
			ran += !(WEXITSTATUS(st) & 1);
			refused += !(WEXITSTATUS(st) & 2);
		}
	}
	check(ran == CHILDREN, "each child's commands on its parent's context all answered");
	check(refused == CHILDREN, "a child's ibv_reg_mr is EACCES");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	check(mr && !ibv_dereg_mr(mr), "the parent still registers memory");
	check(churn(ctx) == 0, "the parent's session goes on after its children exit");
	check(!ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "the parent closes its context");
	ibv_free_device_list(list);
	return failed;
}
