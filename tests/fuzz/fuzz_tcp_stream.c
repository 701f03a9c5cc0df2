/* The TCP transport's receive side: the byte stream from a peer (wire
 * headers, credits, payloads, goodbye, abort with its reason) is parsed by
 * tcp_sock_read into receive slots. The stream comes from the fuzzer
 * through a socketpair; messages are consumed as the engine would. Any
 * malformed stream must end as a failed peer with a message, never as an
 * out-of-bounds access or more messages than slots. */
#include "../../src/transport/tcp/tcp.c"
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
    ctx.nbig = 1;   /* of which may hold a message over TCP_SMALL */
    ctx.listen_fd = -1;
    tcp_ep_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.ctx = &ctx;
    ep.peer = 1;
    tcp_sock_t s;
    memset(&s, 0, sizeof(s));
    s.ep = &ep;
    s.fd = sv[0];
    s.slot = calloc(3, sizeof(char *));
    s.slot_hdr = calloc(3, sizeof(rcoll_msg_hdr_t));
    s.slot_pay = calloc(3, sizeof(char *));
    s.slot_big = calloc(3, sizeof(char *));
    s.slot_isbig = calloc(3, 1);
    s.tx_isbig = calloc(3, 1);
    s.pool = calloc(1, sizeof(char *));
    s.pool_all = calloc(1, sizeof(char *));
    rcoll_slots_init(&s.sl, 3);
    s.sl.credits = 0; /* ours all spent: the peer may hand back up to 3 */
    s.txq_cap = 8;
    s.txq = calloc(8, sizeof(tcp_txitem_t));
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
    for (int i = 0; i < 3; i++)
        free(s.slot[i]);
    for (int i = 0; i < s.nalloc; i++)
        free(s.pool_all[i]);
    free(s.slot);
    free(s.slot_big);
    free(s.slot_isbig);
    free(s.tx_isbig);
    free(s.pool);
    free(s.pool_all);
    free(s.slot_pay);
    free(s.slot_hdr);
    free(s.txq);
    free(s.rb); /* the staging buffer (tcp_fill) */
    return 0;
}
