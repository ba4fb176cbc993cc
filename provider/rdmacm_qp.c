/*
 * rdmacm_qp.c: an ID's QP and its connection: rdma_create_qp, connect,
 * accept, reject, disconnect, and the endpoints of rdma_create_ep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

/* default_xrcd is the library's XRC domain, for XRC IDs' receive QPs and
 * SRQs (rdma-core's ucma_get_xrcd: a private one, fd -1). */
static struct ibv_xrcd *default_xrcd(void)
{
	pthread_mutex_lock(&cm_lib.lock);
	if (!cm_lib.xrcd) {
		struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					       .fd = -1, .oflags = O_CREAT};
		cm_lib.xrcd = ibv_open_xrcd(cm_lib.verbs, &a);
	}
	struct ibv_xrcd *x = cm_lib.xrcd;
	pthread_mutex_unlock(&cm_lib.lock);
	return x;
}

/* default_pd is the library's PD, for QPs made without one. */
static struct ibv_pd *default_pd(void)
{
	pthread_mutex_lock(&cm_lib.lock);
	if (!cm_lib.pd)
		cm_lib.pd = ibv_alloc_pd(cm_lib.verbs);
	struct ibv_pd *pd = cm_lib.pd;
	pthread_mutex_unlock(&cm_lib.lock);
	return pd;
}

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->send_cq && id->send_cq != id->recv_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->recv_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	id->send_cq = id->recv_cq = NULL;
	id->send_cq_channel = id->recv_cq_channel = NULL;
}

/* make_cq gives a QP without CQs one with a completion channel, as
 * librdmacm does (rdma_get_send_comp and rdma_get_recv_comp sleep on it). */
static struct ibv_cq *make_cq(struct rdma_cm_id *id, struct ibv_comp_channel **ch, uint32_t depth)
{
	if (!(*ch = ibv_create_comp_channel(id->verbs)))
		return NULL;
	struct ibv_cq *cq = ibv_create_cq(id->verbs, depth ? depth : 1, id, *ch, 0);
	if (cq && ibv_req_notify_cq(cq, 0)) {
		ibv_destroy_cq(cq);
		cq = NULL;
	}
	return cq;
}

/*
 * cm_create_xrc makes an XRC ID's QP, as rdma-core's rdma_create_qp_ex:
 * a send QP on pd with a send CQ (made if not given), or a receive QP in
 * the library's XRC domain, with a receive CQ made for the SRQ that
 * rdma_create_srq gives the ID (whose completions it takes).
 */
static int cm_create_xrc(struct cm_id *c, struct ibv_pd *pd, struct ibv_qp_init_attr *attr, const uint64_t *send_ops)
{
	struct rdma_cm_id *id = &c->id;
	int send = attr->qp_type == IBV_QPT_XRC_SEND;
	struct ibv_cq **cq = send ? &id->send_cq : &id->recv_cq;
	struct ibv_cq *given = send ? attr->send_cq : attr->recv_cq;
	if (!given && !*cq) {
		struct ibv_comp_channel **ch = send ? &id->send_cq_channel : &id->recv_cq_channel;
		if (!(*cq = make_cq(id, ch, send ? attr->cap.max_send_wr : attr->cap.max_recv_wr)))
			return cm_fail(errno);
		c->own_cqs = 1;
	}
	struct ibv_qp *qp;
	if (send) {
		struct ibv_qp_init_attr a = *attr;
		a.send_cq = given ? given : *cq;
		a.recv_cq = NULL;
		a.srq = NULL;
		qp = cm_lib.ops->cm_create_qp(pd, c->handle, &a, send_ops);
		if (qp)
			attr->cap = a.cap;
	} else {
		struct ibv_xrcd *x = default_xrcd();
		qp = x ? cm_lib.ops->cm_create_xrc_qp(x, c->handle, attr->qp_context) : NULL;
		if (qp)
			qp->recv_cq = given ? given : *cq; /* the SRQ's, as rdma-core's */
	}
	if (!qp) {
		int err = errno;
		if (c->own_cqs)
			destroy_cqs(id);
		c->own_cqs = 0;
		return cm_fail(err);
	}
	id->qp = qp;
	id->pd = pd;
	return 0;
}

/* cm_create_qp makes id's QP on the daemon's side and the provider's,
 * with the ibv_wr_* operations of *send_ops if that is not NULL. */
int cm_create_qp(struct cm_id *c, struct ibv_pd *pd, struct ibv_qp_init_attr *attr, const uint64_t *send_ops)
{
	struct rdma_cm_id *id = &c->id;
	if (!attr || !id->verbs || id->qp || (pd && pd->context != id->verbs))
		return cm_fail(EINVAL);
	if (!pd && !(pd = default_pd()))
		return -1;
	struct ibv_qp_init_attr a = *attr;
	if (a.qp_type == IBV_QPT_XRC_RECV || a.qp_type == IBV_QPT_XRC_SEND)
		return cm_create_xrc(c, pd, attr, send_ops);
	if (!a.srq)
		a.srq = id->srq; /* rdma_create_srq's, as librdmacm gives it */
	if (!a.send_cq || !a.recv_cq) {
		if (a.send_cq || a.recv_cq)
			return cm_fail(EINVAL);
		c->own_cqs = 1;
		if (!(id->recv_cq = make_cq(id, &id->recv_cq_channel, a.cap.max_recv_wr)) ||
		    !(id->send_cq = make_cq(id, &id->send_cq_channel, a.cap.max_send_wr))) {
			int err = errno;
			destroy_cqs(id);
			return cm_fail(err);
		}
		a.send_cq = id->send_cq;
		a.recv_cq = id->recv_cq;
	}
	struct ibv_qp *qp = cm_lib.ops->cm_create_qp(pd, c->handle, &a, send_ops);
	if (!qp) {
		int err = errno;
		if (c->own_cqs)
			destroy_cqs(id);
		return cm_fail(err);
	}
	attr->cap = a.cap;
	id->qp = qp;
	id->pd = pd;
	if (qp->qp_type == IBV_QPT_UD) {
		/* The daemon took it to RTS with the port space's Q_Key, as
		 * librdmacm's ucma_init_ud_qp does; ibv_query_qp tells it. */
		struct ibv_qp_attr qa = {.qp_state = IBV_QPS_RTS, .port_num = 1, .qkey = RDMA_UDP_QKEY};
		cm_lib.ops->cm_qp_attr(qp, &qa, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_QKEY);
	}
	return 0;
}

CM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id)
		return cm_fail(EINVAL);
	return cm_create_qp(to_cm_id(id), pd, qp_init_attr, NULL);
}

/* rdma_create_qp_ex takes what the provider's ibv_create_qp_ex takes: a
 * PD, send_ops_flags for the ibv_wr_* API, no creation flags. */
CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	if (!id || !attr)
		return cm_fail(EINVAL);
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if ((attr->comp_mask & ~known) || ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags))
		return cm_fail(EOPNOTSUPP);
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = attr->send_cq,
				     .recv_cq = attr->recv_cq, .srq = attr->srq, .cap = attr->cap,
				     .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all};
	const uint64_t *send_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? &attr->send_ops_flags : NULL;
	int ret = cm_create_qp(to_cm_id(id), (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL, &a, send_ops);
	if (!ret)
		attr->cap = a.cap;
	return ret;
}

/* cm_create_xrc_srq is rdma_create_srq_ex's for an XRC SRQ. */
static int cm_create_xrc_srq(struct cm_id *c, struct ibv_srq_init_attr_ex *attr)
{
	struct rdma_cm_id *id = &c->id;
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd)
		attr->pd = id->pd;
	if (!attr->pd || attr->pd->context != id->verbs)
		return cm_fail(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd)
		attr->xrcd = default_xrcd();
	if (!attr->xrcd)
		return cm_fail(errno);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
		if (!id->recv_cq) {
			if (!(id->recv_cq = make_cq(id, &id->recv_cq_channel, attr->attr.max_wr)))
				return cm_fail(errno);
			c->own_cqs = 1;
		}
		attr->cq = id->recv_cq;
	}
	attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return cm_fail(errno);
	id->srq = srq;
	return 0;
}

/* rdma_create_srq_ex makes the ID's SRQ, which the ID's QP then takes
 * (rdma_create_qp), on the attributes' PD or the ID's; an XRC SRQ in the
 * library's XRC domain, completing in the ID's receive CQ (made if need
 * be), unless the attributes name them, as rdma-core's. */
CM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr || !id->verbs || id->srq || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return cm_fail(EINVAL);
	if (attr->srq_type == IBV_SRQT_XRC)
		return cm_create_xrc_srq(to_cm_id(id), attr);
	if (attr->srq_type != IBV_SRQT_BASIC)
		return cm_fail(ENOSYS);
	struct ibv_pd *pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd : id->pd;
	if (!pd || pd->context != id->verbs)
		return cm_fail(EINVAL);
	struct ibv_srq_init_attr a = {.srq_context = attr->srq_context, .attr = attr->attr};
	struct ibv_srq *srq = ibv_create_srq(pd, &a);
	if (!srq)
		return cm_fail(errno);
	attr->attr = a.attr;
	attr->pd = pd;
	attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	if (!id->pd)
		id->pd = pd;
	id->srq = srq;
	return 0;
}

CM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!attr)
		return cm_fail(EINVAL);
	/* An XRC receive ID's SRQ is an XRC SRQ, as rdma-core's. */
	struct ibv_srq_init_attr_ex ax = {.srq_context = attr->srq_context, .attr = attr->attr,
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
					  .srq_type = id && id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC,
					  .pd = pd};
	int ret = rdma_create_srq_ex(id, &ax);
	attr->attr = ax.attr;
	return ret;
}

CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq || ibv_destroy_srq(id->srq))
		return;
	id->srq = NULL;
	struct cm_id *c = to_cm_id(id);
	if (!id->qp && c->own_cqs) { /* an XRC ID's, which its QP left */
		destroy_cqs(id);
		c->own_cqs = 0;
	}
}

/* rdma_destroy_qp takes the QP back from the ID (cm_detach_qp) and
 * destroys it. */
CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	struct cm_id *c = to_cm_id(id);
	struct sn_handle req = {c->handle};
	cm_call(SN_OP_CM_DETACH_QP, &req, sizeof(req), NULL, 0);
	int xrc_srq = id->qp->qp_type == IBV_QPT_XRC_RECV && id->srq;
	ibv_destroy_qp(id->qp);
	id->qp = NULL;
	if (xrc_srq)
		return; /* its SRQ takes the CQ: rdma_destroy_srq destroys them */
	if (c->own_cqs)
		destroy_cqs(id);
	c->own_cqs = 0;
}

static uint8_t depth(uint8_t want, uint8_t max)
{
	return want < max ? want : max;
}

/* conn_param encodes the program's parameters, or librdmacm's defaults
 * without them: the device's depths (RDMA_MAX_* too), retries 7; the QP
 * number only for an ID without a QP (the program's own, rping -q). */
static int conn_param(struct sn_cm_conn_param *p, struct cm_id *c, const struct rdma_conn_param *in, size_t max_private)
{
	memset(p, 0, sizeof(*p));
	p->id = c->handle;
	p->responder_resources = cm_lib.max_responder;
	p->initiator_depth = cm_lib.max_initiator;
	p->retry_count = p->rnr_retry_count = 7;
	if (!in)
		return 0;
	if (in->private_data_len && (!in->private_data || in->private_data_len > max_private))
		return cm_fail(EINVAL);
	p->responder_resources = depth(in->responder_resources, cm_lib.max_responder);
	p->initiator_depth = depth(in->initiator_depth, cm_lib.max_initiator);
	p->retry_count = in->retry_count;
	p->rnr_retry_count = in->rnr_retry_count;
	p->private_len = in->private_data_len;
	if (in->private_data_len)
		memcpy(p->private_data, in->private_data, in->private_data_len);
	if (!c->id.qp)
		p->qp_num = in->qp_num;
	return 0;
}

CM_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_cm_conn_param p;
	/* After the rdma_cm header: of a REQ's private data, of a SIDR_REQ's. */
	size_t max_private = id->qp_type == IBV_QPT_UD ? 180 : 56;
	if (conn_param(&p, c, param, max_private) || cm_call(SN_OP_CM_CONNECT, &p, sizeof(p), NULL, 0))
		return -1;
	/* The program's own QP: it moves it on and calls rdma_establish. */
	return cm_wait(c, id->qp ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_CONNECT_RESPONSE);
}

/* rdma_accept: without parameters, the depths the peer asked for within
 * the device's, as librdmacm answers. */
CM_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_cm_conn_param p;
	int ud = id->qp_type == IBV_QPT_UD;
	if (conn_param(&p, c, param, ud ? 136 : 196)) /* a SIDR_REP's room, a REP's */
		return -1;
	if (!param) {
		p.responder_resources = depth(c->peer_initiator, cm_lib.max_responder);
		p.initiator_depth = depth(c->peer_responder, cm_lib.max_initiator);
	}
	if (cm_call(SN_OP_CM_ACCEPT, &p, sizeof(p), NULL, 0))
		return -1;
	/* A UD ID's answer is all: no event follows, as with the kernel. */
	return ud ? 0 : cm_wait(c, RDMA_CM_EVENT_ESTABLISHED);
}

/* rdma_init_qp_attr: the attributes that move a QP the program made
 * itself (rping -q) through the states of id's connection, as the kernel's
 * CM works them out from the REQ or the REP. */
CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask)
		return cm_fail(EINVAL);
	struct sn_cm_init_qp_attr_req req = {.id = to_cm_id(id)->handle, .state = qp_attr->qp_state};
	struct sn_modify_qp_req r;
	if (cm_call(SN_OP_CM_INIT_QP_ATTR, &req, sizeof(req), &r, sizeof(r)))
		return -1;
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->qp_state = r.state;
	qp_attr->cur_qp_state = r.cur_state;
	qp_attr->path_mtu = r.path_mtu;
	qp_attr->port_num = r.port;
	qp_attr->timeout = r.timeout;
	qp_attr->retry_cnt = r.retry_cnt;
	qp_attr->rnr_retry = r.rnr_retry;
	qp_attr->min_rnr_timer = r.min_rnr;
	qp_attr->max_rd_atomic = r.max_rd_atomic;
	qp_attr->max_dest_rd_atomic = r.max_dest_rd_atomic;
	qp_attr->pkey_index = r.pkey_index;
	qp_attr->qp_access_flags = r.access;
	qp_attr->qkey = r.qkey;
	qp_attr->dest_qp_num = r.dest_qpn;
	qp_attr->rq_psn = r.rq_psn;
	qp_attr->sq_psn = r.sq_psn;
	/* On RoCE every address vector is a global route. */
	qp_attr->ah_attr.is_global = 1;
	qp_attr->ah_attr.port_num = 1;
	qp_attr->ah_attr.grh.sgid_index = r.sgid_index;
	qp_attr->ah_attr.grh.hop_limit = r.hop_limit;
	qp_attr->ah_attr.grh.traffic_class = r.traffic_class;
	qp_attr->ah_attr.grh.flow_label = r.flow_label;
	memcpy(qp_attr->ah_attr.grh.dgid.raw, r.dgid, 16);
	*qp_attr_mask = r.mask;
	return 0;
}

/* rdma_establish ends an active side's exchange whose QP is the
 * program's: the RTU goes once the program has taken its QP to RTS. */
CM_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id || id->qp)
		return cm_fail(EINVAL);
	struct sn_handle req = {to_cm_id(id)->handle};
	return cm_call(SN_OP_CM_ESTABLISH, &req, sizeof(req), NULL, 0);
}

CM_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (!id || (private_data_len && !private_data) || private_data_len > 148)
		return cm_fail(EINVAL);
	struct sn_cm_conn_param p = {.id = to_cm_id(id)->handle, .private_len = private_data_len};
	if (private_data_len)
		memcpy(p.private_data, private_data, private_data_len);
	return cm_call(SN_OP_CM_REJECT, &p, sizeof(p), NULL, 0);
}

CM_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *c = to_cm_id(id);
	struct sn_handle req = {c->handle};
	if (cm_call(SN_OP_CM_DISCONNECT, &req, sizeof(req), NULL, 0))
		return -1;
	return cm_wait(c, RDMA_CM_EVENT_DISCONNECTED);
}

/* rdma_create_ep makes a synchronous ID from rdma_getaddrinfo's answer:
 * bound for a passive one (its QP attributes kept for rdma_get_request),
 * resolved with its QP for an active one. */
CM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return cm_fail(EINVAL);
	struct rdma_cm_id *cid;
	if (rdma_create_id(NULL, &cid, NULL, res->ai_port_space))
		return -1;
	struct cm_id *c = to_cm_id(cid);
	int ret;
	if (res->ai_qp_type)
		cid->qp_type = res->ai_qp_type; /* as rdma-core's rdma_create_id2 */
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cid, res->ai_src_addr);
		if (!ret && qp_init_attr && !(c->ep_attr = malloc(sizeof(*qp_init_attr))))
			ret = cm_fail(ENOMEM);
		if (!ret && qp_init_attr) {
			*c->ep_attr = *qp_init_attr;
			c->ep_attr->qp_type = res->ai_qp_type;
			if (pd) /* else the device's, as rdma-core's ucma_passive_ep */
				cid->pd = pd;
		}
	} else {
		ret = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
		if (!ret)
			ret = rdma_resolve_route(cid, 2000);
		if (!ret && qp_init_attr) {
			qp_init_attr->qp_type = res->ai_qp_type;
			ret = rdma_create_qp(cid, pd, qp_init_attr);
		}
	}
	if (ret) {
		int err = errno;
		rdma_destroy_ep(cid);
		return cm_fail(err);
	}
	*id = cid;
	return 0;
}

CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* rdma_set_option: the traffic class and the ACK timeout (cm_set_option,
 * before connecting or accepting); other options are not supported. */
CM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || !optval)
		return cm_fail(EINVAL);
	if (level != RDMA_OPTION_ID || (optname != RDMA_OPTION_ID_ACK_TIMEOUT && optname != RDMA_OPTION_ID_TOS))
		return cm_fail(ENOSYS);
	if (optlen != sizeof(uint8_t))
		return cm_fail(EINVAL);
	struct sn_cm_set_option_req req = {.id = to_cm_id(id)->handle, .option = optname, .value = *(uint8_t *)optval};
	return cm_call(SN_OP_CM_SET_OPTION, &req, sizeof(req), NULL, 0);
}
