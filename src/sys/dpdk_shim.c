/* See dpdk_shim.h. Each function is a one-line forward to a DPDK inline. */
#include "dpdk_shim.h"

_Static_assert((uint64_t)LR_ETH_RSS_IP == RTE_ETH_RSS_IP, "RSS_IP fits an enum");
_Static_assert((uint64_t)LR_ETH_RSS_UDP == RTE_ETH_RSS_UDP, "RSS_UDP fits an enum");
_Static_assert((uint64_t)LR_ETH_RSS_TCP == RTE_ETH_RSS_TCP, "RSS_TCP fits an enum");
_Static_assert((uint64_t)LR_ETH_TX_OFFLOAD_MBUF_FAST_FREE == RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE,
               "FAST_FREE fits an enum");

int lr_rte_errno(void) { return rte_errno; }
unsigned lr_rte_lcore_id(void) { return rte_lcore_id(); }

uint16_t lr_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t lr_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *lr_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int lr_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned n)
{
    return rte_pktmbuf_alloc_bulk(mp, mbufs, n);
}

int lr_mempool_get_bulk(struct rte_mempool *mp, void **objs, unsigned n)
{
    return rte_mempool_get_bulk(mp, objs, n);
}

uint64_t lr_mbuf_f_external(void) { return RTE_MBUF_F_EXTERNAL; }

void lr_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
char *lr_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *lr_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *lr_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int lr_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
uint16_t lr_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t lr_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
void *lr_pktmbuf_mtod(const struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
uint16_t lr_pktmbuf_data_len(const struct rte_mbuf *m) { return rte_pktmbuf_data_len(m); }
uint16_t lr_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }
uint16_t lr_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v) { return rte_mbuf_refcnt_update(m, v); }

unsigned lr_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned n, unsigned *free_space)
{
    return rte_ring_enqueue_burst(r, objs, n, free_space);
}

unsigned lr_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned n, unsigned *available)
{
    return rte_ring_dequeue_burst(r, objs, n, available);
}

unsigned lr_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }

