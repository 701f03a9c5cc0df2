/* The shared-memory transport's view of what a peer writes into shared
 * memory: its ring's head counter and slot headers (in our segment), the
 * tail counter of our ring (in its segment: our credits), and its
 * segment header's state and abort reason. A peer process of the job can
 * write anything there (a bug, a stray write), so here the fuzzer plays
 * that peer. Each record: an op byte, then its bytes:
 *   0  publish: a slot header into slot k, then head = v
 *   1  tail of our ring = v (credits back, possibly impossible)
 *   2  state = v, and a reason (not NUL-terminated)
 *   3  we send a message (may wait for credits)
 *   4  the engine consumes the next message as it would
 *   5  the progress and wake-up checks
 *   6  its pool's bitmap word = v (its receiver freeing, or garbage)
 * Both sides have a pool (RCOLL_SHM_POOL): ring slots of 4 KiB, messages
 * above that through 2 pool slots, whose index a slot header names.
 * Asserts what the transport promises: nothing outside the rings is read
 * or written, no endless loop (libFuzzer's -timeout), a failure reaches the
 * engine with a message, and a send's completion is reported at most once
 * per send. */
#include "../../src/transport/shm/shm_data.c"
#include "../../src/transport/shm/shm_ctx.c"
#include "fuzz_common.h"

static int sends_done;
static void count_done(void *arg, void *cookie)
{
    (void)arg; (void)cookie;
    sends_done++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { NS = 4, CHUNK = 8192, NPOOL = 2 };
    rcoll_boot_peer_t peers[2];
    memset(peers, 0, sizeof(peers));
    rcoll_bootstrap_t bs;
    memset(&bs, 0, sizeof(bs));
    bs.peers = peers;
    rcoll_tl_events_t ev = {NULL, count_done, fuzz_peer_failed};
    struct rcoll_tl_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.p.rank = 0;
    ctx.p.nranks = 2;
    ctx.p.bs = &bs;
    ctx.p.epfd = -1;
    ctx.p.chunk_size = CHUNK;
    ctx.p.nslots = NS;
    ctx.p.ev = &ev;
    ctx.slot_size = SHM_CL + SHM_POOL_INLINE;
    ctx.cma_min = 0;
    size_t ring = shm_ring_bytes(ctx.slot_size, NS);
    /* our pool and the peer's: slots, a bitmap word, a waiter word */
    char *our_pool = aligned_alloc(SHM_CL, NPOOL * CHUNK);
    char *peer_pool = aligned_alloc(SHM_CL, NPOOL * CHUNK);
    uint64_t our_ctl[2] = {0, 0}, peer_ctl[2] = {0, 0};
    ctx.pool = our_pool;
    ctx.pool_bits = &our_ctl[0];
    ctx.pool_wait = &our_ctl[1];
    ctx.pool_n = NPOOL;
    ctx.pool_nw = 1;
    ctx.wait_nw = 1;
    ctx.pool_stride = CHUNK;
    ctx.npeers = 1;
    /* each region exactly as large as the transport may touch (ASan) */
    shm_seg_hdr_t *peer_hdr = aligned_alloc(SHM_CL, sizeof(shm_seg_hdr_t));
    shm_seg_hdr_t *our_hdr = aligned_alloc(SHM_CL, sizeof(shm_seg_hdr_t));
    char *tx_ring = aligned_alloc(SHM_CL, ring);
    char *rx_ring = aligned_alloc(SHM_CL, ring);
    memset(peer_hdr, 0, sizeof(*peer_hdr));
    memset(our_hdr, 0, sizeof(*our_hdr));
    memset(tx_ring, 0, ring);
    memset(rx_ring, 0, ring);
    ctx.hdr = our_hdr;
    shm_ep_t ep;
    memset(&ep, 0, sizeof(ep));
    void *cookies[NS] = {0};
    ep.ctx = &ctx;
    ep.peer = 1;
    ep.peer_hdr = peer_hdr;
    ep.tx = (shm_ring_ctl_t *)tx_ring;
    ep.tx_slots = tx_ring + sizeof(shm_ring_ctl_t);
    ep.tx_slot = ctx.slot_size;
    ep.tx_inline = SHM_POOL_INLINE;
    ep.tx_pool = peer_pool;
    ep.tx_pool_bits = &peer_ctl[0];
    ep.tx_pool_wait = &peer_ctl[1];
    ep.tx_pool_n = NPOOL;
    ep.rx = (shm_ring_ctl_t *)rx_ring;
    ep.rx_slots = rx_ring + sizeof(shm_ring_ctl_t);
    ep.tx_cookie = cookies;
    ep.pid = 0x7ffffff0; /* no such process: single-copy reads fail */
    ep.pidfd = -1;
    ep.cma_tx = 1;
    shm_ep_t *eps[2] = {NULL, &ep};
    ctx.eps = eps;
    shm_ep_t *ring_ep[1] = {&ep};
    ctx.ring_ep = ring_ep;
    fuzz_failed = 0;
    sends_done = 0;
    int sends = 0;
    uint8_t payload[CHUNK], dst[CHUNK];
    memset(payload, 0x5a, sizeof(payload));

    size_t off = 0;
    while (off < size) {
        uint8_t op = data[off++] % 7;
        uint64_t v = 0;
        size_t take;
        switch (op) {
        case 0: {
            shm_slot_hdr_t sh;
            take = 1 + sizeof(sh) + 8;
            if (off + take > size)
                goto out;
            memcpy(&sh, data + off + 1, sizeof(sh));
            memcpy(&v, data + off + 1 + sizeof(sh), 8);
            memcpy(ep.rx_slots + (data[off] % NS) * ctx.slot_size, &sh,
                   sizeof(sh));
            ep.rx->head = v;
            break;
        }
        case 1:
            take = 8;
            if (off + take > size)
                goto out;
            memcpy(&v, data + off, 8);
            ep.tx->tail = v;
            break;
        case 2:
            take = 4 + 32;
            if (off + take > size)
                goto out;
            memcpy(&peer_hdr->state, data + off, 4);
            memset(peer_hdr->reason, 'r', sizeof(peer_hdr->reason));
            memcpy(peer_hdr->reason, data + off + 4, 32);
            break;
        case 3: {
            rcoll_msg_hdr_t h;
            memset(&h, 0, sizeof(h));
            take = 2;
            if (off + take > size)
                goto out;
            h.len = (uint32_t)(data[off] | data[off + 1] << 8) % (CHUNK + 1);
            /* the top bit: a single-copy send (done when the slot is
             * freed, i.e. when the tail passes it) */
            int flags = data[off + 1] & 0x80 ? RCOLL_TL_PEER_COPIES : 0;
            rcoll_status_t st = shm_send((rcoll_tl_ep_t *)&ep, &h, payload,
                                         &cookies, flags, h.len);
            if (st == RCOLL_OK)
                sends++;
            break;
        }
        case 4: {
            take = 0;
            const rcoll_msg_hdr_t *h;
            const void *pl;
            if (shm_recv_peek((rcoll_tl_ep_t *)&ep, &h, &pl) != RCOLL_OK)
                break;
            FUZZ_ASSERT(h == &ep.rx_hdr); /* the copy, not the slot */
            /* a message in the slot fits it (or is a marked mismatch);
             * one left in the sender's memory (single copy) may cover
             * several chunks, up to SHM_MSG_MAX (+1: a mismatch) */
            FUZZ_ASSERT(h->len <= (pl ? CHUNK + 1 : SHM_MSG_MAX + 1));
            if (h->len <= CHUNK) { /* else the engine reports a mismatch */
                if (pl)
                    memcpy(dst, pl, h->len);
                else
                    shm_recv_copy((rcoll_tl_ep_t *)&ep, dst);
            }
            shm_recv_release((rcoll_tl_ep_t *)&ep);
            break;
        }
        case 6:
            take = 8;
            if (off + take > size)
                goto out;
            memcpy(&peer_ctl[0], data + off, 8);
            break;
        default:
            take = 0;
            shm_progress(&ctx);
            shm_anything(&ctx);
            break;
        }
        off += take;
        FUZZ_ASSERT(sends_done <= sends);
    }
out:
    FUZZ_ASSERT(!ep.failed || fuzz_failed == 1);
    free(peer_hdr);
    free(our_hdr);
    free(tx_ring);
    free(rx_ring);
    free(our_pool);
    free(peer_pool);
    return 0;
}
