// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Receive side scaling: receive work queues (ibv_create_wq), indirection
 * tables (ibv_create_rwq_ind_table) and RSS QPs (ibv_create_qp_ex with
 * rx_hash_conf). softnic's work queue is a raw packet QP that only
 * receives, made with create_qp (CAP_NET_RAW, as a raw packet QP); its
 * states are the QP's (RDY: RTR). A table is the provider's list of its
 * queues, which create_rss_qp passes to the daemon.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"

struct sn_rwq {
	struct ibv_wq ibv;
	struct ibv_qp *qp;
};

struct sn_rwq_table {
	struct ibv_rwq_ind_table ibv;
	uint32_t log_size;
	struct sn_rwq *wqs[SN_MAX_RSS_TABLE];
};

static struct sn_rwq *to_rwq(struct ibv_wq *wq) { return sn_container_of(wq, struct sn_rwq, ibv); }

static int post_wq_recv(struct ibv_wq *wq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return sn_post_recv(to_rwq(wq)->qp, wr, bad);
}

struct ibv_wq *sn_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *attr)
{
	if (attr->wq_type != IBV_WQT_RQ || !attr->pd || !attr->cq || attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && attr->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct sn_rwq *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	struct ibv_qp_init_attr qa = {.send_cq = attr->cq, .recv_cq = attr->cq, .qp_type = IBV_QPT_RAW_PACKET,
				      .cap = {.max_send_wr = 1, .max_recv_wr = attr->max_wr, .max_recv_sge = attr->max_sge}};
	w->qp = sn_create_qp(attr->pd, &qa);
	if (!w->qp) {
		free(w);
		return NULL;
	}
	attr->max_wr = qa.cap.max_recv_wr;
	attr->max_sge = qa.cap.max_recv_sge;
	w->ibv.context = context;
	w->ibv.pd = attr->pd;
	w->ibv.cq = attr->cq;
	w->ibv.wq_num = w->qp->qp_num;
	w->ibv.state = IBV_WQS_RESET;
	w->ibv.wq_type = IBV_WQT_RQ;
	w->ibv.post_recv = post_wq_recv;
	return &w->ibv;
}

/* wq_to moves the work queue's QP to the QP state of WQ state s. */
static int wq_to(struct sn_rwq *w, enum ibv_wq_state s)
{
	struct ibv_qp_attr a = {.port_num = 1};
	switch (s) {
	case IBV_WQS_RESET:
		a.qp_state = IBV_QPS_RESET;
		return sn_modify_qp(w->qp, &a, IBV_QP_STATE);
	case IBV_WQS_ERR:
		a.qp_state = IBV_QPS_ERR;
		return sn_modify_qp(w->qp, &a, IBV_QP_STATE);
	case IBV_WQS_RDY:
		if (w->ibv.state == IBV_WQS_RDY)
			return 0;
		if (w->ibv.state != IBV_WQS_RESET)
			return EINVAL;
		a.qp_state = IBV_QPS_INIT;
		int err = sn_modify_qp(w->qp, &a, IBV_QP_STATE | IBV_QP_PORT);
		if (err)
			return err;
		a.qp_state = IBV_QPS_RTR;
		return sn_modify_qp(w->qp, &a, IBV_QP_STATE);
	default:
		return EINVAL;
	}
}

int sn_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr)
{
	struct sn_rwq *w = to_rwq(wq);
	if (attr->attr_mask & ~(uint32_t)(IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE))
		return EOPNOTSUPP; /* no flags (cvlan stripping, scatter FCS ...) */
	if ((attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) && attr->curr_wq_state != w->ibv.state)
		return EINVAL;
	if (!(attr->attr_mask & IBV_WQ_ATTR_STATE))
		return 0;
	int err = wq_to(w, attr->wq_state);
	if (!err)
		w->ibv.state = attr->wq_state;
	return err;
}

int sn_destroy_wq(struct ibv_wq *wq)
{
	struct sn_rwq *w = to_rwq(wq);
	int err = sn_destroy_qp(w->qp);
	if (err)
		return err;
	free(w);
	return 0;
}

struct ibv_rwq_ind_table *sn_create_rwq_ind_table(struct ibv_context *context,
						  struct ibv_rwq_ind_table_init_attr *attr)
{
	if (attr->comp_mask || attr->log_ind_tbl_size > SN_MAX_RSS_TABLE_LOG || !attr->ind_tbl) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_rwq_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->log_size = attr->log_ind_tbl_size;
	for (uint32_t i = 0; i < 1u << t->log_size; i++) {
		if (!attr->ind_tbl[i] || attr->ind_tbl[i]->context != context) {
			free(t);
			errno = EINVAL;
			return NULL;
		}
		t->wqs[i] = to_rwq(attr->ind_tbl[i]);
	}
	t->ibv.context = context;
	return &t->ibv;
}

int sn_destroy_rwq_ind_table(struct ibv_rwq_ind_table *table)
{
	free(sn_container_of(table, struct sn_rwq_table, ibv));
	return 0;
}

/* sn_create_rss_qp makes an RSS QP: attr names an indirection table and
 * a Toeplitz hash (another function: EOPNOTSUPP); its CQ is the first
 * work queue's. */
struct ibv_qp *sn_create_rss_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_rx_hash_conf *h = &attr->rx_hash_conf;
	if (!attr->rwq_ind_tbl || attr->qp_type != IBV_QPT_RAW_PACKET || attr->rwq_ind_tbl->context != context ||
	    h->rx_hash_key_len != SN_RSS_KEY_LEN || !h->rx_hash_key) {
		errno = EINVAL;
		return NULL;
	}
	if (h->rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct sn_rwq_table *t = sn_container_of(attr->rwq_ind_tbl, struct sn_rwq_table, ibv);
	struct sn_create_rss_qp_req req = {.pd = sn_container_of(attr->pd, struct sn_pd, ibv)->handle,
					   .cq = sn_container_of(t->wqs[0]->ibv.cq, struct sn_cq, ibv)->handle,
					   .log_size = t->log_size, .function = h->rx_hash_function,
					   .fields = h->rx_hash_fields_mask};
	memcpy(req.key, h->rx_hash_key, SN_RSS_KEY_LEN);
	for (uint32_t i = 0; i < 1u << t->log_size; i++)
		req.wqs[i] = sn_container_of(t->wqs[i]->qp, struct sn_qp, vqp.qp)->handle;
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = t->wqs[0]->ibv.cq,
				     .recv_cq = t->wqs[0]->ibv.cq, .qp_type = IBV_QPT_RAW_PACKET};
	return sn_create_qp_req(attr->pd, &a, SN_OP_CREATE_RSS_QP, &req, sizeof(req),
				offsetof(struct sn_create_rss_qp_req, user_handle));
}
