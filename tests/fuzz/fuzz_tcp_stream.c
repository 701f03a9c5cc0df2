/* The TCP transport's receive side: the byte stream from a peer (wire
 * headers, credits, payloads, goodbye, abort with its reason) is parsed by
 * tcp_sock_read (tcp_recv.c) into receive slots. The stream comes from the
 * fuzzer through a socketpair; messages are consumed as the engine would. Any
 * malformed stream must end as a failed peer with a message, never as an
 * out-of-bounds access, more messages than slots or small payloads past
 * the ring. */
#include "../../src/transport/tcp/tcp_data.c"
#include "../../src/transport/tcp/tcp_recv.c"
#include "../../src/transport/tcp/tcp_sock.c"
#include "../../src/transport/tcp/tcp_ctx.c"
#include "../../src/transport/tcp/tcp_rails.c"
#include "../../src/transport/tcp/tcp_lazy.c"
#include "../../src/transport/tcp/tcp_failover.c"
#include "fuzz_common.h"
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 0;
    rcoll_boot_peer_t peers[2];
    memset(peers, 0, sizeof(peers));
    snprintf(peers[1].hostname, sizeof(peers[1].hostname), "fuzzhost");
    rcoll_bootstrap_t bs;
    memset(&bs, 0, sizeof(bs));
    bs.peers = peers;
    rcoll_tl_events_t ev = {NULL, fuzz_send_done, fuzz_peer_failed};
    struct rcoll_tl_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.p.rank = 0;
    ctx.p.nranks = 2;
    ctx.p.bs = &bs;
    ctx.p.epfd = -1;
    ctx.p.chunk_size = 8192; /* messages of both slot classes */
    ctx.p.nslots = 3;
    ctx.p.ev = &ev;
    ctx.nsocks = 1;
    ctx.nslots = 3; /* slots per socket, */
    ctx.nbig = 1;   /* of which may hold a message over TCP_SMALL, */
    ctx.small = TCP_SMALL;
    ctx.ring_size = 2 * TCP_SMALL; /* and a ring for the smaller ones */
    ctx.listen_fd = -1;
    tcp_ep_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.ctx = &ctx;
    ep.peer = 1;
    tcp_sock_t s;
    memset(&s, 0, sizeof(s));
    if (tcp_sock_init(&ctx, &ep, &s, 0) != 0) {
        s.closed = 0; /* (sv[0] is closed below) */
        goto out;
    }
    s.fd = sv[0];
    s.closed = 0;
    s.sl.credits = 0; /* ours all spent: the peer may hand back up to 3 */
    ep.socks = &s;
    fuzz_failed = 0;
    if (size && write(sv[1], data, size) != (ssize_t)size)
        goto out;
    shutdown(sv[1], SHUT_WR);
    for (int turn = 0; turn < 64 && !s.closed; turn++) {
        tcp_sock_read(&s);
        FUZZ_ASSERT(s.sl.count >= 0 && s.sl.count <= ctx.p.nslots);
        FUZZ_ASSERT(s.sl.credits >= 0 && s.sl.credits <= ctx.p.nslots);
        const rcoll_msg_hdr_t *h;
        const void *payload;
        while (tcp_recv_peek((rcoll_tl_ep_t *)&ep, &h, &payload) == RCOLL_OK) {
            FUZZ_ASSERT(h->len <= ctx.p.chunk_size);
            if (h->len) { /* the whole payload is readable */
                volatile uint8_t x = ((const uint8_t *)payload)[h->len - 1];
                (void)x;
            }
            tcp_recv_release((rcoll_tl_ep_t *)&ep);
        }
    }
    /* the stream ended (EOF after the fuzz bytes): the peer has failed or
     * said goodbye */
    FUZZ_ASSERT(fuzz_failed <= 1);
out:
    if (!s.closed)
        close(sv[0]);
    close(sv[1]);
    for (int i = 0; i < s.nalloc; i++)
        free(s.pool_all[i]);
    free(s.ring);
    free(s.slot_off);
    free(s.slot_ring);
    free(s.tx_ring);
    free(s.slot_big);
    free(s.slot_isbig);
    free(s.tx_isbig);
    free(s.slot_lseq);
    free(s.pool);
    free(s.pool_all);
    free(s.slot_pay);
    free(s.slot_hdr);
    free(s.txq);
    free(s.rb); /* the staging buffer (tcp_fill) */
    return 0;
}
