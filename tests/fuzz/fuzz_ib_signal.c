/* The verbs transport's receive side: a peer RDMA-writes a header (and
 * payload) into a slot of our registered ring and then signals it with a
 * 32-bit word (immediate data or a 4-byte SEND): type, credits, slot. An
 * abort's reason lands in the ring's control area. Here the fuzzer plays
 * the peer: each record is a header written into the slot the word names,
 * then the word; messages are consumed as the engine would. The
 * connection's private data (cm mode) goes through its MAC check too.
 * Without libibverbs/librdmacm the target does nothing. */
#include "config.h"
#if defined(HAVE_VERBS) && defined(HAVE_RDMACM)
/* the whole transport in this translation unit: its static functions
 * (conn_data_check) are what is fuzzed */
#include "../../src/transport/ib/ib_mem.c"
#include "../../src/transport/ib/ib_post.c"
#include "../../src/transport/ib/ib_data.c"
#include "../../src/transport/ib/ib_recv.c"
#include "../../src/transport/ib/ib_fail.c"
#include "../../src/transport/ib/ib_fo.c"
#include "../../src/transport/ib/ib_dev.c"
#include "../../src/transport/ib/ib_conn.c"
#include "../../src/transport/ib/ib_lazy.c"
#include "../../src/transport/ib/ib_ctx.c"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rcoll_boot_peer_t peers[2];
    memset(peers, 0, sizeof(peers));
    rcoll_bootstrap_t bs;
    memset(&bs, 0, sizeof(bs));
    bs.peers = peers;
    rcoll_tl_events_t ev = {NULL, fuzz_send_done, fuzz_peer_failed};
    uint8_t secret[16] = "fuzz-job-secret";
    struct rcoll_tl_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.p.rank = 0;
    ctx.p.nranks = 2;
    ctx.p.bs = &bs;
    ctx.p.epfd = -1;
    ctx.p.secret = secret;
    ctx.p.chunk_size = 256;
    ctx.p.nslots = 4;
    ctx.p.ev = &ev;
    ctx.nqps = 1;
    ctx.stride = IB_HDR + 256;
    ib_ep_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.ctx = &ctx;
    ep.peer = 1;
    ib_qp_t q;
    memset(&q, 0, sizeof(q));
    q.ep = &ep;
    ctx.dev = q.dev = &ctx.devs[0]; /* one device */
    ctx.devs[0].ctx = &ctx;
    ctx.ndev = 1;
    q.rx = calloc(1, (size_t)ctx.p.nslots * ctx.stride + IB_CTRL);
    q.rx_flag = calloc((size_t)ctx.p.nslots, 1);
    rcoll_slots_init(&q.sl, ctx.p.nslots);
    q.sl.credits = 0; /* ours all spent: the peer may hand back nslots */
    ep.qps = &q;
    fuzz_failed = 0;
    /* an odd first byte: the peer can fail over (messages numbered in the
     * 8 bytes before the header, taken by number; the second byte the
     * peer's `upto`, below which heads are moved aside) */
    size_t pre = 0;
    if (size >= 2 && (data[0] & 1)) {
        ep.fo = 1;
        ep.peer_upto = data[1];
        pre = IB_HDR_OFF - IB_SEQ_OFF;
        data += 2;
        size -= 2;
    }

    /* the private data of a connection request */
    ib_conn_data_t cd;
    if (size >= sizeof(cd) && conn_data_check(&ctx, data, sizeof(cd), &cd) == 0)
        FUZZ_ASSERT(cd.magic == IB_MAGIC); /* only with the job's MAC */

    size_t off = 0;
    const size_t rec = 4 + pre + sizeof(rcoll_msg_hdr_t) + 16;
    while (off + rec <= size && !ep.failed) {
        uint32_t w;
        memcpy(&w, data + off, 4);
        /* the peer's WRITE: header + the first payload bytes, into the
         * slot the word names (or the control area for an abort) */
        if (IMM_TYPE(w) == IMM_CTRL)
            memcpy(q.rx + (size_t)ctx.p.nslots * ctx.stride, data + off + 4,
                   rec - 4);
        else
            memcpy(q.rx + (size_t)(IMM_ARG(w) % ctx.p.nslots) * ctx.stride +
                       IB_HDR_OFF - pre,
                   data + off + 4, rec - 4);
        off += rec;
        ib_handle_word(&q, w);
        FUZZ_ASSERT(q.sl.count >= 0 && q.sl.count <= ctx.p.nslots);
        FUZZ_ASSERT(q.sl.credits >= 0 && q.sl.credits <= ctx.p.nslots);
        const rcoll_msg_hdr_t *h;
        const void *payload;
        if ((w & 1) && ib_recv_peek((rcoll_tl_ep_t *)&ep, &h, &payload) ==
                           RCOLL_OK) {
            /* a header rewritten after its signal reads as an oversized
             * message (chunk + 1), which the engine rejects as a mismatch */
            FUZZ_ASSERT(h->len <= ctx.p.chunk_size + 1);
            FUZZ_ASSERT(h == &ep.rx_hdr); /* the copy, not the ring */
            if (h->len && h->len <= ctx.p.chunk_size) {
                volatile uint8_t x = ((const uint8_t *)payload)[h->len - 1];
                (void)x;
            }
            ib_recv_release((rcoll_tl_ep_t *)&ep);
        }
    }
    if (ep.failed)
        FUZZ_ASSERT(ep.fail_msg[0] && fuzz_failed == 1);
    ib_fo_free(&ep);
    free(q.rx);
    free(q.rx_flag);
    return 0;
}
#else
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)data;
    (void)size;
    return 0;
}
#endif
