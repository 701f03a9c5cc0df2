/* Unit tests of parsing and validation code: sizes, transport lists,
 * RCOLL_ALGO, SipHash (the connection MAC), hex, the unique id, addresses,
 * block partitions, the schedule builders' shapes, the device pairs of
 * RCOLL_IB_NIC=all's queue pairs; the receive-in-place table (tcp and ib
 * land payloads through it); a peer's abort reason taken as text; the
 * bootstrap ring's all-gather with blocks larger than its sockets'
 * buffers. */
#include "bootstrap/bootstrap.h"
#include "coll/sched.h"
#include "core/core.h"
#include "proto/place.h"
#include "util/params.h"
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#include "config.h"
#if defined(HAVE_VERBS) && defined(HAVE_RDMACM)
#include "transport/ib/ib.h"
#include <arpa/inet.h>

/* rank r's devices: IPv4 addresses (with a /24 mask each) */
static void ib_addrs_set(ib_raddr_t *t, int n, const char *const *ip)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    for (int i = 0; i < n; i++) {
        t->a[i].sin_family = AF_INET;
        inet_pton(AF_INET, ip[i], &t->a[i].sin_addr);
        t->mask[i] = htonl(0xffffff00u);
    }
}

/* queue pair k between ranks 0 and 1: rank 0's device (*x) and rank 1's
 * (*y), as each rank computes it; both must agree */
static void ib_pair_of(ib_raddr_t *ra, int k, int *x, int *y)
{
    static struct rcoll_tl_ctx c0, c1;
    int li, rj, li1, rj1;
    c0.p.rank = 0;
    c1.p.rank = 1;
    c0.raddrs = c1.raddrs = ra;
    ib_lane_devs(&c0, 1, k, &li, &rj);
    ib_lane_devs(&c1, 0, k, &li1, &rj1);
    CHECK(li == rj1 && rj == li1, "ib lanes: queue pair %d: rank 0 says "
          "(%d, %d), rank 1 says (%d, %d)", k, li, rj, rj1, li1);
    *x = li;
    *y = rj;
}

/* RCOLL_IB_NIC=all: the device pair of each queue pair (ib_lane_devs) */
static void test_ib_lanes(void)
{
    ib_raddr_t ra[2];
    int x, y;
    /* two devices each on one subnet: the first two queue pairs use
     * distinct devices at both ends (each rank drives both NICs) */
    const char *one0[] = {"10.0.0.1", "10.0.0.2"}, *one1[] = {"10.0.0.3",
                                                              "10.0.0.4"};
    ib_addrs_set(&ra[0], 2, one0);
    ib_addrs_set(&ra[1], 2, one1);
    int used0[2] = {0, 0}, used1[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        ib_pair_of(ra, k, &x, &y);
        used0[x]++;
        used1[y]++;
    }
    CHECK(used0[0] == 1 && used0[1] == 1 && used1[0] == 1 && used1[1] == 1,
          "ib lanes, one subnet: queue pairs 0 and 1 use rank 0's devices "
          "%d/%d times, rank 1's %d/%d", used0[0], used0[1], used1[0],
          used1[1]);
    /* two subnets (check-rdma's hosts): each queue pair stays in one */
    const char *two0[] = {"10.77.0.1", "10.77.1.1"},
               *two1[] = {"10.77.0.2", "10.77.1.2"};
    ib_addrs_set(&ra[0], 2, two0);
    ib_addrs_set(&ra[1], 2, two1);
    for (int k = 0; k < 4; k++) {
        ib_pair_of(ra, k, &x, &y);
        CHECK(x == k % 2 && y == k % 2, "ib lanes, two subnets: queue pair "
              "%d on (%d, %d), expected (%d, %d)", k, x, y, k % 2, k % 2);
    }
    /* one device against two on its subnet: both of the other's */
    ib_addrs_set(&ra[0], 1, one0);
    ib_addrs_set(&ra[1], 2, one1);
    for (int k = 0; k < 2; k++) {
        ib_pair_of(ra, k, &x, &y);
        CHECK(x == 0 && y == k, "ib lanes, 1 and 2 devices: queue pair %d "
              "on (%d, %d), expected (0, %d)", k, x, y, k);
    }
    /* no common subnet: device x with the other's x mod n */
    const char *far0[] = {"10.1.0.1"}, *far1[] = {"10.2.0.1", "10.3.0.1"};
    ib_addrs_set(&ra[0], 1, far0);
    ib_addrs_set(&ra[1], 2, far1);
    for (int k = 0; k < 3; k++) {
        ib_pair_of(ra, k, &x, &y);
        CHECK(x == 0 && y == k % 2, "ib lanes, no common subnet: queue pair "
              "%d on (%d, %d), expected (0, %d)", k, x, y, k % 2);
    }
}

/* Failover's receive side (ib_fo_peek): messages taken by number from
 * whichever queue pair's oldest slot has the next, copies dropped, one
 * below the peer's `upto` that blocks a resend moved aside */
static void ib_fo_put(struct rcoll_tl_ctx *c, ib_qp_t *q, uint64_t seq)
{
    int slot = rcoll_slots_next(&q->sl);
    char *m = q->rx + (size_t)slot * c->stride + IB_SEQ_OFF;
    rcoll_msg_hdr_t h = {.seq = 77, .len = 4, .chunk = (uint32_t)seq};
    memcpy(m, &seq, 8);
    memcpy(m + 8, &h, sizeof(h));
    memcpy(m + 8 + sizeof(h), &seq, 4);
    rcoll_slots_arrived(&q->sl);
}

/* takes what ib_fo_peek gives, in order, into got[*n...] (up to 8): the
 * last peek's status */
static int ib_fo_take_all(ib_ep_t *ep, uint64_t *got, int *n)
{
    const char *m;
    int r = 0;
    while (*n < 8 && (r = ib_fo_peek(ep, &m)) == 1) {
        uint32_t v;
        memcpy(&v, m + 8 + sizeof(rcoll_msg_hdr_t), 4);
        got[(*n)++] = v;
        ib_qp_t *t = ib_fo_taken(ep);
        if (t)
            rcoll_slots_release(&t->sl);
    }
    return r;
}

static void test_ib_fo_order(void)
{
    static struct rcoll_tl_ctx c;
    ib_ep_t ep;
    ib_qp_t q[2];
    memset(&ep, 0, sizeof(ep));
    memset(q, 0, sizeof(q));
    c.nqps = 2;
    c.p.nslots = 8;
    c.p.chunk_size = 64;
    c.stride = IB_HDR + 64;
    ep.ctx = &c;
    ep.qps = q;
    ep.fo = 1;
    for (int k = 0; k < 2; k++) {
        q[k].ep = &ep;
        q[k].idx = k;
        q[k].rx = calloc(8, c.stride);
        q[k].rx_flag = calloc(8, 1);
        rcoll_slots_init(&q[k].sl, 8);
    }
    /* queue pair 1 was lost after 1 arrived and 3 did not; 1 and 3 came
     * again on queue pair 0 behind its own 0, 2, 4; then the new 5 */
    ib_fo_put(&c, &q[0], 0);
    ib_fo_put(&c, &q[0], 2);
    ib_fo_put(&c, &q[0], 4);
    ib_fo_put(&c, &q[1], 1);
    ib_fo_put(&c, &q[0], 1);
    ib_fo_put(&c, &q[0], 3);
    ib_fo_put(&c, &q[0], 5);
    q[1].down = q[1].ended = 1;
    ep.fo_on = 1;
    /* before the notice (upto 0) nothing moves aside: 3 is not reached */
    uint64_t got[8];
    int n = 0, r = ib_fo_take_all(&ep, got, &n);
    CHECK(r == 0 && n == 3 && got[0] == 0 && got[1] == 1 && got[2] == 2,
          "ib failover: before the notice, took %d messages (status %d), "
          "expected 0 1 2 then a wait",
          n, r);
    ep.peer_upto = 5; /* the notice: new messages from 5 */
    r = ib_fo_take_all(&ep, got, &n);
    int inorder = n == 6;
    for (int i = 0; i < n && inorder; i++)
        inorder = got[i] == (uint64_t)i;
    CHECK(inorder && r == 0 && c.n_dups == 1 && ep.naside == 0 &&
              q[0].sl.count == 0 && q[1].sl.count == 0 && q[0].sl.owed == 6,
          "ib failover: took %d messages in order %d (expected 0-5), %llu "
          "copies dropped (1), %d aside (0), queue pair 0 holds %d (0) and "
          "owes %d credits (6)",
          n, inorder, (unsigned long long)c.n_dups, ep.naside, q[0].sl.count,
          q[0].sl.owed);
    /* a new message (at or above upto) that heads while the next is
     * missing stays in its slot: the missing one is behind no resend */
    ib_fo_put(&c, &q[0], 7);
    const char *m;
    CHECK(ib_fo_peek(&ep, &m) == 0 && ep.naside == 0 && q[0].sl.count == 1,
          "ib failover: message 7 moved aside while 6 is missing");
    /* a message written in place (8) moved aside keeps its kind, and so
     * does one taken from its slot: the peer's upto is now 9, and 8 heads
     * queue pair 1 before the missing 6 */
    int at = rcoll_slots_next(&q[1].sl);
    ib_fo_put(&c, &q[1], 8);
    q[1].rx_flag[at] = SLOT_PLACED;
    at = rcoll_slots_next(&q[1].sl);
    ib_fo_put(&c, &q[1], 6);
    q[1].rx_flag[at] = SLOT_TL;
    ep.peer_upto = 9;
    int flags[3] = {-1, -1, -1}, k = 0;
    while (k < 3 && ib_fo_peek(&ep, &m) == 1) {
        flags[k++] = ep.rx_flag;
        ib_qp_t *t = ib_fo_taken(&ep);
        if (t)
            rcoll_slots_release(&t->sl);
    }
    CHECK(k == 3 && flags[0] == SLOT_TL && flags[1] == SLOT_PLAIN &&
              flags[2] == SLOT_PLACED && ep.naside == 0,
          "ib failover: messages 6-8 taken as %d %d %d (expected %d %d %d), "
          "%d left aside",
          flags[0], flags[1], flags[2], SLOT_TL, SLOT_PLAIN, SLOT_PLACED,
          ep.naside);
    ib_fo_free(&ep);
    for (int k = 0; k < 2; k++) {
        free(q[k].rx);
        free(q[k].rx_flag);
    }
}
#else
static void test_ib_lanes(void)
{
}
static void test_ib_fo_order(void)
{
}
#endif

static void test_sizes(void)
{
    size_t v;
    CHECK(rcoll_parse_size("0", &v) == 0 && v == 0, "0");
    CHECK(rcoll_parse_size("512K", &v) == 0 && v == 512 << 10, "512K");
    CHECK(rcoll_parse_size("8M", &v) == 0 && v == 8 << 20, "8M");
    CHECK(rcoll_parse_size("2g", &v) == 0 && v == (size_t)2 << 30, "2g");
    CHECK(rcoll_parse_size("64KB", &v) == 0 && v == 64 << 10, "64KB");
    CHECK(rcoll_parse_size("0x10", &v) == 0 && v == 16, "hex");
    CHECK(rcoll_parse_size("", &v) != 0, "empty");
    CHECK(rcoll_parse_size("12X", &v) != 0, "bad suffix");
    CHECK(rcoll_parse_size("-1", &v) != 0, "negative");
    CHECK(rcoll_parse_size("1MM", &v) != 0, "junk after suffix");
}

static void test_lists(void)
{
    CHECK(rcoll_config_name_allowed(NULL, "tcp"), "NULL allows all");
    CHECK(rcoll_config_name_allowed("", "tcp"), "empty allows all");
    CHECK(rcoll_config_name_allowed("tcp,shm", "tcp"), "include list");
    CHECK(!rcoll_config_name_allowed("shm", "tcp"), "not in include list");
    CHECK(!rcoll_config_name_allowed("^tcp", "tcp"), "excluded");
    CHECK(rcoll_config_name_allowed("^shm", "tcp"), "exclude other");
    CHECK(!rcoll_config_name_allowed("tcpx", "tcp"), "no prefix match");
}

static void test_algo_config(void)
{
    const char *saved = rcoll_config.algo;
    rcoll_config.algo = "broadcast:tree,allreduce:ring";
    CHECK(coll_algo_check_config() == RCOLL_OK, "valid RCOLL_ALGO");
    rcoll_config.algo = "broadcast:nope";
    CHECK(coll_algo_check_config() == RCOLL_ERR_INVALID_ARGUMENT,
          "unknown algorithm");
    CHECK(strstr(rcoll_last_error(), "broadcast:nope") != NULL,
          "message names the entry: %s", rcoll_last_error());
    rcoll_config.algo = "allreduce";
    CHECK(coll_algo_check_config() == RCOLL_ERR_INVALID_ARGUMENT,
          "missing algorithm name");
    rcoll_config.algo = saved;
}

static void test_siphash(void)
{
    /* the SipHash-2-4 paper's test vector: key 00..0f, message 00..0e */
    uint8_t key[16], msg[15];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++)
        msg[i] = (uint8_t)i;
    CHECK(rcoll_siphash(key, msg, 15) == 0xa129ca6149be45e5ULL,
          "siphash vector: %016llx",
          (unsigned long long)rcoll_siphash(key, msg, 15));
    CHECK(rcoll_siphash(key, "", 0) == 0x726fdb47dd0e0e31ULL,
          "siphash empty message");
}

/* bit-at-a-time CRC32C, the definition (independent of the library's
 * table and SSE4.2 paths) */
static uint32_t crc32c_ref(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static void test_crc32c(void)
{
    uint8_t z[32] = {0}, f[32], buf[300];
    memset(f, 0xff, sizeof(f));
    CHECK(rcoll_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value");
    /* RFC 3720 B.4: 32 bytes of zeros, of ones */
    CHECK(rcoll_crc32c(0, z, 32) == 0x8A9136AAu, "crc32c zeros");
    CHECK(rcoll_crc32c(0, f, 32) == 0x62A8AB43u, "crc32c ones");
    CHECK(rcoll_crc32c(0, z, 0) == 0, "crc32c empty");
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= sizeof(buf); n += 13) {
            uint32_t a = rcoll_crc32c(0, buf + off, n);
            CHECK(a == crc32c_ref(buf + off, n), "crc32c off %zu len %zu", off, n);
            /* incremental: crc(a|b) = crc(crc(a), b) */
            size_t h = n / 3;
            CHECK(rcoll_crc32c(rcoll_crc32c(0, buf + off, h), buf + off + h,
                               n - h) == a, "crc32c split %zu", n);
        }
}

static void test_hex_and_id(void)
{
    uint8_t in[5] = {0x00, 0x7f, 0x80, 0xab, 0xff}, out[5];
    char hex[11];
    CHECK(rcoll_hex_encode(in, 5, hex, sizeof(hex)) == 0 &&
              !strcmp(hex, "007f80abff"), "hex encode %s", hex);
    CHECK(rcoll_hex_decode("007f80abff", out, 5) == 0 && !memcmp(in, out, 5),
          "hex decode");
    CHECK(rcoll_hex_decode("007F80ABFF", out, 5) == 0, "upper case");
    CHECK(rcoll_hex_decode("007f80abf", out, 5) != 0, "odd length");
    CHECK(rcoll_hex_decode("007f80abfg", out, 5) != 0, "bad digit");
    CHECK(rcoll_hex_encode(in, 5, hex, 10) != 0, "output too small");

    rcoll_sockaddr_t a, b;
    uint8_t secret[16], s2[16];
    rcoll_unique_id_t id;
    for (int i = 0; i < 16; i++)
        secret[i] = (uint8_t)(i * 17);
    CHECK(rcoll_sock_parse_addr("127.0.0.1:4242", &a) == RCOLL_OK, "parse");
    rcoll_boot_id_pack(&a, secret, &id);
    CHECK(rcoll_boot_id_unpack(&id, &b, s2) == RCOLL_OK, "unpack");
    CHECK(b.sin.sin_port == a.sin.sin_port &&
              b.sin.sin_addr.s_addr == a.sin.sin_addr.s_addr &&
              !memcmp(secret, s2, 16), "id round trip");
    memset(&id, 0, sizeof(id));
    CHECK(rcoll_boot_id_unpack(&id, &b, s2) == RCOLL_ERR_INVALID_ARGUMENT,
          "zero id refused");
    CHECK(rcoll_sock_parse_addr("[::1]:80", &a) == RCOLL_OK &&
              a.sa.sa_family == AF_INET6, "v6");
    CHECK(rcoll_sock_parse_addr("127.0.0.1", &a) != RCOLL_OK, "no port");
    CHECK(rcoll_sock_parse_addr("127.0.0.1:99999", &a) != RCOLL_OK,
          "port range");
    CHECK(rcoll_sock_parse_addr("127.0.0.1:12x", &a) != RCOLL_OK, "bad port");
    CHECK(rcoll_sock_parse_addr(":12", &a) != RCOLL_OK, "no host");
    char buf[64];
    rcoll_sock_parse_addr("10.1.2.3:7", &a);
    CHECK(!strcmp(rcoll_sock_addr_str(&a, buf, sizeof(buf)), "10.1.2.3:7"),
          "addr str %s", buf);
}

static void test_blocks(void)
{
    size_t counts[] = {0, 1, 7, 8, 9, 1023, 1000003};
    for (int n = 1; n <= 9; n++) {
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            size_t c = counts[k], next = 0, lo = (size_t)-1, hi = 0;
            for (int b = 0; b < n; b++) {
                size_t off, len;
                coll_block(c, n, b, &off, &len);
                CHECK(off == next, "blocks contiguous");
                next = off + len;
                lo = len < lo ? len : lo;
                hi = len > hi ? len : hi;
            }
            CHECK(next == c && hi - lo <= 1, "blocks of %zu over %d", c, n);
        }
    }
}

/* Every send in a schedule has a matching receive on the peer, with the
 * same bytes in the same per-pair order: the property that keeps the FIFO
 * connections consistent. Checked for every algorithm and team size. */
/* The execution state (sched.c, sched_state_init through
 * coll_sched_restart): each step's send and receive ordinal is the count
 * of earlier transfers to / from the same peer, and the distinct peer
 * counts are right; computed here by brute force. */
static int step_moves(const coll_sched_t *s, int peer, size_t bytes,
                      int always)
{
    return peer >= 0 && (bytes || always || s->kind == COLL_BARRIER);
}

static void check_sched_state(coll_sched_t *s, const coll_env_t *e,
                              const char *name)
{
    if (coll_sched_restart(s, e) != RCOLL_OK) {
        CHECK(0, "%s: state init", name);
        return;
    }
    int ok = 1, nsp = 0, nrp = 0;
    for (int k = 0; k < s->nsteps; k++) {
        const coll_step_t *t = &s->steps[k];
        int so = 0, ro = 0, snew = 1, rnew = 1;
        for (int j = 0; j < k; j++) {
            const coll_step_t *u = &s->steps[j];
            if (step_moves(s, u->send_peer, u->send_bytes, u->send_always) &&
                u->send_peer == t->send_peer)
                so++, snew = 0;
            if (step_moves(s, u->recv_peer, u->recv_bytes, u->recv_always) &&
                u->recv_peer == t->recv_peer)
                ro++, rnew = 0;
        }
        if (step_moves(s, t->send_peer, t->send_bytes, t->send_always)) {
            ok &= s->ord[2 * k] == so;
            nsp += snew;
        }
        if (step_moves(s, t->recv_peer, t->recv_bytes, t->recv_always)) {
            ok &= s->ord[2 * k + 1] == ro;
            nrp += rnew;
        }
    }
    CHECK(ok && s->nspeers == nsp && s->nrpeers == nrp,
          "%s rank %d of %d: ordinals and peer counts (%d/%d, %d/%d)", name,
          e->rank, e->nranks, s->nspeers, nsp, s->nrpeers, nrp);
}

/* The state is O(steps + peers), not O(ranks): a recursive-doubling
 * all-reduce of 8 bytes at 16,384 ranks (14 steps) allocates well under
 * 1 KiB, a ring's at 4,096 ranks (8,190 steps, 2 peers) 6 ints a step. */
static void sched_state_size(const char *name, int nranks, size_t most)
{
    const coll_algo_t *a = NULL;
    for (const coll_algo_t *x = coll_algos; x->name; x++)
        if (x->kind == COLL_ALLREDUCE && !strcmp(x->name, name))
            a = x;
    CHECK(a != NULL, "allreduce:%s is in the table", name);
    if (!a)
        return;
    static float in[8192], out[8192];
    coll_env_t e = {.rank = 5, .nranks = nranks, .chunk_size = 4096};
    coll_sched_t s;
    memset(&s, 0, sizeof(s));
    s.kind = COLL_ALLREDUCE;
    s.sendbuf = in;
    s.recvbuf = out;
    s.count = (size_t)(nranks < 8192 ? nranks : 2);
    s.dt = RCOLL_FLOAT32;
    s.op = RCOLL_SUM;
    s.chunk = 4096;
    s.md = &coll_md_host;
    CHECK(a->build(&s, &e) == RCOLL_OK, "%s build at %d ranks", name, nranks);
    struct mallinfo2 m0 = mallinfo2();
    check_sched_state(&s, &e, a->name);
    struct mallinfo2 m1 = mallinfo2();
    size_t grew = (m1.uordblks + m1.hblkhd) - (m0.uordblks + m0.hblkhd);
    CHECK(grew <= most + 24 * (size_t)s.nsteps,
          "%s at %d ranks, %d steps: the state took %zu bytes", name, nranks,
          s.nsteps, grew);
    coll_sched_free(&s);
}

static void test_sched_state_size(void)
{
    sched_state_size("recursive_doubling", 16384, 512);
    sched_state_size("ring", 4096, 8192); /* (an mmap rounds up to pages) */
}

static void test_schedule_pairing(void)
{
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        if (a->kind == COLL_SEND || a->kind == COLL_RECV)
            continue;
        if (a->build == coll_area_build)
            continue; /* no steps, and it needs ranks that share memory:
                         tests/test_area.c */
        for (int n = 1; n <= 9; n++) {
            for (int root = 0; root < n; root += (n > 3 ? n - 1 : 1)) {
                coll_sched_t s[9];
                static char buf[9][4096], out[9][4096 * 9];
                for (int r = 0; r < n; r++) {
                    coll_env_t e = {.rank = r, .nranks = n, .chunk_size = 64};
                    memset(&s[r], 0, sizeof(s[r]));
                    s[r].kind = a->kind;
                    s[r].sendbuf = buf[r];
                    s[r].recvbuf = out[r];
                    s[r].count = 100;
                    s[r].dt = RCOLL_FLOAT32;
                    s[r].root = root;
                    s[r].chunk = 64;
                    s[r].md = &coll_md_host;
                    if (a->kind == COLL_ALLTOALLV) {
                        /* uneven: x sends (x + 2 y) % 7 * 10 to y */
                        s[r].count = 0;
                        s[r].v = calloc(4 * (size_t)n, sizeof(size_t));
                        for (int p = 0, so = 0, ro = 0; p < n; p++) {
                            s[r].v[p] = (size_t)((r + 2 * p) % 7 * 10);
                            s[r].v[n + p] = (size_t)so;
                            so += (int)s[r].v[p];
                            s[r].v[2 * n + p] = (size_t)((p + 2 * r) % 7 * 10);
                            s[r].v[3 * n + p] = (size_t)ro;
                            ro += (int)s[r].v[2 * n + p];
                        }
                    }
                    CHECK(a->build(&s[r], &e) == RCOLL_OK, "%s build",
                          a->name);
                    check_sched_state(&s[r], &e, a->name);
                }
                /* for each ordered pair, the byte sequences must agree */
                for (int x = 0; x < n; x++) {
                    for (int y = 0; y < n; y++) {
                        size_t sent[64], recvd[64];
                        int ns = 0, nr = 0;
                        for (int k = 0; k < s[x].nsteps && ns < 64; k++)
                            if (s[x].steps[k].send_peer == y)
                                sent[ns++] = s[x].steps[k].send_bytes;
                        for (int k = 0; k < s[y].nsteps && nr < 64; k++)
                            if (s[y].steps[k].recv_peer == x)
                                recvd[nr++] = s[y].steps[k].recv_bytes;
                        int same = ns == nr;
                        for (int k = 0; same && k < ns; k++)
                            same = sent[k] == recvd[k];
                        CHECK(same, "%s/%s n=%d root=%d: %d->%d sends %d "
                              "msgs, receives %d", coll_kind_name(a->kind),
                              a->name, n, root, x, y, ns, nr);
                    }
                }
                for (int r = 0; r < n; r++)
                    coll_sched_free(&s[r]);
            }
        }
    }
}

/* The partners each algorithm declares (coll_algo_t.npeers; NULL: at
 * most COLL_PEERS_LOG(n)) bound the distinct peers every rank's schedule
 * really talks to, and an algorithm with a declared count has a rank
 * that needs more than the log bound: 64 and 48 ranks as one host and as
 * 8 hosts, roots 0 and 37. What the tuner leaves out under a low
 * RLIMIT_NOFILE rests on these counts. */
static void test_algo_peers(void)
{
    static const int ns[] = {64, 48};
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        if (a->kind == COLL_SEND || a->kind == COLL_RECV ||
            a->build == coll_area_build)
            continue;
        for (int ni = 0; ni < 2; ni++)
            for (int hosts = 1; hosts <= 8; hosts += 7)
                for (int root = 0; root <= 37; root += 37) {
                    int n = ns[ni], most = 0;
                    coll_env_t e = {.nranks = n, .chunk_size = 4096,
                                    .nhosts = hosts,
                                    .host_size = n / hosts};
                    char *seen = calloc((size_t)n, 1);
                    size_t per = 64;
                    char *in = calloc((size_t)n * per, 4);
                    char *out = calloc((size_t)n * per, 4);
                    for (int r = 0; r < n && seen && in && out; r++) {
                        coll_sched_t s;
                        memset(&s, 0, sizeof(s));
                        e.rank = r;
                        s.kind = a->kind;
                        s.sendbuf = in;
                        s.recvbuf = out;
                        s.count = a->kind == COLL_ALLREDUCE ||
                                          a->kind == COLL_BROADCAST ||
                                          a->kind == COLL_REDUCE
                                      ? (size_t)n * per
                                      : per;
                        s.dt = RCOLL_FLOAT32;
                        s.root = root;
                        s.chunk = 4096;
                        s.md = &coll_md_host;
                        if (a->kind == COLL_ALLTOALLV) {
                            s.count = 0;
                            s.v = calloc(4 * (size_t)n, sizeof(size_t));
                            for (int p = 0; s.v && p < n; p++) {
                                s.v[p] = s.v[2 * n + p] = per;
                                s.v[n + p] = s.v[3 * n + p] = (size_t)p * per;
                            }
                        }
                        if (a->build(&s, &e) != RCOLL_OK) {
                            CHECK(0, "%s/%s n=%d: build", coll_kind_name(a->kind),
                                  a->name, n);
                            coll_sched_free(&s);
                            continue;
                        }
                        memset(seen, 0, (size_t)n);
                        int cnt = 0;
                        for (int k = 0; k < s.nsteps; k++) {
                            int q[2] = {s.steps[k].send_peer,
                                        s.steps[k].recv_peer};
                            for (int j = 0; j < 2; j++)
                                if (q[j] >= 0 && q[j] != r && !seen[q[j]]) {
                                    seen[q[j]] = 1;
                                    cnt++;
                                }
                        }
                        most = cnt > most ? cnt : most;
                        coll_sched_free(&s);
                    }
                    int bound = a->npeers ? a->npeers(&e) : COLL_PEERS_LOG(n);
                    CHECK(most <= bound, "%s/%s n=%d hosts %d root %d: a rank "
                          "talks to %d peers, declared at most %d",
                          coll_kind_name(a->kind), a->name, n, hosts, root,
                          most, bound);
                    if (a->npeers == coll_peers_all && hosts == 1 && root == 0)
                        CHECK(most > COLL_PEERS_LOG(n), "%s/%s n=%d: declared "
                              "%d peers but talks to %d, within the log bound",
                              coll_kind_name(a->kind), a->name, n, bound, most);
                    free(seen);
                    free(in);
                    free(out);
                }
    }
}

/* The tuner: a valid chunk (a multiple of the type size, at most a slot)
 * for every collective, size and team; latency-bound calls get the
 * logarithmic algorithms, bandwidth-bound ones the pipelined ones; and
 * oversubscription pushes toward fewer steps. */
static int tune_peer_room; /* coll_env_t.peer_room for tune() */
static int tune_hosts;     /* coll_env_t.nhosts for tune() (0: unknown) */
static const char *tune(coll_kind_t k, size_t count, rcoll_datatype_t dt,
                        int n, int local, int cores, rcoll_link_model_t link,
                        size_t *chunk)
{
    /* the link's name as the communicator gives it: the TCP constants
     * are TCP's */
    int net = !memcmp(&link, &rcoll_config.tune_tcp, sizeof(link));
    coll_env_t e = {.rank = 0, .nranks = n, .chunk_size = 512 * 1024,
                    .link = link, .link_name = net ? "tcp" : "shm",
                    .local_size = local, .ncores = cores,
                    .peer_room = tune_peer_room, .nhosts = tune_hosts,
                    .host_size = tune_hosts ? n / tune_hosts : 0};
    coll_sched_t s;
    memset(&s, 0, sizeof(s));
    s.kind = k;
    s.count = count;
    s.dt = dt;
    const coll_algo_t *a = coll_tune(&s, &e, chunk);
    return a ? a->name : "(none)";
}

static void test_tuner(void)
{
    rcoll_link_model_t shm = rcoll_config.tune_shm, tcp = rcoll_config.tune_tcp;
    coll_kind_t kinds[] = {COLL_ALLREDUCE, COLL_ALLGATHER, COLL_BROADCAST,
                           COLL_REDUCE_SCATTER, COLL_REDUCE};
    for (int k = 0; k < 5; k++)
        for (int n = 1; n <= 16; n++)
            for (size_t c = 0; c <= (64u << 20); c = c ? c * 7 : 1) {
                size_t chunk = 0;
                const char *nm = tune(kinds[k], c, RCOLL_FLOAT16, n, n, 2,
                                      tcp, &chunk);
                CHECK(strcmp(nm, "(none)") && chunk >= 2 &&
                          chunk <= 512 * 1024 && chunk % 2 == 0,
                      "tuner %s count %zu n %d: %s chunk %zu",
                      coll_kind_name(kinds[k]), c, n, nm, chunk);
            }
    size_t ch;
    const char *nm;
    nm = tune(COLL_ALLREDUCE, 2, RCOLL_FLOAT32, 4, 4, 4, shm, &ch);
    CHECK(!strcmp(nm, "recursive_doubling"), "8 B all-reduce, 4 ranks: %s",
          nm);
    /* 8 ranks on 2 cores: over TCP every message of the flat all-reduce
     * waits for its sender and receiver to get a core (recursive doubling
     * measured 1.9-2.5x faster, 8 B - 8 KiB); over shm flat is ahead */
    nm = tune(COLL_ALLREDUCE, 2, RCOLL_FLOAT32, 8, 8, 2, tcp, &ch);
    CHECK(!strcmp(nm, "recursive_doubling"),
          "8 B all-reduce, 8 ranks on 2 cores, tcp: %s", nm);
    nm = tune(COLL_ALLREDUCE, 2, RCOLL_FLOAT32, 8, 8, 2, shm, &ch);
    CHECK(!strcmp(nm, "flat"), "8 B all-reduce, 8 ranks on 2 cores, shm: %s",
          nm);
    nm = tune(COLL_ALLREDUCE, 16u << 20, RCOLL_FLOAT32, 8, 8, 8, shm, &ch);
    CHECK(strcmp(nm, "recursive_doubling"), "64 MiB all-reduce, 8 ranks: %s",
          nm);
    nm = tune(COLL_BROADCAST, 2, RCOLL_FLOAT32, 8, 8, 8, tcp, &ch);
    CHECK(!strcmp(nm, "tree"), "8 B broadcast, 8 ranks: %s", nm);
    nm = tune(COLL_BROADCAST, 16u << 20, RCOLL_FLOAT32, 8, 8, 8, tcp, &ch);
    CHECK(strcmp(nm, "tree"), "64 MiB broadcast, 8 ranks: %s", nm);
    nm = tune(COLL_ALLGATHER, 1, RCOLL_FLOAT32, 8, 8, 8, tcp, &ch);
    CHECK(strcmp(nm, "ring"), "4 B x 8 all-gather: %s", nm);
    nm = tune(COLL_ALLGATHER, 4u << 20, RCOLL_FLOAT32, 8, 8, 8, tcp, &ch);
    CHECK(strcmp(nm, "bruck"), "16 MiB x 8 all-gather: %s", nm);
    /* all-to-all: Bruck for tiny blocks on many ranks with a core each;
     * pairwise for large blocks, and when ranks outnumber the cores
     * (measured on 8 ranks / 2 cores: pairwise 24-37 us at 64 B - 4 KiB,
     * Bruck 33-69 us) */
    nm = tune(COLL_ALLTOALL, 2, RCOLL_FLOAT32, 64, 64, 64, tcp, &ch);
    CHECK(!strcmp(nm, "bruck"), "8 B x 64 all-to-all, 64 cores: %s", nm);
    nm = tune(COLL_ALLTOALL, 2, RCOLL_FLOAT32, 8, 8, 2, shm, &ch);
    CHECK(!strcmp(nm, "pairwise"), "8 B x 8 all-to-all, 2 cores: %s", nm);
    nm = tune(COLL_ALLTOALL, 1u << 20, RCOLL_FLOAT32, 64, 64, 64, tcp, &ch);
    CHECK(!strcmp(nm, "pairwise"), "4 MiB x 64 all-to-all: %s", nm);
    nm = tune(COLL_GATHER, 2, RCOLL_FLOAT32, 64, 64, 64, tcp, &ch);
    CHECK(!strcmp(nm, "binomial"), "8 B x 64 gather: %s", nm);
    nm = tune(COLL_SCATTER, 4u << 20, RCOLL_FLOAT32, 8, 8, 8, tcp, &ch);
    CHECK(!strcmp(nm, "direct"), "16 MiB x 8 scatter: %s", nm);
    /* descriptors for 20 peers of 63: no algorithm that needs more
     * partners, for any collective or size (all-to-all-v has only
     * pairwise: it stays); with room for all, the choices above come
     * back (test_algo_peers checks the partner counts themselves) */
    coll_kind_t all[] = {COLL_ALLREDUCE, COLL_ALLGATHER, COLL_BROADCAST,
                         COLL_REDUCE_SCATTER, COLL_REDUCE, COLL_ALLTOALL,
                         COLL_GATHER, COLL_SCATTER, COLL_ALLTOALLV};
    tune_peer_room = 20;
    for (tune_hosts = 0; tune_hosts <= 8; tune_hosts += 8)
    for (int k = 0; k < 9; k++)
        for (size_t c = 1; c <= (16u << 20); c *= 8)
            for (int cores = 2; cores <= 64; cores *= 32) {
                const char *x = tune(all[k], c, RCOLL_FLOAT32, 64,
                                     tune_hosts ? 8 : 64, cores, tcp, &ch);
                const coll_algo_t *a = coll_algos;
                while (a->name && (a->kind != all[k] || strcmp(a->name, x)))
                    a++;
                coll_env_t e64 = {.nranks = 64, .nhosts = tune_hosts,
                                  .host_size = tune_hosts ? 8 : 0};
                CHECK(a->name && (!a->npeers || a->npeers(&e64) <= 20 ||
                                  all[k] == COLL_ALLTOALLV),
                      "peer_room 20 of 63, %d hosts: %s count %zu, %d "
                      "cores: %s", tune_hosts, coll_kind_name(all[k]), c,
                      cores, x);
            }
    tune_hosts = 0;
    nm = tune(COLL_ALLTOALL, 1u << 20, RCOLL_FLOAT32, 64, 64, 64, tcp, &ch);
    CHECK(!strcmp(nm, "bruck"), "4 MiB x 64 all-to-all, room for 20: %s", nm);
    tune_peer_room = 63;
    nm = tune(COLL_ALLTOALL, 1u << 20, RCOLL_FLOAT32, 64, 64, 64, tcp, &ch);
    CHECK(!strcmp(nm, "pairwise"), "4 MiB x 64 all-to-all, room for 63: %s",
          nm);
    tune_peer_room = 0;
    /* the chain's chunk grows with the message (sqrt law), up to a slot */
    size_t c1, c2;
    tune(COLL_BROADCAST, 1u << 20, RCOLL_FLOAT32, 4, 4, 4, shm, &c1);
    tune(COLL_BROADCAST, 64u << 20, RCOLL_FLOAT32, 4, 4, 4, shm, &c2);
    CHECK(c1 <= c2, "chain chunk %zu for 4 MiB > %zu for 256 MiB", c1, c2);
}

/* The ring all-gather with 1 MiB blocks over socket pairs of 4 KiB
 * buffers, one thread per rank: every rank sends before it receives, so a
 * send that waited for its whole block to leave would hold the ring until
 * the timeout. Every block must arrive intact. */
#define RING_N 3
#define RING_BLOCK ((size_t)1 << 20)
typedef struct {
    rcoll_bootstrap_t bs;
    unsigned char *buf;
    rcoll_status_t st;
} ring_rank_t;

static void *ring_rank(void *arg)
{
    ring_rank_t *rr = arg;
    rr->st = rcoll_bootstrap_allgather(&rr->bs, rr->buf, RING_BLOCK);
    return NULL;
}

static void test_boot_ring_big_blocks(void)
{
    ring_rank_t rr[RING_N];
    rcoll_boot_peer_t peers[RING_N];
    pthread_t th[RING_N];
    memset(rr, 0, sizeof(rr));
    memset(peers, 0, sizeof(peers));
    for (int r = 0; r < RING_N; r++) {
        int sv[2], small = 4096;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
            CHECK(0, "socketpair");
            return;
        }
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
        setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
        rr[r].bs.next_fd = sv[0];                  /* r -> r + 1 */
        rr[(r + 1) % RING_N].bs.prev_fd = sv[1];
        rr[r].bs.rank = r;
        rr[r].bs.nranks = RING_N;
        rr[r].bs.listen_fd = -1;
        rr[r].bs.peers = peers;
        rr[r].bs.timeout = 20;
        snprintf(peers[r].hostname, sizeof(peers[r].hostname), "here");
        rr[r].buf = calloc(RING_N, RING_BLOCK);
        for (size_t i = 0; rr[r].buf && i < RING_BLOCK; i++)
            rr[r].buf[(size_t)r * RING_BLOCK + i] =
                (unsigned char)(i * 131 + (size_t)r * 7 + i / 4099);
    }
    for (int r = 0; r < RING_N; r++)
        pthread_create(&th[r], NULL, ring_rank, &rr[r]);
    for (int r = 0; r < RING_N; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < RING_N; r++) {
        CHECK(rr[r].st == RCOLL_OK, "ring all-gather of 1 MiB blocks: rank %d: "
              "%s", r, rcoll_status_string(rr[r].st));
        size_t bad = 0;
        for (int q = 0; rr[r].buf && q < RING_N; q++)
            for (size_t i = 0; i < RING_BLOCK; i++)
                bad += rr[r].buf[(size_t)q * RING_BLOCK + i] !=
                       (unsigned char)(i * 131 + (size_t)q * 7 + i / 4099);
        CHECK(rr[r].buf && bad == 0, "ring all-gather: rank %d has %zu wrong "
              "bytes", r, bad);
        close(rr[r].bs.next_fd);
        close(rr[r].bs.prev_fd);
        free(rr[r].buf);
    }
}

/* coll_locality_init against counts worked out by hand, and the halving
 * order of Rabenseifner's all-reduce that follows from them */
static void test_locality(void)
{
    coll_locality_t l;
    int blk8[8] = {0, 0, 0, 0, 1, 1, 1, 1}; /* 2 hosts of 4, contiguous */
    coll_locality_init(&l, 8, blk8, 2, NULL);
    CHECK(l.valid && l.xq[0] == 0 && l.xq[1] == 0 && l.xq[2] == 4,
          "8 = 2 x 4 contiguous: xq %d %d %d", l.xq[0], l.xq[1], l.xq[2]);
    CHECK(l.sq[0] == 1 && l.sq[1] == 2 && l.sq[2] == 4,
          "8 = 2 x 4 contiguous: sq %d %d %d", l.sq[0], l.sq[1], l.sq[2]);
    CHECK(l.ringq == 1 && l.allq == 4, "8 = 2 x 4 contiguous: ringq %d "
          "allq %d", l.ringq, l.allq);
    coll_env_t e;
    memset(&e, 0, sizeof(e));
    e.loc = l;
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(&e, 8, bit);
    CHECK(nb == 3 && bit[0] == 1 && bit[1] == 0 && bit[2] == 2,
          "8 = 2 x 4: halving bits %d: %d %d %d (want 1 0 2)", nb, bit[0],
          bit[1], bit[2]);
    int mod8[8] = {0, 1, 0, 1, 0, 1, 0, 1}; /* host r mod 2 */
    int topo[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* its host-contiguous ring */
    coll_locality_init(&l, 8, mod8, 2, NULL);
    CHECK(l.xq[0] == 4 && l.xq[1] == 0 && l.xq[2] == 0 && l.sq[0] == 4 &&
              l.sq[1] == 0 && l.ringq == 4,
          "8 on host r mod 2: xq %d %d %d sq %d %d ringq %d", l.xq[0],
          l.xq[1], l.xq[2], l.sq[0], l.sq[1], l.ringq);
    e.loc = l;
    nb = coll_rabenseifner_order(&e, 8, bit);
    CHECK(bit[0] == 2 && bit[1] == 1 && bit[2] == 0,
          "8 on host r mod 2: halving bits %d %d %d (want 2 1 0)", bit[0],
          bit[1], bit[2]);
    coll_locality_init(&l, 8, mod8, 2, topo);
    CHECK(l.ringq == 1, "8 on host r mod 2, topo ring: ringq %d", l.ringq);
    int blk6[6] = {0, 0, 0, 1, 1, 1}; /* partners past n - 1 do not count */
    coll_locality_init(&l, 6, blk6, 2, NULL);
    CHECK(l.xq[0] == 1 && l.xq[1] == 1 && l.xq[2] == 2 && l.sq[2] == 2,
          "6 = 2 x 3: xq %d %d %d sq[2] %d", l.xq[0], l.xq[1], l.xq[2],
          l.sq[2]);
    int mod6[6] = {0, 1, 0, 1, 0, 1}; /* ranks 4, 5 fold into 0, 1 */
    coll_locality_init(&l, 6, mod6, 2, NULL);
    CHECK(l.xq[0] == 2 && l.xq[1] == 0 && l.xq[2] == 0,
          "6 on host r mod 2: xq %d %d %d (want 2 0 0: below p = 4 only "
          "ranks < 4 pair)", l.xq[0], l.xq[1], l.xq[2]);
    int one[5] = {0, 0, 0, 0, 0};
    coll_locality_init(&l, 5, one, 1, NULL);
    CHECK(l.valid && l.xq[2] == 0 && l.sq[0] == 0 && l.ringq == 0 &&
              l.allq == 0, "one host: nothing crosses");
    e.loc = l;
    nb = coll_rabenseifner_order(&e, 4, bit);
    CHECK(nb == 2 && bit[0] == 1 && bit[1] == 0, "one host: bits %d %d "
          "(the higher first)", bit[0], bit[1]);
}

/* rcoll__pairs_summary against every pair visited, on random hosts and
 * transport masks; then 16,384 ranks must take well under a second (the
 * pair-by-pair loops it replaced took n^2) */
static void test_pairs_summary(void)
{
    int nt = 0;
    while (nt < RCOLL_MAX_TLS && rcoll_transports[nt])
        nt++;
    uint32_t all = (1u << nt) - 1, shm = 0;
    for (int t = 0; t < nt; t++)
        if (rcoll_transports[t] == &rcoll_tl_shm_ops)
            shm = 1u << t;
    uint32_t masks[] = {all, all & ~shm, shm, all, 0, all & ~shm & ~1u};
    unsigned seed = 7;
    enum { N = 48 };
    uint64_t host[N];
    uint32_t mask[N];
    for (int iter = 0; iter < 400; iter++) {
        int n = 1 + (int)(rand_r(&seed) % N), nh = 1 + (int)(rand_r(&seed) % 5);
        int nm = 1 + (int)(rand_r(&seed) % 6);
        for (int r = 0; r < n; r++) {
            host[r] = 1000 + rand_r(&seed) % (unsigned)nh;
            mask[r] = masks[rand_r(&seed) % (unsigned)nm];
        }
        rcoll_pairs_t pr;
        CHECK(rcoll__pairs_summary(n, host, mask, &pr) == 0, "summary");
        int local = 0, net = 0, most = 0, bad = 0;
        uint32_t used = 0;
        for (int a = 0; a < n; a++) {
            int same = 0, k = 0;
            for (int b = 0; b < n; b++) {
                same += host[a] == host[b];
                if (b == a)
                    continue;
                int t = rcoll__pair_tl_masks(mask[a], mask[b],
                                             host[a] == host[b]);
                if (!t) {
                    bad = 1;
                    continue;
                }
                used |= 1u << (t - 1);
                net |= host[a] == host[b] && !rcoll_transports[t - 1]->local_only;
                k += host[a] == host[b] && (1u << (t - 1)) == shm;
            }
            local = same > local ? same : local;
            most = k > most ? k : most;
        }
        int badok = bad ? pr.bad_a >= 0 && pr.bad_a < pr.bad_b &&
                              pr.bad_b < n &&
                              !rcoll__pair_tl_masks(mask[pr.bad_a],
                                                    mask[pr.bad_b],
                                                    host[pr.bad_a] ==
                                                        host[pr.bad_b])
                        : pr.bad_a < 0;
        CHECK(pr.local_size == local && pr.used == used &&
                  pr.local_net == net && pr.most_shm == most && badok,
              "pairs, %d ranks on %d hosts, %d masks: local %d/%d used "
              "%x/%x net %d/%d shm peers %d/%d bad %d (%d, %d)", n, nh, nm,
              pr.local_size, local, pr.used, used, pr.local_net, net,
              pr.most_shm, most, bad, pr.bad_a, pr.bad_b);
    }
    enum { BIG = 16384 };
    uint64_t *bh = malloc(BIG * sizeof(*bh));
    uint32_t *bm = malloc(BIG * sizeof(*bm));
    if (!bh || !bm) {
        free(bh);
        free(bm);
        CHECK(0, "no memory");
        return;
    }
    for (int r = 0; r < BIG; r++) {
        bh[r] = (uint64_t)(r / 8) * 2654435761u;
        bm[r] = all;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rcoll_pairs_t pr;
    int rc = rcoll__pairs_summary(BIG, bh, bm, &pr);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) +
                 (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK(rc == 0 && pr.local_size == 8 && pr.most_shm == (shm ? 7 : 0) &&
              pr.bad_a < 0 && sec < 0.5,
          "16,384 ranks, 8 a host: local %d, shm peers %d, %.3f s",
          pr.local_size, pr.most_shm, sec);
    free(bh);
    free(bm);
}

/* proto/place.h: which posted receive a message's payload lands in, and
 * where; a message of another operation, transfer, kind, tag or count, a
 * chunk past the end or a length past the buffer lands nowhere */
static void test_places(void)
{
    static char a[10000], b[100];
    rcoll_places_t t = {.n = 0};
    rcoll_tl_place_t pa = {.seq = 7, .kind = 0x0102, .step = 3, .tag = 1,
                           .total = 2500, .chunk = 4096, .dst = a,
                           .bytes = sizeof(a)};
    rcoll_tl_place_t pb = pa;
    pb.step = 4;
    pb.dst = b;
    pb.bytes = sizeof(b);
    CHECK(rcoll_places_add(&t, &pa) == 0 && rcoll_places_add(&t, &pb) == 1,
          "places: two receives posted, n %d", t.n);
    rcoll_tl_place_t z = pa;
    z.chunk = 0;
    CHECK(rcoll_places_add(&t, &z) < 0, "places: a receive with no chunk "
          "size taken");
    z = pa;
    z.bytes = 0;
    CHECK(rcoll_places_add(&t, &z) < 0, "places: a receive of 0 bytes "
          "taken");
    rcoll_msg_hdr_t h = {.seq = 7, .kind = 0x0102 | RCOLL_HDR_CSUM,
                         .step = 3, .chunk = 2, .len = 10000 - 8192,
                         .tag = 1, .total = 2500};
    size_t off = 0;
    int i = rcoll_places_find(&t, &h, &off);
    CHECK(i == 0 && off == 8192, "places: last chunk of a: %d at %zu", i,
          off);
    h.len++;
    CHECK(rcoll_places_find(&t, &h, &off) < 0, "places: a chunk one byte "
          "past the end found a place");
    h.len = 1;
    h.chunk = 3;
    CHECK(rcoll_places_find(&t, &h, &off) < 0, "places: a chunk past the "
          "last found a place");
    h.chunk = 0;
    h.step = 4;
    h.len = 100;
    CHECK(rcoll_places_find(&t, &h, &off) == 1 && off == 0,
          "places: transfer 4 lands in b");
    const rcoll_msg_hdr_t base = h;
    rcoll_msg_hdr_t o;
    o = base; o.seq = 8;
    CHECK(rcoll_places_find(&t, &o, &off) < 0, "places: another operation");
    o = base; o.kind ^= 1;
    CHECK(rcoll_places_find(&t, &o, &off) < 0, "places: another kind");
    o = base; o.tag = 2;
    CHECK(rcoll_places_find(&t, &o, &off) < 0, "places: another tag");
    o = base; o.total = 2501;
    CHECK(rcoll_places_find(&t, &o, &off) < 0, "places: another count");
    /* unposting a: b moves to index 0 and is still found */
    CHECK(rcoll_places_posted(&t, &pa) == 0, "places: a posted at 0");
    int last = rcoll_places_remove(&t, 0, "test", 1);
    CHECK(last == 1 && t.n == 1 && rcoll_places_find(&t, &base, &off) == 0 &&
              rcoll_places_posted(&t, &pa) < 0,
          "places: after a's removal, last %d, n %d", last, t.n);
    /* removing the last entry itself */
    last = rcoll_places_remove(&t, 0, "test", 1);
    CHECK(last == 0 && t.n == 0 && rcoll_places_find(&t, &base, &off) < 0,
          "places: the last entry removed, n %d", t.n);
    /* two receives that name the same message: the one it fits takes it
     * (a first that does not fit is passed over) */
    rcoll_tl_place_t small = pb, large = pb;
    static char c[400];
    small.bytes = 50;
    large.dst = c;
    large.bytes = sizeof(c);
    rcoll_places_add(&t, &small);
    rcoll_places_add(&t, &large);
    CHECK(rcoll_places_find(&t, &base, &off) == 1 && off == 0,
          "places: a 100-byte message went to the 50-byte receive");
    for (int k = t.n; k < RCOLL_NPLACE; k++)
        rcoll_places_add(&t, &pa);
    CHECK(t.n == RCOLL_NPLACE && rcoll_places_add(&t, &pa) < 0,
          "places: a full table took one more");
}

/* transport.h: a peer's abort reason becomes text, cut at its NUL, at
 * len, or at RCOLL_TL_REASON - 1 bytes */
static void test_reason(void)
{
    char out[RCOLL_TL_REASON];
    rcoll_tl_reason_take(out, "out of memory\0junk", 19);
    CHECK(strcmp(out, "out of memory") == 0, "reason: cut at NUL: '%s'", out);
    rcoll_tl_reason_take(out, "abcdef", 3);
    CHECK(strcmp(out, "abc") == 0, "reason: cut at len: '%s'", out);
    rcoll_tl_reason_take(out, "a\033[2Jb\n\xff\x7f~", 10);
    CHECK(strcmp(out, "a?[2Jb???~") == 0,
          "reason: control, high or DEL bytes kept: '%s'", out);
    static char big[2 * RCOLL_TL_REASON];
    memset(big, 'x', sizeof(big));
    rcoll_tl_reason_take(out, big, sizeof(big));
    CHECK(strlen(out) == RCOLL_TL_REASON - 1, "reason: %zu bytes kept",
          strlen(out));
    strcpy(big, "in place");
    rcoll_tl_reason_take(big, big, sizeof(big));
    CHECK(strcmp(big, "in place") == 0, "reason: in place: '%s'", big);
}

int main(void)
{
    rcoll_config_init();
    test_boot_ring_big_blocks();
    test_tuner();
    test_locality();
    test_pairs_summary();
    test_sizes();
    test_lists();
    test_algo_config();
    test_siphash();
    test_crc32c();
    test_hex_and_id();
    test_blocks();
    test_schedule_pairing();
    test_sched_state_size();
    test_algo_peers();
    test_ib_lanes();
    test_ib_fo_order();
    test_places();
    test_reason();
    printf("test_units: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
