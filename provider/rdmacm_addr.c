/*
 * rdmacm_addr.c: rdma_getaddrinfo, from the C library's getaddrinfo. The
 * answer is librdmacm's for IP addresses: a passive one (RAI_PASSIVE)
 * gives the source to bind, an active one the destination (and the
 * hints' source, if any). Routes (ai_route) are the connection
 * manager's business at rdma_resolve_route; none is given here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

static int port_space_of(const struct rdma_addrinfo *hints)
{
	if (hints && hints->ai_port_space)
		return hints->ai_port_space;
	return hints && hints->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
}

static struct sockaddr *copy_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *c = malloc(len);
	if (c)
		memcpy(c, sa, len);
	return c;
}

CM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* fill sets rai's addresses from the C library's answer ai. */
static int fill(struct rdma_addrinfo *rai, const struct addrinfo *ai, const struct rdma_addrinfo *hints)
{
	rai->ai_family = ai->ai_family;
	if (rai->ai_flags & RAI_PASSIVE) {
		rai->ai_src_len = ai->ai_addrlen;
		return (rai->ai_src_addr = copy_addr(ai->ai_addr, ai->ai_addrlen)) ? 0 : cm_fail(ENOMEM);
	}
	rai->ai_dst_len = ai->ai_addrlen;
	if (!(rai->ai_dst_addr = copy_addr(ai->ai_addr, ai->ai_addrlen)))
		return cm_fail(ENOMEM);
	if (hints && hints->ai_src_addr && hints->ai_src_len) {
		rai->ai_src_len = hints->ai_src_len;
		if (!(rai->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len)))
			return cm_fail(ENOMEM);
	}
	return 0;
}

/* rdma_getaddrinfo returns 0, a getaddrinfo error (EAI_*: programs print
 * it with gai_strerror, as for librdmacm's), or -1 with errno. */
CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	if (!res || (!node && !service))
		return cm_fail(EINVAL);
	struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));
	if (!rai)
		return cm_fail(ENOMEM);
	rai->ai_flags = hints ? hints->ai_flags : 0;
	rai->ai_port_space = port_space_of(hints);
	rai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
			  : rai->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	int udp = rai->ai_qp_type == IBV_QPT_UD;
	struct addrinfo ah = {.ai_socktype = udp ? SOCK_DGRAM : SOCK_STREAM,
			      .ai_protocol = udp ? IPPROTO_UDP : IPPROTO_TCP};
	if (rai->ai_flags & RAI_PASSIVE)
		ah.ai_flags |= AI_PASSIVE;
	if (rai->ai_flags & RAI_NUMERICHOST)
		ah.ai_flags |= AI_NUMERICHOST;
	if (hints && (hints->ai_family == AF_INET || hints->ai_family == AF_INET6))
		ah.ai_family = hints->ai_family;
	else if (!node)
		ah.ai_family = AF_INET; /* a wildcard: one answer, as the kernel binds it */
	struct addrinfo *ai;
	int ret = getaddrinfo(node, service, &ah, &ai);
	if (ret) {
		free(rai);
		return ret;
	}
	ret = fill(rai, ai, hints);
	freeaddrinfo(ai);
	if (ret) {
		int err = errno;
		rdma_freeaddrinfo(rai);
		return cm_fail(err);
	}
	*res = rai;
	return 0;
}
