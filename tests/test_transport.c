/* Unit tests of the slot/credit protocol where it meets a real socket or
 * the matcher, single process:
 *  - tcp: every credit a receiver releases reaches its sender, even when
 *    the message meant to carry them is refused by a full socket before
 *    its first byte (EAGAIN) and more credits are owed by the retry. A
 *    random run of releases, sends and a reader that stalls and drains;
 *    the credits counted on the wire must equal those released. (The
 *    retry used to overwrite the credits taken by the refused try: a
 *    sender lost them for good, and a hierarchical all-to-all across
 *    hosts with 8 slots and 4 KiB chunks hung on credits.)
 *  - tcp: a random stream of empty, small and big messages one way, the
 *    receiver holding up to all its slots and releasing in bursts: every
 *    payload arrives intact and stays so while held (the sender lays out
 *    the receiver's ring of small payloads exactly as the receiver does),
 *    nothing deadlocks, and a stream of 8-byte messages costs a credit
 *    message per half window of slots (or half ring); both with the
 *    smallest window and with TCP_SLOT_MAX slots, where a reader that
 *    seldom reads also fills the socket and then the send queue.
 *    Also with the ring of a small communicator (16 KiB messages in it).
 *  - tcp: a socket that only receives leaves the kernel's pingpong
 *    (delayed ACK) mode after TCP_ONEWAY_READS reads, so that its reads
 *    ACK (and not the sender's system calls, over loopback), and again
 *    after a credit of its own; sockets of an exchange and of a shorter
 *    burst stay in it.
 *  - tcp: the ring is wholly mapped from the first message that uses
 *    it (mincore), not page by page as the first lap of messages reaches
 *    it (which made a size's first 64 calls slow).
 *  - tcp_window and tcp_ring_sizes: the slots per socket and the ring's
 *    threshold for a communicator's size.
 *  - the matcher (coll/match.c): a stalled engine sets aside what fills
 *    the slots of a peer that may be out of credits (coll_match_unblock),
 *    in arrival order, within RCOLL_UNEXPECTED_MAX, and an operation then
 *    finds those messages in the store, first in, first out.
 * Usage: test_transport */
#include <sys/socket.h>
/* sendmsg calls per fd, counted (the credit messages of a receiver) */
static int sendmsg_calls[256];
static ssize_t counted_sendmsg(int fd, const struct msghdr *m, int flags)
{
    if (fd >= 0 && fd < 256)
        sendmsg_calls[fd]++;
    return sendmsg(fd, m, flags);
}
#define sendmsg counted_sendmsg
#define rcoll_tl_tcp_ops test_transport_tcp_ops /* ours, not the library's */
#include "../src/transport/tcp/tcp_data.c"
#include "../src/transport/tcp/tcp_recv.c"
#include "../src/transport/tcp/tcp_ctx.c"
#include "../src/transport/tcp/tcp_rails.c"
#undef rcoll_tl_tcp_ops
#undef sendmsg
#include "../src/coll/sched.h"
#include "check.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>

static void no_send_done(void *arg, void *cookie)
{
    (void)arg;
    (void)cookie;
}

static int peer_failures;
static void peer_failed(void *arg, int peer, rcoll_status_t st,
                        const char *msg)
{
    (void)arg;
    (void)peer;
    (void)st;
    printf("peer failed: %s\n", msg);
    peer_failures++;
}

/* The reader's side of the stream: whole records parsed, credits summed. */
typedef struct {
    char buf[1 << 16];
    size_t have;
    uint64_t credits, data_msgs;
    int bad;
} wire_reader_t;

static void read_some(int fd, wire_reader_t *r, size_t max)
{
    while (max > 0 && r->have < sizeof(r->buf)) {
        size_t want = RCOLL_MIN(max, sizeof(r->buf) - r->have);
        ssize_t n = recv(fd, r->buf + r->have, want, MSG_DONTWAIT);
        if (n <= 0)
            break;
        r->have += (size_t)n;
        max -= (size_t)n;
    }
    size_t off = 0;
    for (;;) {
        tcp_wire_t w;
        if (r->have - off < sizeof(w))
            break;
        memcpy(&w, r->buf + off, sizeof(w));
        size_t plen = w.type == TCP_DATA ? w.hdr.len : 0;
        if (w.type != TCP_DATA && w.type != TCP_CREDIT)
            r->bad++;
        if (r->have - off < sizeof(w) + plen)
            break;
        r->credits += w.credits;
        r->data_msgs += w.type == TCP_DATA;
        off += sizeof(w) + plen;
    }
    memmove(r->buf, r->buf + off, r->have - off);
    r->have -= off;
}

static void test_tcp_credits_across_eagain(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        CHECK(0, "socketpair: %s", strerror(errno));
        return;
    }
    int small = 4096; /* the kernel's minimum: EAGAIN comes soon */
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    rcoll_sock_set_nonblock(sv[0], 1);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    rcoll_tl_events_t ev = {NULL, no_send_done, peer_failed};
    rcoll_boot_peer_t peers[2];
    memset(peers, 0, sizeof(peers));
    rcoll_bootstrap_t bs;
    memset(&bs, 0, sizeof(bs));
    bs.peers = peers;
    struct rcoll_tl_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.p.nranks = 2;
    ctx.p.bs = &bs;
    ctx.p.epfd = epfd;
    ctx.p.chunk_size = 1024;
    ctx.p.nslots = 8;
    ctx.p.ev = &ev;
    ctx.nsocks = 1;
    ctx.listen_fd = -1;
    tcp_ep_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.ctx = &ctx;
    ep.peer = 1;
    tcp_sock_t s;
    memset(&s, 0, sizeof(s));
    s.ep = &ep;
    s.fd = sv[0];
    rcoll_slots_init(&s.sl, 8);
    s.sl.credits = 1 << 30; /* the send side is not under test */
    s.txq_cap = 64;
    s.txq = calloc(64, sizeof(tcp_txitem_t));
    ep.socks = &s;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &s.h};
    epoll_ctl(epfd, EPOLL_CTL_ADD, sv[0], &e);

    static char payload[1024];
    wire_reader_t *r = calloc(1, sizeof(*r));
    uint64_t released = 0, sent = 0, refused_first = 0;
    unsigned seed = 12345;
    for (int i = 0; i < 20000 && r && !s.closed; i++) {
        unsigned x = rand_r(&seed) % 8;
        if (x < 3) { /* we release some of the peer's messages */
            int k = 1 + (int)(rand_r(&seed) % 3);
            s.sl.owed += k;
            released += (uint64_t)k;
        } else if (x < 6 && s.txq_count < s.txq_cap) {
            rcoll_msg_hdr_t h;
            memset(&h, 0, sizeof(h));
            h.len = 64 + rand_r(&seed) % 960;
            tcp_txq_push(&s, TCP_DATA, &h, payload, NULL);
            sent++;
        }
        int head_fresh = s.txq_count > 0 && s.txq[s.txq_head].off == 0;
        uint64_t owed = (uint64_t)s.sl.owed;
        tcp_sock_write(&s);
        if (head_fresh && owed > 0 && s.txq_count > 0 &&
            s.txq[s.txq_head].off == 0)
            refused_first++; /* credits taken, not a byte out */
        if (rand_r(&seed) % 4 == 0) /* the reader stalls 3 turns in 4 */
            read_some(sv[1], r, rand_r(&seed) % 8192);
    }
    /* the end: let everything out */
    for (int i = 0; r && i < 100000 && (s.txq_count > 0 || s.sl.owed > 0);
         i++) {
        tcp_sock_write(&s);
        read_some(sv[1], r, sizeof(r->buf));
    }
    if (r) {
        read_some(sv[1], r, sizeof(r->buf));
        CHECK(r->bad == 0, "tcp: %d records of an unknown type", r->bad);
        CHECK(r->data_msgs == sent, "tcp: %llu data messages sent, %llu "
              "read", (unsigned long long)sent,
              (unsigned long long)r->data_msgs);
        CHECK(r->credits == released, "tcp: %llu credits released, %llu "
              "reached the sender (%llu sends refused before their first "
              "byte with credits taken)", (unsigned long long)released,
              (unsigned long long)r->credits,
              (unsigned long long)refused_first);
        CHECK(refused_first > 0, "tcp: the socket never refused a message "
              "whose credits were taken: the case is not exercised");
        printf("tcp credits: %llu released and handed back over %llu "
               "messages, %llu refused before their first byte\n",
               (unsigned long long)released, (unsigned long long)sent,
               (unsigned long long)refused_first);
    }
    CHECK(peer_failures == 0, "tcp: the link failed");
    free(r);
    free(s.txq);
    free(s.rb);
    close(sv[0]);
    close(sv[1]);
    close(epfd);
}

/* ---- a transport of queues, for the matcher ---- */
#define FAKE_N 4 /* slots */
typedef struct {
    rcoll_msg_hdr_t hdr[64];
    char data[64][16];
    int head, count, released;
} fake_ep_t;

static rcoll_status_t fake_peek(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t **h,
                                const void **payload)
{
    fake_ep_t *f = (fake_ep_t *)tep;
    if (!f->count)
        return RCOLL_INPROGRESS;
    *h = &f->hdr[f->head];
    *payload = f->data[f->head];
    return RCOLL_OK;
}

static void fake_release(rcoll_tl_ep_t *tep)
{
    fake_ep_t *f = (fake_ep_t *)tep;
    f->head++;
    f->count--;
    f->released++;
}

static int fake_full(rcoll_tl_ep_t *tep)
{
    return ((fake_ep_t *)tep)->count >= FAKE_N;
}

static void fake_push(fake_ep_t *f, uint64_t seq, uint32_t chunk)
{
    int i = f->head + f->count++;
    memset(&f->hdr[i], 0, sizeof(f->hdr[i]));
    f->hdr[i].seq = seq;
    f->hdr[i].kind = COLL_ALLTOALL; /* class 0: a collective's chunk */
    f->hdr[i].chunk = chunk;
    f->hdr[i].len = 16;
    memset(f->data[i], (int)(seq * 16 + chunk), 16);
}

static void test_match_unblock(void)
{
    rcoll_tl_ops_t fake;
    memset(&fake, 0, sizeof(fake));
    fake.name = "fake";
    fake.recv_peek = fake_peek;
    fake.recv_release = fake_release;
    fake.recv_full = fake_full;
    fake_ep_t *f = calloc(3, sizeof(*f));
    const rcoll_tl_ops_t *tls[3] = {NULL, &fake, &fake};
    rcoll_tl_ep_t *eps[3] = {NULL, (rcoll_tl_ep_t *)&f[1],
                             (rcoll_tl_ep_t *)&f[2]};
    coll_env_t e;
    memset(&e, 0, sizeof(e));
    e.rank = 0;
    e.nranks = 3;
    e.tls = tls;
    e.eps = eps;
    e.md = &coll_md_host;
    /* room for 5 messages of 16 bytes */
    e.match = coll_match_create(3, 5 * 16);
    if (!f || !e.match) {
        CHECK(0, "no memory");
        free(f);
        return;
    }
    /* peer 1 fills its 4 slots with operation 7's chunks; peer 2 has 2 */
    for (uint32_t c = 0; c < 4; c++)
        fake_push(&f[1], 7, c);
    fake_push(&f[2], 7, 0);
    fake_push(&f[2], 7, 1);
    int n = coll_match_unblock(&e);
    size_t msgs, bytes, peak;
    coll_match_stats(e.match, &msgs, &bytes, &peak);
    CHECK(n == 4 && f[1].released == 4 && f[1].count == 0,
          "unblock: %d set aside, peer 1 released %d (4 expected)", n,
          f[1].released);
    CHECK(f[2].released == 0, "unblock: peer 2 (slots not full) released "
          "%d", f[2].released);
    CHECK(msgs == 4 && bytes == 64, "unblock: store holds %zu messages, "
          "%zu bytes", msgs, bytes);
    /* nothing full: nothing moves */
    CHECK(coll_match_unblock(&e) == 0, "unblock with no full peer moved "
          "messages");
    /* peer 1 fills again: only one more fits RCOLL_UNEXPECTED_MAX */
    for (uint32_t c = 4; c < 8; c++)
        fake_push(&f[1], 7, c);
    n = coll_match_unblock(&e);
    CHECK(n == 1 && f[1].count == 3, "unblock past the bound: %d set "
          "aside, %d left (1 and 3 expected)", n, f[1].count);
    /* operation 7 takes peer 1's chunks in arrival order: the store's
     * first, then the slots' */
    coll_sched_t *s = calloc(1, sizeof(*s));
    coll_step_t t;
    coll_sched_step_init(&t);
    s->kind = COLL_ALLTOALL;
    s->seq = 7;
    for (uint32_t c = 0; s && c < 8; c++) {
        const rcoll_msg_hdr_t *h;
        const void *pl;
        coll_umsg_t *u;
        rcoll_status_t st = coll_rx_get(s, &t, &e, 1, &h, &pl, &u);
        CHECK(st == RCOLL_OK && h->chunk == c &&
              ((const unsigned char *)pl)[15] == (unsigned char)(7 * 16 + c),
              "chunk %u of peer 1: status %d, got chunk %u", c, (int)st,
              st == RCOLL_OK ? h->chunk : 99);
        CHECK((u != NULL) == (c < 5), "chunk %u: from the %s", c,
              u ? "store" : "slots");
        if (st == RCOLL_OK)
            coll_rx_release(&e, 1, u);
    }
    coll_match_stats(e.match, &msgs, &bytes, &peak);
    CHECK(msgs == 0 && bytes == 0 && peak == 80, "store after: %zu "
          "messages, %zu bytes, peak %zu (0, 0, 80)", msgs, bytes, peak);
    free(s);
    coll_match_destroy(e.match);
    free(f);
}


/* ---- a one-way stream between two tcp endpoints over a socketpair ---- */

static size_t stream_small = TCP_SMALL; /* the ring's threshold */

typedef struct {
    struct rcoll_tl_ctx ctx;
    tcp_ep_t *ep;
    rcoll_bootstrap_t bs;
    rcoll_boot_peer_t peers[2];
    tcp_ep_t *eps[2];
} end_t;

static int end_init(end_t *e, int me, int fd, int epfd,
                    rcoll_tl_events_t *ev, int nslots, size_t chunk,
                    int window)
{
    memset(e, 0, sizeof(*e));
    e->bs.peers = e->peers;
    e->ctx.p.nranks = 2;
    e->ctx.p.rank = me;
    e->ctx.p.bs = &e->bs;
    e->ctx.p.epfd = epfd;
    e->ctx.p.chunk_size = chunk;
    e->ctx.p.nslots = nslots;
    e->ctx.p.ev = ev;
    e->ctx.nsocks = 1;
    e->ctx.nbig = nslots;
    e->ctx.nslots = window;
    e->ctx.small = stream_small;
    e->ctx.ring_size = (size_t)TCP_RING_MUL * (size_t)nslots * stream_small;
    e->ctx.listen_fd = -1;
    e->ctx.eps = e->eps;
    if (!(e->ep = calloc(1, sizeof(*e->ep))))
        return -1;
    e->eps[1 - me] = e->ep;
    e->ep->ctx = &e->ctx;
    e->ep->peer = 1 - me;
    e->ep->socks = calloc(1, sizeof(tcp_sock_t));
    if (!e->ep->socks || tcp_sock_init(&e->ctx, e->ep, e->ep->socks, 0) != 0)
        return -1;
    return tcp_sock_setup(&e->ctx, 1 - me, 0, fd) == RCOLL_OK ? 0 : -1;
}

static void end_free(end_t *e)
{
    tcp_sock_close(&e->ep->socks[0]);
    tcp_ep_free(e->ep, 1);
}

static int stream_sent_done;
static int stream_txq_full; /* sends that left the send queue full */
static int stream_lazy; /* the sender sends all it may, the reader reads
                           every 8th turn only */
static void stream_send_done(void *arg, void *cookie)
{
    (void)arg;
    free(cookie);
    stream_sent_done++;
}

static unsigned char pattern(uint64_t i, size_t j)
{
    return (unsigned char)(i * 131u + j * 7u + (j >> 8));
}

/* Sends n messages from a to b, lengths from len_of; b holds up to `hold`
 * (a new random bound now and then, -1: release at once). Returns the
 * bad messages (header or payload); *stuck_out: turns nothing moved. */
static int stream(end_t *a, end_t *b, int n, unsigned *seed,
                  uint32_t (*len_of)(unsigned *), int hold, int *stuck_out,
                  int *unblocks)
{
    tcp_sock_t *sa = &a->ep->socks[0], *sb = &b->ep->socks[0];
    int sent = 0, got = 0, bad = 0, stuck = 0, cap = 0;
    uint32_t next_len = len_of(seed);
    for (long turn = 0; got < n && stuck < 1000 && turn < 10000000; turn++) {
        int moved = 0;
        while (sent < n) { /* as many as the credits allow */
            rcoll_msg_hdr_t h;
            memset(&h, 0, sizeof(h));
            h.seq = (uint64_t)sent;
            h.len = next_len;
            unsigned char *pay = malloc(next_len ? next_len : 1);
            if (!pay)
                return bad + 1;
            for (size_t j = 0; j < next_len; j++)
                pay[j] = pattern((uint64_t)sent, j);
            rcoll_status_t st = tcp_send((rcoll_tl_ep_t *)a->ep, &h, pay, pay, 0,
                                         h.len);
            if (sa->txq_count >=
                sa->txq_cap - TCP_TXQ_CTL(a->ep->ctx->nsocks)) /* DATA's */
                stream_txq_full++;
            if (st != RCOLL_OK) {
                free(pay);
                if (st != RCOLL_INPROGRESS)
                    return bad + 1;
                break;
            }
            sent++;
            moved = 1;
            next_len = len_of(seed);
            if (!stream_lazy && rand_r(seed) % 4 == 0)
                break; /* let the reader in now and then */
        }
        uint64_t before = b->ep->rx_seq + (uint64_t)sb->sl.count;
        if (!stream_lazy || turn % 8 == 0)
            tcp_sock_event(&sb->h, EPOLLIN);
        tcp_sock_event(&sa->h, EPOLLIN | EPOLLOUT); /* credits; the queue */
        moved |= b->ep->rx_seq + (uint64_t)sb->sl.count != before;
        if (hold >= 0 && rand_r(seed) % 64 == 0)
            cap = (int)(rand_r(seed) % (unsigned)(hold + 1));
        int force = 0;
        if (!moved && stuck > 2 && tcp_recv_full((rcoll_tl_ep_t *)b->ep)) {
            force = 1; /* what coll_match_unblock does: set one aside */
            (*unblocks)++;
        }
        for (;;) {
            const rcoll_msg_hdr_t *h;
            const void *p;
            if (tcp_recv_peek((rcoll_tl_ep_t *)b->ep, &h, &p) != RCOLL_OK)
                break;
            if (!force && hold >= 0 && sent < n && sb->sl.count <= cap)
                break;
            force = 0;
            const unsigned char *q = p;
            int ok = h->seq == (uint64_t)got;
            for (size_t j = 0; ok && j < h->len; j++)
                ok = q[j] == pattern((uint64_t)got, j);
            if (!ok && bad++ < 5)
                printf("stream: message %d (%u bytes) arrived wrong: seq "
                       "%llu, first byte %d (want %d)\n", got, h->len,
                       (unsigned long long)h->seq, h->len ? q[0] : -1,
                       pattern((uint64_t)got, 0));
            tcp_recv_release((rcoll_tl_ep_t *)b->ep);
            got++;
            moved = 1;
        }
        if (!moved) {
            tcp_idle(&b->ctx);
            tcp_idle(&a->ctx);
            stuck++;
        } else {
            stuck = 0;
        }
    }
    *stuck_out = stuck;
    if (got < n)
        printf("stream: %d of %d messages arrived (%d sent)\n", got, n, sent);
    return bad + (n - got);
}

static uint32_t len_mixed(unsigned *seed)
{
    unsigned x = rand_r(seed) % 20;
    if (x < 2)
        return 0;
    if (x < 9)
        return 1 + rand_r(seed) % 64;
    if (x < 15)
        return 65 + rand_r(seed) % (stream_small - 64);
    if (x < 17) /* the ring's largest: wraps leave big holes */
        return (uint32_t)stream_small - rand_r(seed) % 2;
    /* big ones, up to the chunk size (2 x stream_small) */
    return (uint32_t)stream_small + 1 + rand_r(seed) % stream_small;
}

static uint32_t len_tiny(unsigned *seed)
{
    (void)seed;
    return 8;
}

/* Two ends of one link over the connected fds, in an epoll set of their
 * own: 0, or -1 (reported) */
typedef struct {
    end_t *a, *b;
    int epfd;
} pair_t;

static int pair_open(pair_t *pr, int fa, int fb, int nslots, size_t chunk,
                     int window)
{
    static rcoll_tl_events_t ev = {NULL, stream_send_done, peer_failed};
    pr->epfd = epoll_create1(EPOLL_CLOEXEC);
    pr->a = malloc(sizeof(*pr->a));
    pr->b = malloc(sizeof(*pr->b));
    if (!pr->a || !pr->b ||
        end_init(pr->a, 0, fa, pr->epfd, &ev, nslots, chunk, window) != 0 ||
        end_init(pr->b, 1, fb, pr->epfd, &ev, nslots, chunk, window) != 0) {
        CHECK(0, "link setup failed (%d slots, %zu-byte chunks)", window,
              chunk);
        return -1;
    }
    return 0;
}

static void pair_close(pair_t *pr)
{
    end_free(pr->a);
    end_free(pr->b);
    free(pr->a);
    free(pr->b);
    close(pr->epfd);
}

/* One link of `window` slots per socket (nslots x TCP_SLOT_MUL in a large
 * communicator, up to TCP_SLOT_MAX in a small one: tcp_window), streamed
 * both ways the tests below need. */
static void ring_stream(int nslots, int window, unsigned seed, int small_bufs)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        CHECK(0, "socketpair: %s", strerror(errno));
        return;
    }
    pair_t pr;
    if (pair_open(&pr, sv[0], sv[1], nslots, 2 * stream_small, window) != 0)
        return;
    end_t *a = pr.a, *b = pr.b;
    if (small_bufs) { /* the socket takes less than the slots allow */
        int sz = 4096;
        for (int k = 0; k < 2; k++) {
            setsockopt(sv[k], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
            setsockopt(sv[k], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
        }
    }
    int fails = peer_failures;
    int stuck = 0, unblocks = 0;
    stream_txq_full = 0;
    int bad = stream(a, b, 20000, &seed, len_mixed, 2 * window, &stuck,
                     &unblocks);
    CHECK(bad == 0, "stream (%d slots): %d of 20000 mixed messages lost or "
          "wrong", window, bad);
    CHECK(stuck < 1000, "stream (%d slots): mixed sizes: stuck (a deadlock "
          "on credits)", window);
    CHECK(unblocks > 0, "stream (%d slots): the receiver never held every "
          "slot, the ring or the big buffers: the case is not exercised",
          window);
    /* 8-byte messages released at once: a credit message alone once
     * half the slots or half the ring (64 bytes each) are owed */
    int c0 = sendmsg_calls[sv[1]];
    int n = 3200;
    bad = stream(a, b, n, &seed, len_tiny, -1, &stuck, &unblocks);
    int credits = sendmsg_calls[sv[1]] - c0;
    int in_ring = (int)(a->ctx.ring_size / TCP_RING_ALIGN);
    int want = n / (RCOLL_MIN(window, in_ring) / 2) + 2;
    CHECK(bad == 0, "stream (%d slots): %d of %d 8-byte messages lost or "
          "wrong", window, bad, n);
    CHECK(credits <= want, "stream (%d slots): %d 8-byte messages cost %d "
          "credit messages (want <= %d)", window, n, credits, want);
    if (small_bufs) {
        /* a reader that seldom reads: the sender fills the socket, then
         * its queue, and sends again once the socket drains */
        stream_txq_full = 0;
        stream_lazy = 1;
        bad = stream(a, b, n, &seed, len_tiny, -1, &stuck, &unblocks);
        stream_lazy = 0;
        CHECK(bad == 0, "stream (%d slots): %d of %d 8-byte messages to a "
              "slow reader lost or wrong", window, bad, n);
        CHECK(stream_txq_full > 0, "stream (%d slots): the send queue never "
              "filled: the case is not exercised", window);
    }
    CHECK(peer_failures == fails, "stream (%d slots): the link failed",
          window);
    printf("tcp stream, %d slots, ring %zu KiB: 20000 mixed messages, %d "
           "unblocks, send queue full %d times; %d 8-byte ones, %d credit "
           "messages back\n", window, a->ctx.ring_size / 1024, unblocks,
           stream_txq_full, n, credits);
    pair_close(&pr);
}

static void test_tcp_ring_stream(void)
{
    /* the minimum window: every bound is hit often */
    ring_stream(2, TCP_SLOT_MUL * 2, 777, 0);
    /* a small communicator's: more slots than the send queue
     * (TCP_TXQ_MAX); with small socket buffers a send also stops on a
     * full queue */
    ring_stream(2, TCP_SLOT_MAX, 778, 1);
    /* a small communicator's ring: messages of up to 16 KiB in it, whose
     * payloads are mostly read straight into their ring place */
    stream_small = TCP_SMALL_MAX;
    ring_stream(2, TCP_SLOT_MUL * 2, 779, 0);
    ring_stream(4, TCP_SLOT_MAX, 780, 1);
    stream_small = TCP_SMALL;
}

/* 1: the kernel holds ACKs back on fd (pingpong mode: TCP_QUICKACK reads
 * 0), 0: not, -1: unknown */
static int in_pingpong(int fd)
{
    int v = -1;
    socklen_t l = sizeof(v);
    if (getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &v, &l) != 0)
        return -1;
    return v == 0;
}

/* A loopback TCP pair: exchanges put both sockets in pingpong mode and
 * keep them there; a one-way stream takes the receiver out of it (its
 * reads then ACK, not the sender's sends), and an answer puts it back. */
static void test_tcp_oneway_acks(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), fa, fb;
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &sl) != 0 ||
        (fa = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        connect(fa, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        (fb = accept(l, NULL, NULL)) < 0) {
        CHECK(0, "oneway: loopback TCP pair: %s", strerror(errno));
        if (l >= 0)
            close(l);
        return;
    }
    close(l);
    setsockopt(fa, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fb, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    pair_t pr;
    if (pair_open(&pr, fa, fb, 2, 2 * stream_small, TCP_SLOT_MAX) != 0)
        return;
    end_t *a = pr.a, *b = pr.b;
    unsigned seed = 99;
    int stuck, unblocks = 0, bad = 0, fails = peer_failures;
    /* an exchange, as an all-reduce's: one message each way per round.
     * The kernel takes a socket out of pingpong itself when a delayed
     * ACK times out (a stall of 40 ms here): tries until one exchange
     * ran without */
    int pp = 0, tries;
    for (tries = 0; tries < 20 && pp != 1; tries++) {
        for (int i = 0; i < 64; i++) {
            bad += stream(a, b, 1, &seed, len_tiny, -1, &stuck, &unblocks);
            bad += stream(b, a, 1, &seed, len_tiny, -1, &stuck, &unblocks);
        }
        pp = in_pingpong(fa) == 1 && in_pingpong(fb) == 1;
    }
    CHECK(pp == 1, "oneway: after %d tries of 64 exchanges the sockets "
          "are not in pingpong mode (TCP_QUICKACK %d and %d): an exchange "
          "took them out", tries, in_pingpong(fa), in_pingpong(fb));
    /* one way, a message per read (a window of TCP_SLOT_MAX slots: no
     * credit goes back alone meanwhile). A short burst keeps the mode */
    tcp_sock_t *sb = &b->ep->socks[0];
    int burst = 24; /* a trial of rcoll-perf's default 20 calls, and more */
    for (int i = 0; i < burst; i++)
        bad += stream(a, b, 1, &seed, len_tiny, -1, &stuck, &unblocks);
    CHECK(in_pingpong(fb) == 1 && !sb->oneway, "oneway: a burst of %d "
          "messages took the receiver out of pingpong mode (TCP_QUICKACK "
          "%d): short bursts keep the kernel's ACKs", burst,
          in_pingpong(fb));
    /* a sustained stream leaves it */
    for (int i = burst; i < TCP_ONEWAY_READS; i++)
        bad += stream(a, b, 1, &seed, len_tiny, -1, &stuck, &unblocks);
    CHECK(in_pingpong(fb) == 0 && sb->oneway, "oneway: the receiver of %d "
          "messages with no answer is still in pingpong mode: its reads "
          "send no ACK", TCP_ONEWAY_READS);
    /* a credit of ours puts the kernel back; the next read takes it out */
    int owed = sb->sl.owed; /* released, not yet handed back */
    tcp_sock_write(sb);
    int owed_after = sb->sl.owed;
    tcp_sock_event(&a->ep->socks[0].h, EPOLLIN);
    int back = in_pingpong(fb);
    bad += stream(a, b, 1, &seed, len_tiny, -1, &stuck, &unblocks);
    CHECK(owed > 0 && owed_after == 0, "oneway: no credit to send alone "
          "(%d owed, %d after): the case is not exercised", owed,
          owed_after);
    CHECK(in_pingpong(fb) == 0, "oneway: after a credit of its own (which "
          "put it back in pingpong mode: %d) the receiver's next read left "
          "it in", back);
    /* an answer starts the count again */
    bad += stream(b, a, 1, &seed, len_tiny, -1, &stuck, &unblocks);
    CHECK(sb->rx_run == 0 && !sb->oneway, "oneway: a data message left %d "
          "reads counted (one-way %d)", sb->rx_run, sb->oneway);
    CHECK(bad == 0, "oneway: %d messages lost or wrong", bad);
    CHECK(peer_failures == fails, "oneway: the link failed");
    printf("tcp one-way: pingpong after exchanges (%d tries), off after "
           "%d one-way reads\n", tries, TCP_ONEWAY_READS);
    pair_close(&pr);
}

/* pages of [p, p + len) not resident (mincore), or -1 */
static long pages_missing(const void *p, size_t len)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~((uintptr_t)pg - 1);
    size_t n = (len + ((uintptr_t)p - lo) + (size_t)pg - 1) / (size_t)pg;
    unsigned char *v = malloc(n);
    if (!v || mincore((void *)lo, n * (size_t)pg, v) != 0) {
        free(v);
        return -1;
    }
    long miss = 0;
    for (size_t i = 0; i < n; i++)
        miss += !(v[i] & 1);
    free(v);
    return miss;
}

static uint32_t len_8(unsigned *seed)
{
    (void)seed;
    return 8;
}

static void test_tcp_buffers_mapped(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        CHECK(0, "socketpair: %s", strerror(errno));
        return;
    }
    /* a ring of 4 x 4 x 16 KiB: malloc maps it fresh, page by page */
    stream_small = TCP_SMALL_MAX;
    pair_t pr;
    if (pair_open(&pr, sv[0], sv[1], 4, 2 * stream_small, 32) != 0) {
        stream_small = TCP_SMALL;
        return;
    }
    end_t *a = pr.a, *b = pr.b;
    unsigned seed = 5;
    int stuck, unblocks = 0, bad = 0;
    bad += stream(a, b, 1, &seed, len_8, -1, &stuck, &unblocks);
    tcp_sock_t *sb = &b->ep->socks[0];
    long miss = sb->ring ? pages_missing(sb->ring, b->ctx.ring_size) : -1;
    CHECK(miss == 0, "mapped: after one 8-byte message %ld of the %zu KiB "
          "ring's pages are not mapped (-1: no ring)", miss,
          b->ctx.ring_size / 1024);
    CHECK(bad == 0, "mapped: %d messages lost or wrong", bad);
    printf("tcp buffers: the %zu KiB ring mapped at first use\n",
           b->ctx.ring_size / 1024);
    stream_small = TCP_SMALL;
    pair_close(&pr);
}

/* tcp_window: TCP_SLOT_BUDGET slots shared by the sockets to every peer,
 * never fewer than TCP_SLOT_MUL x RCOLL_NSLOTS nor more than TCP_SLOT_MAX
 * (unless RCOLL_NSLOTS asks for more) */
static void test_tcp_window(void)
{
    static const struct { int nslots, nranks, nsocks, want; } c[] = {
        {4, 1, 1, TCP_SLOT_MAX},  {4, 2, 1, TCP_SLOT_MAX},
        {4, 5, 1, TCP_SLOT_MAX},  {4, 5, 2, 512},
        {4, 9, 1, 512},           {4, 17, 1, 256},
        {4, 65, 1, TCP_SLOT_MUL * 4}, {4, 1000, 4, TCP_SLOT_MUL * 4},
        {128, 2, 1, TCP_SLOT_MUL * 128},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        int w = tcp_window(c[i].nslots, c[i].nranks, c[i].nsocks);
        CHECK(w == c[i].want, "tcp_window(nslots %d, %d ranks, %d sockets) "
              "= %d, want %d", c[i].nslots, c[i].nranks, c[i].nsocks, w,
              c[i].want);
    }
}

/* tcp_ring_sizes: TCP_RING_BUDGET of rings per rank, the threshold
 * between TCP_SMALL and TCP_SMALL_MAX, a multiple of TCP_RING_ALIGN, and
 * the ring TCP_RING_MUL x RCOLL_NSLOTS of them */
static void test_tcp_ring_sizes(void)
{
    static const struct { int nslots, nranks, nsocks; size_t want; } c[] = {
        {4, 1, 2, TCP_SMALL_MAX}, {4, 2, 2, TCP_SMALL_MAX},
        {4, 5, 2, TCP_SMALL_MAX}, {4, 6, 2, 13056},
        {4, 9, 2, 8192},          {4, 17, 2, TCP_SMALL},
        {4, 18, 2, TCP_SMALL},    {4, 1000, 4, TCP_SMALL},
        {16, 2, 2, TCP_SMALL_MAX}, {64, 2, 2, TCP_SMALL},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        size_t small, ring;
        tcp_ring_sizes(c[i].nslots, c[i].nranks, c[i].nsocks, &small, &ring);
        CHECK(small == c[i].want &&
                  ring == (size_t)TCP_RING_MUL * (size_t)c[i].nslots * small,
              "tcp_ring_sizes(nslots %d, %d ranks, %d sockets) = %zu, ring "
              "%zu; want %zu", c[i].nslots, c[i].nranks, c[i].nsocks, small,
              ring, c[i].want);
        /* within the budget unless the minimum needs more */
        size_t all = ring * (size_t)RCOLL_MAX(c[i].nranks - 1, 1) *
                     (size_t)c[i].nsocks;
        CHECK(all <= TCP_RING_BUDGET || small == TCP_SMALL,
              "tcp_ring_sizes: %zu bytes of rings at %d ranks", all,
              c[i].nranks);
    }
}

int main(void)
{
    test_tcp_credits_across_eagain();
    test_tcp_ring_stream();
    test_tcp_oneway_acks();
    test_tcp_buffers_mapped();
    test_tcp_window();
    test_tcp_ring_sizes();
    test_match_unblock();
    printf("test_transport: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
