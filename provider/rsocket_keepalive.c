/*
 * rsocket_keepalive.c: SO_KEEPALIVE as rdma-core's rsockets do it. A
 * thread of the process's own, started by the first socket that asks,
 * sends each such socket, while connected, a zero-length RDMA WRITE WITH
 * IMMEDIATE carrying CTRL KEEPALIVE every keepalive_time seconds
 * (TCP_KEEPIDLE; else tcp_keepalive_time's value, else 7200). The peer
 * takes it as any control message and drops it. A peer gone without a
 * disconnect never acknowledges it: the write fails once the QP's
 * retries are spent, and the socket is in error (EIO, as rdma-core's),
 * so a receive that would wait for ever returns.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "rdmacm.h"
#include "rsocket_int.h"

struct ka_entry {
	struct rsock *rs;
	struct timespec due;
	struct ka_entry *next;
};

static pthread_mutex_t ka_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ka_cond;
static struct ka_entry *ka_list;
static int ka_started;

static int ka_default_time(void)
{
	int v = 0;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r");
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v > 0 ? v : 7200;
}

static struct timespec ka_after(int seconds)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += seconds;
	return t;
}

static int ka_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ka_send_due sends to every socket whose time has come, and returns the
 * entry due next (NULL: none). Called with ka_lock held, which keeps each
 * socket from being freed meanwhile (rs_keepalive_forget takes it). */
static struct ka_entry *ka_send_due(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	struct ka_entry *next = NULL;
	for (struct ka_entry *e = ka_list; e; e = e->next) {
		if (!ka_before(&now, &e->due)) {
			rs_send_keepalive(e->rs);
			e->due = ka_after(e->rs->keepalive_time);
		}
		if (!next || ka_before(&e->due, &next->due))
			next = e;
	}
	return next;
}

static void *ka_run(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ka_lock);
	for (;;) {
		struct ka_entry *next = ka_send_due();
		if (next) {
			struct timespec due = next->due;
			pthread_cond_timedwait(&ka_cond, &ka_lock, &due);
		} else
			pthread_cond_wait(&ka_cond, &ka_lock);
	}
	return NULL;
}

/* ka_start makes the thread once; ka_lock held. */
static int ka_start(void)
{
	if (ka_started)
		return 0;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ka_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	int err = pthread_create(&t, &a, ka_run, NULL);
	pthread_attr_destroy(&a);
	if (err)
		return err;
	ka_started = 1;
	return 0;
}

/* rs_keepalive_set turns keepalive on or off for rs; on again or a new
 * TCP_KEEPIDLE restarts its count. */
int rs_keepalive_set(struct rsock *rs, int on)
{
	pthread_mutex_lock(&ka_lock);
	struct ka_entry **p = &ka_list;
	while (*p && (*p)->rs != rs)
		p = &(*p)->next;
	int err = 0;
	if (!on) {
		struct ka_entry *e = *p;
		if (e) {
			*p = e->next;
			free(e);
		}
	} else if (!(err = ka_start())) {
		if (!rs->keepalive_time)
			rs->keepalive_time = ka_default_time();
		struct ka_entry *e = *p ? *p : calloc(1, sizeof(*e));
		if (!e)
			err = ENOMEM;
		else {
			if (!*p) {
				e->rs = rs;
				e->next = ka_list;
				ka_list = e;
			}
			e->due = ka_after(rs->keepalive_time);
			pthread_cond_signal(&ka_cond);
		}
	}
	pthread_mutex_unlock(&ka_lock);
	return err ? rs_fail(err) : 0;
}

/* rs_keepalive_forget drops rs before it is freed. */
void rs_keepalive_forget(struct rsock *rs)
{
	if (rs->so_opts & (1ULL << SO_KEEPALIVE))
		rs_keepalive_set(rs, 0);
}
