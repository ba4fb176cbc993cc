/*
 * rsocket_conf.c: the settings rdma-core's rsockets read from
 * /etc/rdma/rsocket, one number a file, read once: polling_time (µs a
 * blocking call polls its CQ before it sleeps; 10), mem_default and
 * wmem_default (receive and send buffer bytes; 128 KiB), sqsize_default
 * and rqsize_default (queue entries; 384), inline_default (64) and
 * iomap_size (0). A missing or unreadable file leaves the default.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

#include "rsocket_int.h"

#define RS_CONF_DIR "/etc/rdma/rsocket"

struct rs_conf rs_conf = {
	.polling_time = 10,
	.mem_default = 1 << 17,
	.wmem_default = 1 << 17,
	.sqsize_default = 384,
	.rqsize_default = 384,
	.inline_default = 64,
	.iomap_size = 0,
};

static pthread_once_t conf_once = PTHREAD_ONCE_INIT;

static void conf_read(const char *name, uint32_t *v)
{
	char path[64];
	snprintf(path, sizeof(path), RS_CONF_DIR "/%s", name);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	unsigned x;
	if (fscanf(f, "%u", &x) == 1)
		*v = x;
	fclose(f);
}

static void conf_load(void)
{
	conf_read("polling_time", &rs_conf.polling_time);
	conf_read("mem_default", &rs_conf.mem_default);
	conf_read("wmem_default", &rs_conf.wmem_default);
	conf_read("sqsize_default", &rs_conf.sqsize_default);
	conf_read("rqsize_default", &rs_conf.rqsize_default);
	conf_read("inline_default", &rs_conf.inline_default);
	conf_read("iomap_size", &rs_conf.iomap_size);
	/* as rdma-core bounds them */
	if (rs_conf.mem_default < RS_SNDLOWAT * 2)
		rs_conf.mem_default = RS_SNDLOWAT * 2;
	if (rs_conf.wmem_default < RS_SNDLOWAT * 2)
		rs_conf.wmem_default = RS_SNDLOWAT * 2;
	if (rs_conf.sqsize_default < RS_QP_MIN)
		rs_conf.sqsize_default = RS_QP_MIN;
	if (rs_conf.sqsize_default > RS_QP_MAX)
		rs_conf.sqsize_default = RS_QP_MAX;
	if (rs_conf.rqsize_default < RS_QP_MIN)
		rs_conf.rqsize_default = RS_QP_MIN;
	if (rs_conf.rqsize_default > RS_QP_MAX)
		rs_conf.rqsize_default = RS_QP_MAX;
	if (rs_conf.iomap_size > 128)
		rs_conf.iomap_size = (rs_conf.iomap_size >> 8) << 8;
}

void rs_conf_load(void)
{
	pthread_once(&conf_once, conf_load);
}
