/*
 * rdmacm_addr.c: rdma_getaddrinfo, as rdma-core's addrinfo.c answers for
 * IP addresses (without its IB ACM service, so with no ai_route or
 * ai_connect): with a node or a service, the C library's getaddrinfo
 * under the hints' flags, QP type and port space, of whose answers the
 * first is taken, as the source to bind of a passive one (RAI_PASSIVE)
 * or else the destination; without either, the hints themselves, their
 * addresses copied (fi_pingpong and libfabric's verbs provider ask so).
 * The hints' source comes along when the answer has none.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

/* to_ai turns rdma_getaddrinfo's hints into getaddrinfo's, as
 * addrinfo.c's ucma_convert_to_ai: the flags, the family (AF_IB is not an
 * address getaddrinfo knows), the socket type of the QP type and the
 * protocol of the port space. */
static void to_ai(struct addrinfo *ai, const struct rdma_addrinfo *rai)
{
	memset(ai, 0, sizeof(*ai));
	if (rai->ai_flags & RAI_PASSIVE)
		ai->ai_flags = AI_PASSIVE;
	if (rai->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	if (rai->ai_family != AF_IB)
		ai->ai_family = rai->ai_family;
	switch (rai->ai_qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		ai->ai_socktype = SOCK_STREAM;
		break;
	case IBV_QPT_UD:
		ai->ai_socktype = SOCK_DGRAM;
		break;
	default:
		break;
	}
	switch (rai->ai_port_space) {
	case RDMA_PS_TCP:
		ai->ai_protocol = IPPROTO_TCP;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		ai->ai_protocol = IPPROTO_UDP;
		break;
	case RDMA_PS_IB:
		ai->ai_protocol = ai->ai_socktype == SOCK_STREAM ? IPPROTO_TCP
				  : ai->ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : 0;
		break;
	default:
		break;
	}
}

/* copy_addr copies a socket address into *dst; 0 or -1 with ENOMEM. */
static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src, socklen_t len)
{
	if (!(*dst = malloc(len)))
		return cm_fail(ENOMEM);
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
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

/* from_ai fills rai from getaddrinfo's first answer ai, asked with the
 * flags of passive, as addrinfo.c's ucma_convert_to_rai: the QP type and
 * port space of the hints, else of the answer's socket type and protocol;
 * the answer is the source of a passive request, else the destination.
 * 0, or -1 with errno. */
static int from_ai(struct rdma_addrinfo *rai, const struct rdma_addrinfo *hints, const struct addrinfo *ai, int passive)
{
	rai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
			  : ai->ai_socktype == SOCK_STREAM ? IBV_QPT_RC
			  : ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : 0;
	rai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
			     : ai->ai_protocol == IPPROTO_TCP ? RDMA_PS_TCP
			     : ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : 0;
	rai->ai_family = ai->ai_family;
	char **canon = passive ? &rai->ai_src_canonname : &rai->ai_dst_canonname;
	if (ai->ai_canonname && !(*canon = strdup(ai->ai_canonname)))
		return cm_fail(ENOMEM);
	if (passive) {
		rai->ai_flags = RAI_PASSIVE;
		return copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
	}
	return copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
}

/* rdma_getaddrinfo returns 0, a getaddrinfo error (EAI_*: programs print
 * it with gai_strerror, as for librdmacm's), or -1 with errno (EINVAL
 * with neither node, service nor hints; the library's device missing, as
 * librdmacm's ucma_init). */
CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	if (!res || (!node && !service && !hints))
		return cm_fail(EINVAL);
	if (cm_init())
		return -1;
	struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));
	if (!rai)
		return cm_fail(ENOMEM);
	int ret = 0;
	if (node || service) {
		struct addrinfo ah, *ai;
		if (hints)
			to_ai(&ah, hints);
		int gai = getaddrinfo(node, service, hints ? &ah : NULL, &ai);
		if (gai) {
			free(rai);
			return gai;
		}
		ret = from_ai(rai, hints, ai, hints && (ah.ai_flags & AI_PASSIVE));
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len && hints->ai_dst_addr)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints && hints->ai_src_len && hints->ai_src_addr)
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
	if (ret) {
		int err = errno;
		rdma_freeaddrinfo(rai);
		return cm_fail(err);
	}
	*res = rai;
	return 0;
}
