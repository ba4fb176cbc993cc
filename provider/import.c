/*
 * import.c: ibv_import_device and the objects imported into its context.
 *
 * The kernel's imported context is the same uverbs file as the original
 * one, so it shares every object and lives on when the original is
 * closed. A softnic context's command descriptor is an open of /dev/null
 * (every device's node links there, docs/HOST-INTERFACE.md), so neither
 * its device number nor its inode says which session it is: the open file
 * description does. The process's softnic contexts are kept in a list,
 * and a descriptor is the context whose cmd_fd is the same open file
 * (kcmp(2) KCMP_FILE on this process), whose session the new context then
 * shares (struct sn_session: the last context closed ends it).
 *
 * libibverbs' own ibv_import_device cannot do it: after the provider's
 * import_context it asks the kernel for an async event descriptor through
 * the command descriptor, an ioctl /dev/null refuses. So this library
 * exports ibv_import_device at libibverbs' version (IBVERBS_1.10), as it
 * does the completion channel calls (channel.c): loaded with LD_PRELOAD,
 * as `softnic exec` does, it makes softnic contexts itself and hands any
 * other descriptor to libibverbs', which refuses a non-device with EINVAL
 * and an open of /dev/null that is no context of this process with
 * EOPNOTSUPP (the softnic device it matches has no import_context). A
 * descriptor another process passed, or a forked child inherited, is such
 * a one: the daemon takes a session's commands from the process that
 * opened it only (docs/SECURITY.md), so contexts are not shared across
 * processes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "provider.h"

#define SN_EXPORT __attribute__((visibility("default")))

static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sn_context *contexts; /* every open softnic context of the process */

void sn_context_register(struct sn_context *ctx)
{
	pthread_mutex_lock(&contexts_lock);
	ctx->next = contexts;
	contexts = ctx;
	pthread_mutex_unlock(&contexts_lock);
}

void sn_context_unregister(struct sn_context *ctx)
{
	pthread_mutex_lock(&contexts_lock);
	for (struct sn_context **p = &contexts; *p; p = &(*p)->next) {
		if (*p == ctx) {
			*p = ctx->next;
			break;
		}
	}
	pthread_mutex_unlock(&contexts_lock);
}

/* same_file reports whether descriptors a and b of this process are one
 * open file description: 1, 0, or -1 with errno (no kcmp here: ENOSYS, or
 * EPERM under a seccomp filter that refuses it). */
static int same_file(int a, int b)
{
	pid_t me = getpid();
	long r = syscall(SYS_kcmp, me, me, KCMP_FILE, a, b);
	return r < 0 ? -1 : r == 0;
}

/* copy_lib_ops gives ctx the entries libibverbs itself sets in a context
 * it opened (set_lib_ops in its device.c, static there), from the
 * context whose cmd_fd is imported: libibverbs opened it, or it was
 * imported from one libibverbs opened, so these are that library's. */
static void copy_lib_ops(struct verbs_context *ctx, const struct verbs_context *from)
{
	ctx->create_cq_ex = from->create_cq_ex;
	ctx->query_port = from->query_port;
	ctx->context.ops._compat_query_port = from->context.ops._compat_query_port;
	ctx->context.ops._compat_query_device = from->context.ops._compat_query_device;
	ctx->ABI_placeholder1 = from->ABI_placeholder1;
	ctx->ABI_placeholder2 = from->ABI_placeholder2;
}

/* find_session returns the session of the context whose command
 * descriptor is fd's open file, held, with that context's device, its
 * async event descriptor duplicated into *async_fd and libibverbs'
 * entries copied into *lib (copy_lib_ops); NULL with errno
 * ENOENT if there is none, EOPNOTSUPP if kcmp cannot tell (ENOSYS, or
 * EPERM under a seccomp filter that refuses it). */
static struct sn_session *find_session(int fd, struct ibv_device **device, int *async_fd, struct verbs_context *lib)
{
	struct sn_session *s = NULL;
	int err = ENOENT;
	pthread_mutex_lock(&contexts_lock);
	pid_t me = getpid();
	for (struct sn_context *c = contexts; c && !s && err == ENOENT; c = c->next) {
		if (c->s->pid != me)
			continue; /* a forked child's copy of its parent's list: the daemon refuses it the session */
		int same = same_file(fd, c->vctx.context.cmd_fd);
		if (same < 0 && errno != EBADF)
			err = EOPNOTSUPP;
		if (same != 1)
			continue; /* EBADF: the program closed that context's cmd_fd itself */
		*async_fd = fcntl(c->vctx.context.async_fd, F_DUPFD_CLOEXEC, 0);
		if (*async_fd < 0) {
			err = errno;
			continue;
		}
		s = c->s;
		*device = c->vctx.context.device;
		copy_lib_ops(lib, &c->vctx); /* under the lock: c may be closed once it is let go */
		__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	}
	pthread_mutex_unlock(&contexts_lock);
	if (!s)
		errno = err;
	return s;
}

/* import_softnic makes a context on session s (held for it), with
 * cmd_fd, which it then owns, async_fd, and libibverbs' entries of lib. */
static struct ibv_context *import_softnic(struct sn_session *s, struct ibv_device *device, int cmd_fd, int async_fd,
					  const struct verbs_context *lib)
{
	struct sn_context *ctx = _verbs_init_and_alloc_context(device, cmd_fd, sizeof(*ctx), NULL, 0);
	if (!ctx) {
		int e = errno;
		close(async_fd);
		sn_session_put(s);
		errno = e;
		return NULL;
	}
	ctx->s = s;
	ctx->vctx.context.async_fd = async_fd;
	sn_set_ops(ctx);
	copy_lib_ops(&ctx->vctx, lib);
	sn_context_register(ctx);
	return &ctx->vctx.context;
}

typedef struct ibv_context *(*import_device_fn)(int);

SN_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct stat st;
	struct ibv_device *device = NULL;
	int async_fd = -1, err = ENOENT;
	if (fstat(cmd_fd, &st) == 0 && S_ISCHR(st.st_mode)) {
		struct verbs_context lib = {0};
		struct sn_session *s = find_session(cmd_fd, &device, &async_fd, &lib);
		if (s)
			return import_softnic(s, device, cmd_fd, async_fd, &lib);
		err = errno;
	}
	if (err != ENOENT) {
		errno = err; /* whether fd is a softnic context's is unknown */
		return NULL;
	}
	import_device_fn next = (import_device_fn)dlvsym(RTLD_NEXT, "ibv_import_device", "IBVERBS_1.10");
	if (!next) {
		errno = EOPNOTSUPP; /* a libibverbs without imports */
		return NULL;
	}
	return next(cmd_fd);
}

/* sn_import_pd makes PD handle of the context's session (ENOENT if the
 * session has none) an object of this context, as the kernel's import
 * gives the same PD a second userspace object. */
struct ibv_pd *sn_import_pd(struct ibv_context *context, uint32_t handle)
{
	struct sn_handle req = {handle};
	if (sn_call(to_ctx(context), SN_OP_QUERY_PD, &req, sizeof(req), NULL, 0, NULL, 0) < 0)
		return NULL;
	struct sn_pd *pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	pd->handle = pd->ibv.handle = handle;
	pd->ibv.context = context;
	return &pd->ibv;
}

/* sn_unimport_pd frees the object only: the PD stays the session's. A
 * parent domain (never imported) or a PD parent domains hold is left as
 * it is, as mlx5 refuses to free a PD still referenced. */
void sn_unimport_pd(struct ibv_pd *ibpd)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	if (pd->parent || __atomic_load_n(&pd->parents, __ATOMIC_ACQUIRE))
		return;
	free(pd);
}

/* sn_import_mr makes region handle an object of pd's context: keys and
 * length as the daemon says (the kernel's QUERY_MR), addr NULL as the
 * kernel leaves an imported region's; EINVAL if the region is in another
 * PD than pd. */
struct ibv_mr *sn_import_mr(struct ibv_pd *pd, uint32_t handle)
{
	struct sn_handle req = {handle};
	struct sn_query_mr_reply r;
	if (sn_call(to_ctx(pd->context), SN_OP_QUERY_MR, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0)
		return NULL;
	if (r.pd != sn_pd_handle(pd)) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	mr->handle = handle;
	mr->vmr.mr_type = SN_MR_TYPE_IMPORTED;
	mr->vmr.access = r.access;
	struct ibv_mr *m = &mr->vmr.ibv_mr;
	m->context = pd->context;
	m->pd = pd;
	m->handle = handle;
	m->lkey = r.lkey;
	m->rkey = r.rkey;
	m->length = r.length;
	m->addr = NULL;
	return m;
}

/* sn_unimport_mr frees the object only: the region stays registered. */
void sn_unimport_mr(struct ibv_mr *ibmr)
{
	free(sn_container_of(ibmr, struct sn_mr, vmr.ibv_mr));
}
