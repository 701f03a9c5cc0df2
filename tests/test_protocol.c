/* The executor's protocol against a fake transport: n ranks in one process
 * and one thread, each with its own executor state (coll_env_t), joined by
 * an in-memory network whose every decision is drawn from a seed:
 *
 * - each direction between two ranks has L lanes (message i on lane
 *   i % L, as tcp's sockets and ib's QPs), each with S receive slots and
 *   credits; a credit goes back when the receiver releases a slot, and
 *   reaches the sender later;
 * - a send is refused (no credit, or at random: a full socket) or taken;
 *   a taken one is either copied at once or "zero-copy": its payload is
 *   read from the caller's buffer only when the network delivers it,
 *   which is when send_done comes (the executor must not touch that
 *   buffer, nor finish, before);
 * - lanes deliver independently and at random, so messages of one
 *   direction arrive out of order across lanes, and a rank's several
 *   operations in flight, started at skewed times, receive messages of
 *   later operations early (the unexpected queue).
 *
 * Every algorithm of every collective (coll_algos; point-to-point and
 * all-to-all-v aside) runs K concurrent operations on sampled rank
 * counts (2-8, 12, 17, 31, 33: powers of two, one past and one short),
 * lanes, slots, chunk and message sizes; every result is checked
 * element by element against a reference computed here. When nothing
 * can move and nothing is in flight, each rank sets aside what fills its
 * slots (coll_match_unblock, the engine's move after 100 ms); how often
 * that was needed is printed. A run in which even that moves nothing is a
 * deadlock, and fails.
 *
 * Failure: in the second part one rank dies at a random moment (its
 * undelivered messages lost, its links failing). A rank whose operation
 * fails fails all of its operations and takes its zero-copy sends back
 * (send_revoke's contract: after it, no send of the operation is held)
 * and, as an abort would, fails its own links. Every survivor's every
 * operation must end with an error, none may hang, and the first failure
 * on each survivor must name the dead rank or a rank that failed.
 *
 * Usage: test_protocol [ROUNDS [SEED]] (defaults 6 and 1). */
#include "../src/coll/sched.h"
#include "../src/transport/transport.h"
#include "check.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 33
#define MAXL 3
#define QMAX 16
#define K 3 /* operations in flight per rank */
/* turns with nothing moved before the ranks set aside what fills their
 * slots (the engine's 100 ms): sends are refused at random, at most 30%
 * of the time, so 24 refusals in a row (0.3^24) are not a stall */
#define QUIET 24

/* ---- a seeded generator (xorshift64*) ---- */

static uint64_t rng_s = 1;
static uint64_t rnd(void)
{
    rng_s ^= rng_s >> 12;
    rng_s ^= rng_s << 25;
    rng_s ^= rng_s >> 27;
    return rng_s * 2685821657736338717ULL;
}
static int rnd_n(int n) { return (int)(rnd() % (uint64_t)n); }
static int chance(int pct) { return rnd_n(100) < pct; }

/* ---- the fake network ---- */

typedef struct {
    rcoll_msg_hdr_t h;
    char *data;             /* the payload as delivered (ours) */
    const char *src;        /* zero-copy: read at delivery */
    coll_sched_t *cookie;   /* zero-copy: send_done at delivery */
} fmsg_t;

typedef struct {
    fmsg_t *q[QMAX];
    int head, n;
} fifo_t;

typedef struct {
    fifo_t wire;            /* sent, not delivered */
    fifo_t slots;           /* delivered, not released */
    int credits;            /* the sender's */
    int credit_wire;        /* released, not yet back at the sender */
} lane_t;

typedef struct {
    lane_t lane[MAXL];
    uint64_t tx_seq, rx_seq;
} dir_t;

typedef struct {
    int me, peer;
} fep_t;

static int nr, nl, ns;       /* ranks, lanes, slots */
static int p_refuse, p_zc;   /* percentages */
static dir_t dirs[MAXR][MAXR];
static fep_t feps[MAXR][MAXR];
static int dead[MAXR];       /* died, or failed (its abort) */
static long n_refused, n_zc, n_unblocks, n_sets;

static void fifo_push(fifo_t *f, fmsg_t *m)
{
    f->q[(f->head + f->n++) % QMAX] = m;
}
static fmsg_t *fifo_pop(fifo_t *f)
{
    fmsg_t *m = f->q[f->head];
    f->head = (f->head + 1) % QMAX;
    f->n--;
    return m;
}

static void msg_free(fmsg_t *m)
{
    free(m->data);
    free(m);
}

static rcoll_status_t fake_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                                const void *payload, void *cookie, int flags,
                                size_t xfer)
{
    (void)flags;
    (void)xfer;
    fep_t *e = (fep_t *)tep;
    dir_t *d = &dirs[e->me][e->peer];
    lane_t *l = &d->lane[d->tx_seq % (uint64_t)nl];
    if (dead[e->peer])
        return rcoll__set_error(RCOLL_ERR_REMOTE, "rank %d (fake) is gone",
                                e->peer);
    if (l->credits == 0 || chance(p_refuse)) {
        n_refused++;
        return RCOLL_INPROGRESS;
    }
    fmsg_t *m = calloc(1, sizeof(*m));
    if (!m)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "fake: no memory");
    m->h = *hdr;
    if (hdr->len && cookie && chance(p_zc)) {
        m->src = payload; /* the caller's: read when delivered */
        m->cookie = cookie;
        n_zc++;
    } else {
        if (hdr->len && !(m->data = malloc(hdr->len))) {
            free(m);
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "fake: no memory");
        }
        if (hdr->len)
            memcpy(m->data, payload, hdr->len);
        if (cookie)
            coll_sched_send_done(cookie);
    }
    l->credits--;
    fifo_push(&l->wire, m);
    d->tx_seq++;
    return RCOLL_OK;
}

/* the payload read now (delivery, or a revoke that carries it on) */
static void msg_take(fmsg_t *m)
{
    if (!m->src)
        return;
    m->data = malloc(m->h.len);
    if (m->data)
        memcpy(m->data, m->src, m->h.len);
    m->src = NULL;
    coll_sched_send_done(m->cookie);
    m->cookie = NULL;
}

static rcoll_status_t fake_peek(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t **hdr,
                                const void **payload)
{
    fep_t *e = (fep_t *)tep;
    dir_t *d = &dirs[e->peer][e->me];
    lane_t *l = &d->lane[d->rx_seq % (uint64_t)nl];
    if (l->slots.n == 0) {
        if (dead[e->peer])
            return rcoll__set_error(RCOLL_ERR_REMOTE, "rank %d (fake) is "
                                    "gone", e->peer);
        return RCOLL_INPROGRESS;
    }
    fmsg_t *m = l->slots.q[l->slots.head];
    *hdr = &m->h;
    *payload = m->data;
    return RCOLL_OK;
}

static void fake_release(rcoll_tl_ep_t *tep)
{
    fep_t *e = (fep_t *)tep;
    dir_t *d = &dirs[e->peer][e->me];
    lane_t *l = &d->lane[d->rx_seq % (uint64_t)nl];
    msg_free(fifo_pop(&l->slots));
    l->credit_wire++;
    d->rx_seq++;
}

static int fake_full(rcoll_tl_ep_t *tep)
{
    fep_t *e = (fep_t *)tep;
    dir_t *d = &dirs[e->peer][e->me];
    for (int k = 0; k < nl; k++)
        if (d->lane[k].slots.n == ns)
            return 1;
    return 0;
}

static rcoll_tl_ops_t fake_ops = {
    .name = "fake",
    .send = fake_send,
    .recv_peek = fake_peek,
    .recv_release = fake_release,
    .recv_full = fake_full,
};

/* Delivers at random; returns 1 if anything moved. */
static int net_step(void)
{
    int moved = 0;
    for (int a = 0; a < nr; a++)
        for (int b = 0; b < nr; b++)
            for (int k = 0; a != b && k < nl; k++) {
                lane_t *l = &dirs[a][b].lane[k];
                while (l->wire.n && chance(50)) {
                    fmsg_t *m = fifo_pop(&l->wire);
                    msg_take(m);
                    fifo_push(&l->slots, m);
                    moved = 1;
                }
                if (l->credit_wire && chance(50)) {
                    l->credits += l->credit_wire;
                    l->credit_wire = 0;
                    moved = 1;
                }
            }
    return moved;
}

static int net_busy(void)
{
    for (int a = 0; a < nr; a++)
        for (int b = 0; b < nr; b++)
            for (int k = 0; a != b && k < nl; k++)
                if (dirs[a][b].lane[k].wire.n ||
                    dirs[a][b].lane[k].credit_wire)
                    return 1;
    return 0;
}

/* A rank is gone: what it sent and nobody has yet is lost (a zero-copy
 * one's buffer is no longer read: the transport's revoke did that). */
static void net_kill(int r)
{
    dead[r] = 1;
    for (int b = 0; b < nr; b++)
        for (int k = 0; b != r && k < nl; k++) {
            lane_t *l = &dirs[r][b].lane[k];
            while (l->wire.n) {
                fmsg_t *m = fifo_pop(&l->wire);
                if (m->cookie)
                    coll_sched_send_done(m->cookie);
                msg_free(m);
            }
        }
}

/* send_revoke: rank r's zero-copy sends of s are carried on from copies */
static void net_revoke(int r, coll_sched_t *s)
{
    for (int b = 0; b < nr; b++)
        for (int k = 0; b != r && k < nl; k++) {
            fifo_t *w = &dirs[r][b].lane[k].wire;
            for (int i = 0; i < w->n; i++) {
                fmsg_t *m = w->q[(w->head + i) % QMAX];
                if (m->cookie == s)
                    msg_take(m);
            }
        }
}

static void net_reset(void)
{
    for (int a = 0; a < MAXR; a++)
        for (int b = 0; b < MAXR; b++) {
            for (int k = 0; k < MAXL; k++) {
                lane_t *l = &dirs[a][b].lane[k];
                while (l->wire.n)
                    msg_free(fifo_pop(&l->wire));
                while (l->slots.n)
                    msg_free(fifo_pop(&l->slots));
            }
            memset(&dirs[a][b], 0, sizeof(dirs[a][b]));
            for (int k = 0; k < MAXL; k++)
                dirs[a][b].lane[k].credits = ns;
            feps[a][b].me = a;
            feps[a][b].peer = b;
        }
    memset(dead, 0, sizeof(dead));
}

/* ---- the ranks ---- */

typedef struct {
    coll_env_t env;
    const rcoll_tl_ops_t *tls[MAXR];
    rcoll_tl_ep_t *eps[MAXR];
    coll_sched_t *s[K];
    int32_t *in[K], *out[K];
    int start[K];           /* the turn it posts operation k */
    int state[K];           /* 0 not posted, 1 running, 2 done, 3 failed */
    char err[K][256];
} frank_t;

static frank_t rk[MAXR];
static rcoll_boot_peer_t peers[MAXR];

/* the input element i of rank r for operation k: small, so sums of up to
 * MAXR of them stay exact */
static int32_t val(int k, int r, size_t i)
{
    return (int32_t)(((uint32_t)k * 7919u + (uint32_t)r * 104729u +
                      (uint32_t)i * 31u) % 100003u);
}

static size_t in_len(coll_kind_t kind, size_t c)
{
    switch (kind) {
    case COLL_REDUCE_SCATTER: case COLL_ALLTOALL: case COLL_SCATTER:
        return c * (size_t)nr;
    default:
        return c;
    }
}

static size_t out_len(coll_kind_t kind, size_t c)
{
    switch (kind) {
    case COLL_ALLGATHER: case COLL_ALLTOALL: case COLL_GATHER:
        return c * (size_t)nr;
    case COLL_BARRIER:
        return 0;
    default:
        return c;
    }
}

/* what out[i] of rank r must be for operation k (root: the op's root) */
static int32_t expect(coll_kind_t kind, int k, int r, int root, size_t c,
                      size_t i)
{
    int32_t sum = 0;
    switch (kind) {
    case COLL_ALLREDUCE: case COLL_REDUCE:
        for (int p = 0; p < nr; p++)
            sum += val(k, p, i);
        return sum;
    case COLL_REDUCE_SCATTER:
        for (int p = 0; p < nr; p++)
            sum += val(k, p, (size_t)r * c + i);
        return sum;
    case COLL_ALLGATHER: case COLL_GATHER:
        return val(k, (int)(i / c), i % c);
    case COLL_BROADCAST:
        return val(k, root, i);
    case COLL_ALLTOALL:
        return val(k, (int)(i / c), (size_t)r * c + i % c);
    case COLL_SCATTER:
        return val(k, root, (size_t)r * c + i);
    default:
        return 0;
    }
}

static int kind_tested(coll_kind_t kind)
{
    return kind != COLL_SEND && kind != COLL_RECV && kind != COLL_ALLTOALLV;
}

/* rank r posts operation k: allocates and builds it */
static rcoll_status_t post(int r, int k, const coll_algo_t *a, size_t c,
                           size_t chunk)
{
    frank_t *f = &rk[r];
    coll_sched_t *s = calloc(1, sizeof(*s));
    size_t il = in_len(a->kind, c), ol = out_len(a->kind, c);
    f->in[k] = malloc((il + 1) * sizeof(int32_t));
    f->out[k] = malloc((ol + 1) * sizeof(int32_t));
    if (!s || !f->in[k] || !f->out[k])
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    for (size_t i = 0; i < il; i++)
        f->in[k][i] = val(k, r, i);
    memset(f->out[k], 0xee, (ol + 1) * sizeof(int32_t));
    int root = k % nr;
    s->kind = a->kind;
    s->sendbuf = f->in[k];
    s->recvbuf = f->out[k];
    s->count = c;
    s->dt = RCOLL_INT32;
    s->op = RCOLL_SUM;
    s->root = root;
    s->seq = (uint64_t)k + 1;
    f->s[k] = s;
    f->state[k] = 1;
    return coll_sched_build_algo(s, &f->env, a, chunk);
}

/* rank r fails: every operation of it not done ends, its zero-copy sends
 * taken back; its links fail (its abort) */
static void rank_fail(int r, const char *why)
{
    frank_t *f = &rk[r];
    for (int k = 0; k < K; k++) {
        if (f->state[k] == 2 || f->state[k] == 3)
            continue;
        if (f->state[k] == 1) {
            coll_sched_md_drain(f->s[k], &f->env);
            net_revoke(r, f->s[k]);
            CHECK(f->s[k]->sends_inflight == 0, "rank %d op %d: %d sends "
                  "still held after the revoke", r, k,
                  f->s[k]->sends_inflight);
        }
        f->state[k] = 3;
        snprintf(f->err[k], sizeof(f->err[k]), "%s", why);
    }
    net_kill(r);
}

static void env_init(int r, int nhosts, size_t chunk)
{
    frank_t *f = &rk[r];
    memset(f, 0, sizeof(*f));
    for (int p = 0; p < nr; p++) {
        f->tls[p] = p == r ? NULL : &fake_ops;
        f->eps[p] = p == r ? NULL : (rcoll_tl_ep_t *)&feps[r][p];
    }
    coll_env_t *e = &f->env;
    e->rank = r;
    e->nranks = nr;
    e->chunk_size = chunk;
    e->tls = f->tls;
    e->eps = f->eps;
    e->peers = peers;
    e->link = (rcoll_link_model_t){10, 10};
    e->link_local = (rcoll_link_model_t){1, 50};
    e->link_name = "fake";
    e->nhosts = nhosts;
    e->host_size = nr / nhosts;
    e->local_size = nr / nhosts;
    e->ncores = 2;
    e->md = &coll_md_host;
    e->match = coll_match_create(nr, 1u << 20);
    e->p2p_eager = 1u << 16;
}

static void env_fini(int r)
{
    frank_t *f = &rk[r];
    for (int k = 0; k < K; k++) {
        if (f->s[k]) {
            coll_sched_free(f->s[k]);
            free(f->s[k]);
        }
        free(f->in[k]);
        free(f->out[k]);
    }
    coll_match_destroy(f->env.match);
}

/* where everything stands (TEST_PROTOCOL_DUMP=1, on a deadlock) */
static void dump(void)
{
    for (int r = 0; r < nr; r++) {
        for (int k = 0; k < K; k++) {
            coll_sched_t *s = rk[r].s[k];
            printf("  rank %d op %d: state %d", r, k, rk[r].state[k]);
            if (s && rk[r].state[k] == 1)
                printf(" s_step %d/%d r_step %d/%d inflight %d waits for "
                       "%s rank %d", s->s_step, s->nsteps, s->r_step,
                       s->nsteps, s->sends_inflight,
                       s->waiting_for ? s->waiting_for : "-",
                       s->waiting_peer);
            printf("\n");
        }
        for (int p = 0; p < nr; p++)
            for (int k = 0; p != r && k < nl; k++) {
                lane_t *l = &dirs[p][r].lane[k];
                if (!l->slots.n && l->credits == ns)
                    continue;
                fmsg_t *m = l->slots.n ? l->slots.q[l->slots.head] : NULL;
                printf("    from %d lane %d: %d in slots (head seq %llu "
                       "step %u chunk %u), sender credits %d\n", p, k,
                       l->slots.n, m ? (unsigned long long)m->h.seq : 0ULL,
                       m ? m->h.step : 0, m ? m->h.chunk : 0, l->credits);
            }
    }
}

/* One configuration: K operations of algorithm a on every rank. victim:
 * the rank that dies at turn kill_at (-1: none). Returns 1 if it ran. */
static int run(const coll_algo_t *a, size_t c, size_t chunk, int victim,
               int kill_at)
{
    int nhosts = nr % 2 == 0 && nr >= 4 ? 2 : 1;
    net_reset();
    for (int r = 0; r < nr; r++) {
        snprintf(peers[r].hostname, sizeof(peers[r].hostname), "h%d",
                 r / (nr / nhosts));
        peers[r].pid = 1000 + r;
        peers[r].rank = r;
        env_init(r, nhosts, chunk);
        for (int k = 0; k < K; k++)
            rk[r].start[k] = (k ? rk[r].start[k - 1] : 0) + rnd_n(40);
    }
    int ran = 1, turn = 0, left = nr * K, quiet = 0;
    for (; left > 0 && turn < 200000; turn++) {
        int moved = 0;
        if (turn == kill_at && victim >= 0 && !dead[victim]) {
            rank_fail(victim, "killed");
            moved = 1;
        }
        int first = rnd_n(nr);
        for (int i = 0; i < nr; i++) {
            int r = (first + i) % nr;
            frank_t *f = &rk[r];
            if (dead[r])
                continue;
            for (int k = 0; k < K; k++) {
                if (f->state[k] == 0 && turn >= f->start[k] &&
                    (k == 0 || f->state[k - 1] != 0)) {
                    rcoll_status_t st = post(r, k, a, c, chunk);
                    if (st == RCOLL_ERR_NOT_SUPPORTED ||
                        st == RCOLL_ERR_INVALID_ARGUMENT) {
                        ran = 0; /* not for this rank count or layout */
                        goto out;
                    }
                    CHECK(st == RCOLL_OK, "%s/%s build: %s",
                          coll_kind_name(a->kind), a->name,
                          rcoll_last_error());
                    if (st != RCOLL_OK)
                        goto out;
                    moved = 1;
                }
                if (f->state[k] != 1)
                    continue;
                int mv = 0;
                rcoll_status_t st = coll_sched_progress(f->s[k], &f->env, &mv);
                moved |= mv;
                if (st == RCOLL_OK) {
                    f->state[k] = 2;
                    /* the buffer is the caller's again: a send still
                     * reading it would now carry this */
                    memset(f->in[k], 0x55, in_len(a->kind, c) *
                                               sizeof(int32_t));
                } else if (st != RCOLL_INPROGRESS) {
                    char why[256];
                    snprintf(why, sizeof(why), "%s", rcoll_last_error());
                    rank_fail(r, why);
                    moved = 1;
                    break;
                }
            }
        }
        moved |= net_step();
        left = 0;
        for (int r = 0; r < nr; r++)
            for (int k = 0; k < K; k++)
                left += !dead[r] && rk[r].state[k] != 2 &&
                        rk[r].state[k] != 3;
        if (moved || net_busy()) {
            quiet = 0;
            continue;
        }
        /* nothing moved: after QUIET such turns, set aside what fills
         * the slots, as the engine does after 100 ms; nothing to set
         * aside: a deadlock (unless posts are still to come) */
        int pending_post = 0;
        for (int r = 0; r < nr; r++)
            for (int k = 0; k < K; k++)
                pending_post |= !dead[r] && rk[r].state[k] == 0;
        if (pending_post || ++quiet < QUIET)
            continue; /* a refused send is retried: not stuck yet */
        int set = 0;
        for (int r = 0; r < nr; r++)
            if (!dead[r])
                set += coll_match_unblock(&rk[r].env);
        if (!set)
            break;
        n_unblocks++;
        n_sets += set;
        quiet = 0;
    }
    if (left && getenv("TEST_PROTOCOL_DUMP"))
        dump();
    CHECK(left == 0, "%s/%s, %d ranks, %d lanes, %d slots, chunk %zu, "
          "count %zu%s: %d operations never ended (turn %d)",
          coll_kind_name(a->kind), a->name, nr, nl, ns, chunk, c,
          victim >= 0 ? ", a rank killed" : "", left, turn);
    for (int r = 0; r < nr && left == 0; r++) {
        if (r == victim)
            continue;
        for (int k = 0; k < K; k++) {
            frank_t *f = &rk[r];
            if (victim >= 0 && f->state[k] == 3) {
                /* a survivor's operation after the death: failed, saying
                 * which rank */
                CHECK(strstr(f->err[k], "rank ") != NULL, "rank %d op %d: "
                      "an error naming no rank: %s", r, k, f->err[k]);
                continue;
            }
            CHECK(f->state[k] == 2, "%s/%s: rank %d op %d failed: %s",
                  coll_kind_name(a->kind), a->name, r, k, f->err[k]);
            if (f->state[k] != 2)
                continue;
            int root = k % nr;
            size_t ol = out_len(a->kind, c);
            if ((a->kind == COLL_REDUCE || a->kind == COLL_GATHER) &&
                r != root)
                continue;
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < ol; i++)
                if (f->out[k][i] != expect(a->kind, k, r, root, c, i) &&
                    !bad++)
                    first = i;
            CHECK(bad == 0, "%s/%s, %d ranks, %d lanes, %d slots, chunk "
                  "%zu, count %zu: rank %d op %d: %zu wrong elements, the "
                  "first at %zu (%d, expected %d)", coll_kind_name(a->kind),
                  a->name, nr, nl, ns, chunk, c, r, k, bad, first,
                  bad ? f->out[k][first] : 0,
                  bad ? expect(a->kind, k, r, root, c, first) : 0);
            CHECK(f->out[k][ol] == (int32_t)0xeeeeeeee, "%s/%s: rank %d "
                  "op %d wrote past its output", coll_kind_name(a->kind),
                  a->name, r, k);
        }
    }
out:
    for (int r = 0; r < nr; r++) {
        /* operations still running when the run ended: their sends */
        for (int k = 0; k < K; k++)
            if (rk[r].state[k] == 1)
                net_revoke(r, rk[r].s[k]);
    }
    net_reset();
    for (int r = 0; r < nr; r++)
        env_fini(r);
    return ran;
}

/* The send rule for send_free steps (sched.c, sched_send), on rank 0 of
 * 4 with nothing from the others: step 0 receives from rank 1; step 1
 * forwards it to rank 2 (send_dep 0); step 2 sends rank 0's input to rank
 * 3; step 3 sends it to rank 1. With steps 1 and 2 send_free, step 2 goes
 * while step 1 waits for its receive, and step 3 (not send_free) stays
 * held; without send_free on step 1 both later steps stay held. */
static int sent_to(int b)
{
    int n = 0;
    for (int k = 0; k < MAXL; k++)
        n += dirs[0][b].lane[k].wire.n + dirs[0][b].lane[k].slots.n;
    return n;
}

static void add_send(coll_sched_t *s, int peer, const int32_t *buf, int dep,
                     int free_)
{
    coll_step_t t;
    coll_sched_step_init(&t);
    t.send_peer = peer;
    t.send_buf = (const char *)buf;
    t.send_bytes = 64;
    t.send_dep = dep;
    t.send_free = (unsigned char)free_;
    coll_sched_add(s, &t);
}

static void test_send_free(void)
{
    static int32_t in[16], out[16];
    nr = 4; nl = 1; ns = 4; p_refuse = 0; p_zc = 0;
    for (int free1 = 1; free1 >= 0; free1--) {
        net_reset();
        env_init(0, 1, 64);
        coll_sched_t s;
        memset(&s, 0, sizeof(s));
        s.kind = COLL_BROADCAST;
        s.sendbuf = in;
        s.recvbuf = out;
        s.count = 16;
        s.dt = RCOLL_INT32;
        s.op = RCOLL_SUM;
        s.seq = 1;
        s.chunk = 64;
        s.md = &coll_md_host;
        coll_step_t t;
        coll_sched_step_init(&t);
        t.recv_peer = 1;
        t.recv_dst = (char *)out;
        t.recv_bytes = 64;
        coll_sched_add(&s, &t);
        add_send(&s, 2, out, 0, free1);
        add_send(&s, 3, in, -1, 1);
        add_send(&s, 1, in, -1, 0);
        int prog = 0;
        rcoll_status_t st = coll_sched_progress(&s, &rk[0].env, &prog);
        CHECK(st == RCOLL_OK || st == RCOLL_INPROGRESS, "send_free: %s",
              rcoll_status_string(st));
        if (free1)
            CHECK(sent_to(2) == 0 && sent_to(3) == 1 && sent_to(1) == 0,
                  "send_free: to 2, 3, 1: %d %d %d messages (want 0 1 0)",
                  sent_to(2), sent_to(3), sent_to(1));
        else
            CHECK(sent_to(2) == 0 && sent_to(3) == 0 && sent_to(1) == 0,
                  "without send_free: to 2, 3, 1: %d %d %d messages (want "
                  "0 0 0)", sent_to(2), sent_to(3), sent_to(1));
        coll_sched_free(&s);
        coll_match_destroy(rk[0].env.match);
    }
    net_reset();
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 6;
    rng_s = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    if (!rng_s)
        rng_s = 1;
    static const size_t counts[] = {0, 1, 5, 64, 333, 2000};
    static const size_t chunks[] = {64, 256, 1024};
    static const int rcounts[] = {2, 3, 4, 5, 6, 7, 8, 12, 17, 31, 33};
    int runs = 0, skipped = 0, kills = 0;
    test_send_free();
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        if (!kind_tested(a->kind) || a->build == coll_area_build)
            continue;
        for (int i = 0; i < rounds; i++) {
            nr = rcounts[rnd_n(11)];
            nl = 1 + rnd_n(MAXL);
            ns = 1 << rnd_n(3);
            p_refuse = rnd_n(30);
            p_zc = rnd_n(100);
            size_t c = a->kind == COLL_BARRIER ? 0 : counts[rnd_n(6)];
            size_t chunk = chunks[rnd_n(3)];
            int victim = i % 3 == 2 ? rnd_n(nr) : -1;
            int ran = run(a, c, chunk, victim, victim >= 0 ? rnd_n(400) : -1);
            runs += ran;
            skipped += !ran;
            kills += ran && victim >= 0;
        }
    }
    printf("test_protocol: %d runs (%d with a rank killed), %d skipped (not "
           "for that rank count); %ld sends refused, %ld zero-copy; slots "
           "set aside %ld times (%ld messages)\n", runs, kills, skipped,
           n_refused, n_zc, n_unblocks, n_sets);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
