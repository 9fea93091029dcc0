/*
 * linerate DPDK shim: out-of-line wrappers for DPDK's static-inline
 * fast-path functions, so Rust can call them. Compiled by build.rs with the
 * full `pkg-config --cflags libdpdk` (which carries -include rte_config.h and
 * -march), so the inline bodies see the same configuration DPDK was built with.
 *
 * Every wrapper is one call; the per-packet mbuf field accessors (data_off,
 * data_len, pkt_len, buf_len) are NOT wrapped: Rust reads those fields from
 * the bindgen struct directly (see src/sys/mbuf.rs and the measurement in
 * src/sys/README-section.md).
 */
#ifndef LINERATE_DPDK_SHIM_H
#define LINERATE_DPDK_SHIM_H

#include <stdint.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <rte_version.h>
#include <rte_memzone.h>
#include <rte_mbuf_pool_ops.h>

/* Constants that are function-like macros (RTE_BIT64) bindgen cannot
 * evaluate; surfaced as enumerators. build.rs static-asserts nothing: the
 * shim .c file checks each value with _Static_assert. */
enum lr_consts {
    LR_ETH_RSS_IP = (int64_t)RTE_ETH_RSS_IP,
    LR_ETH_RSS_UDP = (int64_t)RTE_ETH_RSS_UDP,
    LR_ETH_RSS_TCP = (int64_t)RTE_ETH_RSS_TCP,
    LR_ETH_TX_OFFLOAD_MBUF_FAST_FREE = (int64_t)RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE,
    LR_RTE_MAX_LCORE = RTE_MAX_LCORE,
    LR_RTE_MAX_ETHPORTS = RTE_MAX_ETHPORTS,
    LR_RTE_PKTMBUF_HEADROOM = RTE_PKTMBUF_HEADROOM,
    LR_RTE_MBUF_DEFAULT_BUF_SIZE = RTE_MBUF_DEFAULT_BUF_SIZE,
    LR_RTE_ETH_NAME_MAX_LEN = RTE_ETH_NAME_MAX_LEN,
    LR_RTE_ETH_XSTATS_NAME_SIZE = RTE_ETH_XSTATS_NAME_SIZE,
    LR_RING_F_SP_ENQ = RING_F_SP_ENQ,
    LR_RING_F_SC_DEQ = RING_F_SC_DEQ,
};

/* rte_errno is a per-lcore (thread-local) variable behind a macro. */
int lr_rte_errno(void);
/* rte_lcore_id() reads a thread-local; LCORE_ID_ANY for unregistered threads. */
unsigned lr_rte_lcore_id(void);

/* The runtime calls rte_eth_rx_burst/tx_burst written out in Rust (ethdev.rs);
 * these two remain for benches/dpdk_shim.rs, which compares both. */
uint16_t lr_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t lr_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

struct rte_mbuf *lr_pktmbuf_alloc(struct rte_mempool *mp);
int lr_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned n);
int lr_mempool_get_bulk(struct rte_mempool *mp, void **objs, unsigned n);
uint64_t lr_mbuf_f_external(void);
/* A pktmbuf pool whose mbuf headers are packed apart from their data rooms:
 * the pool's objects are bare 128-byte mbufs, each initialised as
 * rte_pktmbuf_init would, except that buf_addr/buf_iova point at its own
 * room in one IOVA-contiguous memzone (*data_zone, to free with the pool).
 * The mbufs are direct to DPDK (no external-buffer flag, so the free path is
 * the plain one), which breaks DPDK's assumption that a direct mbuf's buffer
 * follows its header: they must never be attached to (rte_pktmbuf_attach,
 * rte_pktmbuf_clone, GSO, IP fragmentation). NULL with rte_errno set on
 * failure. */
struct rte_mempool *lr_pktmbuf_pool_create_packed(const char *name, const char *data_name,
                                                  unsigned n, unsigned cache, uint16_t data_room,
                                                  int socket, const struct rte_memzone **data_zone);
int lr_memzone_free(const struct rte_memzone *mz);
void lr_pktmbuf_free(struct rte_mbuf *m);
char *lr_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *lr_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *lr_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int lr_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
uint16_t lr_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t lr_pktmbuf_tailroom(const struct rte_mbuf *m);
void *lr_pktmbuf_mtod(const struct rte_mbuf *m);
uint16_t lr_pktmbuf_data_len(const struct rte_mbuf *m);
uint16_t lr_mbuf_refcnt_read(const struct rte_mbuf *m);
uint16_t lr_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v);

unsigned lr_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned n, unsigned *free_space);
unsigned lr_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned n, unsigned *available);
unsigned lr_ring_count(const struct rte_ring *r);

#endif
