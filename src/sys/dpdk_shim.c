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

struct lr_rooms {
    char *addr;
    rte_iova_t iova;
    size_t elt;
    uint16_t room;
};

/* Each mbuf as rte_pktmbuf_init leaves it, but with its room in the zone. */
static void lr_packed_init(struct rte_mempool *mp, void *arg, void *obj, unsigned idx)
{
    const struct lr_rooms *r = arg;
    struct rte_mbuf *m = obj;
    memset(m, 0, mp->elt_size);
    m->priv_size = 0;
    m->buf_addr = r->addr + (size_t)idx * r->elt;
    rte_mbuf_iova_set(m, r->iova == RTE_BAD_IOVA ? RTE_BAD_IOVA : r->iova + (rte_iova_t)idx * r->elt);
    m->buf_len = r->room;
    rte_pktmbuf_reset_headroom(m);
    m->pool = mp;
    m->nb_segs = 1;
    m->port = RTE_MBUF_PORT_INVALID;
    rte_mbuf_refcnt_set(m, 1);
    m->next = NULL;
}

struct rte_mempool *lr_pktmbuf_pool_create_packed(const char *name, const char *data_name,
                                                  unsigned n, unsigned cache, uint16_t data_room,
                                                  int socket, const struct rte_memzone **data_zone)
{
    size_t elt = RTE_ALIGN_CEIL((size_t)data_room, RTE_CACHE_LINE_SIZE);
    const struct rte_memzone *mz =
        rte_memzone_reserve_aligned(data_name, (size_t)n * elt, socket,
                                    RTE_MEMZONE_IOVA_CONTIG, RTE_CACHE_LINE_SIZE);
    if (mz == NULL)
        return NULL;
    /* The pool's objects are bare mbuf headers; its private area says what
     * rte_pktmbuf_data_room_size() reports to the PMDs. */
    struct rte_mempool *mp = rte_mempool_create_empty(name, n, sizeof(struct rte_mbuf), cache,
                                                      sizeof(struct rte_pktmbuf_pool_private),
                                                      socket, 0);
    struct rte_pktmbuf_pool_private priv = {
        .mbuf_data_room_size = data_room, .mbuf_priv_size = 0, .flags = 0,
    };
    struct lr_rooms r = { mz->addr, mz->iova, elt, data_room };
    if (mp == NULL || rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL) != 0)
        goto fail;
    rte_pktmbuf_pool_init(mp, &priv);
    if (rte_mempool_populate_default(mp) < 0 || mp->size != n)
        goto fail;
    rte_mempool_obj_iter(mp, lr_packed_init, &r);
    *data_zone = mz;
    return mp;
fail:;
    int e = rte_errno;
    rte_mempool_free(mp); /* NULL is fine */
    rte_memzone_free(mz);
    rte_errno = e;
    return NULL;
}

int lr_memzone_free(const struct rte_memzone *mz) { return rte_memzone_free(mz); }

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

