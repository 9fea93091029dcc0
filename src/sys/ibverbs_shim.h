/*
 * linerate ibverbs shim: out-of-line wrappers for the static-inline verbs
 * (they dispatch through the provider's ops table in struct ibv_context).
 */
#ifndef LINERATE_IBVERBS_SHIM_H
#define LINERATE_IBVERBS_SHIM_H

#include <infiniband/verbs.h>

int lr_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int lr_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int lr_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int lr_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_flow *lr_ibv_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *flow);
int lr_ibv_destroy_flow(struct ibv_flow *flow_id);
int lr_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);

/* --- RC queue pairs (the RPC transport, rpc::transport::verbs) --- */
int lr_ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);

#endif
