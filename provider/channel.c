/*
 * channel.c: completion channels. ibv_create_comp_channel() is not a
 * provider operation: libibverbs writes a kernel command to the device
 * file, which for softnic is /dev/null. This library therefore also
 * exports ibv_create_comp_channel and ibv_destroy_comp_channel at
 * libibverbs' symbol version (IBVERBS_1.0); loaded with LD_PRELOAD (as
 * `softnic exec` does) they take the calls for softnic contexts, ask the
 * daemon for a channel (create_comp_channel) and to destroy it
 * (destroy_comp_channel), and hand every other context to libibverbs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "provider.h"

#define SN_EXPORT __attribute__((visibility("default")))

typedef struct ibv_comp_channel *(*create_channel_fn)(struct ibv_context *);
typedef int (*destroy_channel_fn)(struct ibv_comp_channel *);

/* next_symbol finds libibverbs' own definition, after this library. */
static void *next_symbol(const char *name)
{
	void *fn = dlvsym(RTLD_NEXT, name, "IBVERBS_1.0");
	return fn ? fn : dlsym(RTLD_NEXT, name);
}

SN_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	if (!sn_is_softnic(context)) {
		create_channel_fn next = (create_channel_fn)next_symbol("ibv_create_comp_channel");
		if (!next) {
			errno = ENOSYS;
			return NULL;
		}
		return next(context);
	}
	struct sn_context *ctx = to_ctx(context);
	struct sn_channel *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	struct sn_handle r;
	int fd = -1, n = sn_call(ctx, SN_OP_CREATE_COMP_CHANNEL, NULL, 0, &r, sizeof(r), &fd, 1);
	if (n != 1) {
		int e = n == 0 ? EPROTO : errno; /* EMFILE: the user's descriptors are at the daemon's bound */
		if (n == 0) /* a channel without its pipe is no use */
			sn_destroy_handle(ctx, SN_OP_DESTROY_COMP_CHANNEL, r.handle);
		free(c);
		errno = e;
		return NULL;
	}
	c->ch.context = context;
	c->ch.fd = fd;
	c->handle = r.handle;
	pthread_mutex_lock(&ctx->s->channel_lock);
	c->next = ctx->s->channels;
	ctx->s->channels = c;
	pthread_mutex_unlock(&ctx->s->channel_lock);
	return &c->ch;
}

/* unlink_channel removes ch from ctx's list; 0 if it was not there. */
static int unlink_channel(struct sn_context *ctx, struct ibv_comp_channel *ch)
{
	int found = 0;
	pthread_mutex_lock(&ctx->s->channel_lock);
	for (struct sn_channel **p = &ctx->s->channels; *p; p = &(*p)->next) {
		if (&(*p)->ch == ch) {
			*p = (*p)->next;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->s->channel_lock);
	return found;
}

/* ibv_destroy_comp_channel has the daemon destroy the channel, then
 * closes its pipe: EBUSY while a CQ uses it, as libibverbs' own. */
SN_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct ibv_context *context = channel->context;
	if (!sn_is_softnic(context) || !sn_channel_handle(to_ctx(context), channel)) {
		destroy_channel_fn next = (destroy_channel_fn)next_symbol("ibv_destroy_comp_channel");
		return next ? next(channel) : ENOSYS;
	}
	pthread_mutex_lock(&context->mutex);
	int busy = channel->refcnt != 0; /* CQs still use it */
	pthread_mutex_unlock(&context->mutex);
	if (busy)
		return EBUSY;
	struct sn_context *ctx = to_ctx(context);
	struct sn_channel *c = sn_container_of(channel, struct sn_channel, ch);
	int err = sn_destroy_handle(ctx, SN_OP_DESTROY_COMP_CHANNEL, c->handle);
	if (err)
		return err; /* the daemon's EBUSY or ENOENT: the channel stays */
	unlink_channel(ctx, channel);
	close(channel->fd);
	free(c);
	return 0;
}

/* sn_channel_handle returns the daemon's handle of a channel made by
 * ibv_create_comp_channel above, or 0 for any other. */
uint32_t sn_channel_handle(struct sn_context *ctx, struct ibv_comp_channel *ch)
{
	uint32_t h = 0;
	pthread_mutex_lock(&ctx->s->channel_lock);
	for (struct sn_channel *c = ctx->s->channels; c; c = c->next) {
		if (&c->ch == ch) {
			h = c->handle;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->s->channel_lock);
	return h;
}
