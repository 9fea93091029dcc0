/* See ibverbs_shim.h. Each function forwards to a static-inline verb. */
#include "ibverbs_shim.h"

int lr_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    return ibv_post_send(qp, wr, bad_wr);
}

int lr_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    return ibv_post_recv(qp, wr, bad_wr);
}

int lr_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, num_entries, wc);
}

int lr_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return ibv_req_notify_cq(cq, solicited_only);
}

struct ibv_flow *lr_ibv_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *flow)
{
    return ibv_create_flow(qp, flow);
}

int lr_ibv_destroy_flow(struct ibv_flow *flow_id) { return ibv_destroy_flow(flow_id); }

int lr_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr)
{
    return ibv_query_port(context, port_num, port_attr);
}

/* --- RC queue pairs (the RPC transport, rpc::transport::verbs) --- */

int lr_ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
    return ibv_query_gid(context, port_num, index, gid);
}
