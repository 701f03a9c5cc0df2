/* Recursive-doubling all-gather, any rank count: ceil(log2 n) + 2 steps at
 * most. With p the largest power of two <= n, rank v < p stands for the
 * blocks v and v + p (if that rank exists): the "extra" ranks r >= p first
 * hand their block to r - p and get everything back at the end. Among the
 * p others, round k exchanges with v ^ 2^k the blocks of the aligned group
 * of 2^k virtual ranks held so far; a group's blocks are two contiguous
 * ranges of recvbuf ([g, g+m) and [g+p, g+m+p) cut at n), so a round is at
 * most two steps. Receives always land in blocks this rank has not sent. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

/* The real block ranges of virtual group [g, g + m): up to two. */
static int group_ranges(int g, int m, int p, int n, int lo[2], int hi[2])
{
    int k = 0;
    lo[k] = g;
    hi[k++] = g + m;
    if (g + p < n) {
        lo[k] = g + p;
        hi[k] = g + m + p < n ? g + m + p : n;
        k++;
    }
    return k;
}

/* Across hosts (coll_rabenseifner_order not the plain descending one):
 * the rounds run in the reverse of that order, the farthest partners
 * first while the groups are small, in a scratch copy laid out by halving
 * position (coll_halving_layout: position P(v) holds blocks v and v + p),
 * where a group is always one contiguous range; the blocks are copied out
 * in rank order at the end. The extra ranks get the whole scratch. */
static void ag_perm_finish(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, p = 1, bit[COLL_LOC_BITS];
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    while (p * 2 <= n)
        p *= 2;
    int nb = coll_rabenseifner_order(e, p, bit);
    const size_t *po = coll_halving_po(s, bytes * (size_t)n);
    char *out = s->recvbuf;
    for (int v = 0; v < p && bytes; v++) {
        size_t at = po[coll_halving_pos(v, bit, nb)] * bytes;
        s->md->copy(out + (size_t)v * bytes, s->scratch + at, bytes);
        if (v + p < n)
            s->md->copy(out + (size_t)(v + p) * bytes, s->scratch + at + bytes,
                        bytes);
    }
}

static rcoll_status_t ag_perm(coll_sched_t *s, const coll_env_t *e, int p,
                              const int *bit, int nb)
{
    int n = e->nranks, r = e->rank;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    size_t total = bytes * (size_t)n;
    coll_step_t t;
    rcoll_status_t st;
    size_t *po = coll_halving_scratch(s, total, n, p, bit, nb);
    if (!po)
        return RCOLL_ERR_NO_MEMORY; /* (message set) */
    char *w = s->scratch;
    s->finish = ag_perm_finish;
    if (r >= p) { /* extra: our block to r - p, the whole scratch back */
        coll_sched_step_init(&t);
        t.send_peer = r - p;
        t.send_buf = s->sendbuf;
        t.send_bytes = bytes;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        coll_sched_step_init(&t);
        t.recv_peer = r - p;
        t.recv_dst = w;
        t.recv_bytes = total;
        t.recv_mode = RECV_COPY;
        return coll_sched_add(s, &t);
    }
    int me = coll_halving_pos(r, bit, nb), lo = me, hi = me + 1;
    s->md->copy(w + po[me] * bytes, s->sendbuf, bytes);
    int last_recv = -1;
    if (r + p < n) { /* our extra rank's block: the second of our group */
        coll_sched_step_init(&t);
        t.recv_peer = r + p;
        t.recv_dst = w + (po[me] + 1) * bytes;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last_recv = s->nsteps - 1;
    }
    /* round j (bit[nb - 1 - j]): our aligned range of 2^j positions for
     * the partner's, which differs in that position bit */
    for (int j = 0; j < nb; j++) {
        int wd = 1 << j, plo = lo ^ wd;
        coll_sched_step_init(&t);
        t.send_peer = r ^ (1 << bit[nb - 1 - j]);
        t.send_buf = w + po[lo] * bytes;
        t.send_bytes = (po[hi] - po[lo]) * bytes;
        t.send_dep = last_recv;
        t.send_dep_all = 1;
        t.recv_peer = t.send_peer;
        t.recv_dst = w + po[plo] * bytes;
        t.recv_bytes = (po[plo + wd] - po[plo]) * bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last_recv = s->nsteps - 1;
        lo = lo < plo ? lo : plo;
        hi = lo + 2 * wd;
    }
    if (r + p < n) { /* everything to our extra rank */
        coll_sched_step_init(&t);
        t.send_peer = r + p;
        t.send_buf = w;
        t.send_bytes = total;
        t.send_dep = last_recv;
        t.send_dep_all = 1;
        return coll_sched_add(s, &t);
    }
    return RCOLL_OK;
}

rcoll_status_t coll_allgather_rdb(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, p = 1;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    coll_step_t t;
    rcoll_status_t st;

    if (bytes && s->sendbuf != out + (size_t)r * bytes)
        s->md->copy(out + (size_t)r * bytes, s->sendbuf, bytes);
    if (n == 1)
        return RCOLL_OK;
    while (p * 2 <= n)
        p *= 2;
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(e, p, bit);
    for (int i = 0; i < nb; i++)
        if (bit[i] != nb - 1 - i) /* not the plain order: across hosts */
            return bytes ? ag_perm(s, e, p, bit, nb) : RCOLL_OK;
    if (r >= p) { /* extra: our block to r - p, everything else back */
        coll_sched_step_init(&t);
        t.send_peer = r - p;
        t.send_buf = out + (size_t)r * bytes;
        t.send_bytes = bytes;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        /* two pieces around our own block, which a send may still read */
        coll_sched_step_init(&t);
        t.recv_peer = r - p;
        t.recv_dst = out;
        t.recv_bytes = (size_t)r * bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        t.recv_dst = out + (size_t)(r + 1) * bytes;
        t.recv_bytes = (size_t)(n - r - 1) * bytes;
        return coll_sched_add(s, &t);
    }
    int last_recv = -1; /* the latest step with a receive */
    if (r + p < n) {
        coll_sched_step_init(&t);
        t.recv_peer = r + p;
        t.recv_dst = out + (size_t)(r + p) * bytes;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last_recv = s->nsteps - 1;
    }
    for (int m = 1; m < p; m *= 2) {
        int peer = r ^ m;
        int slo[2], shi[2], rlo[2], rhi[2];
        int ns = group_ranges(r & ~(m - 1), m, p, n, slo, shi);
        int nr = group_ranges(peer & ~(m - 1), m, p, n, rlo, rhi);
        int dep = last_recv;
        for (int i = 0; i < (ns > nr ? ns : nr); i++) {
            coll_sched_step_init(&t);
            if (i < ns) {
                t.send_peer = peer;
                t.send_buf = out + (size_t)slo[i] * bytes;
                t.send_bytes = (size_t)(shi[i] - slo[i]) * bytes;
                t.send_dep = dep;
                t.send_dep_all = 1;
            }
            if (i < nr) {
                t.recv_peer = peer;
                t.recv_dst = out + (size_t)rlo[i] * bytes;
                t.recv_bytes = (size_t)(rhi[i] - rlo[i]) * bytes;
                t.recv_mode = RECV_COPY;
            }
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
            if (i < nr)
                last_recv = s->nsteps - 1;
        }
    }
    if (r + p < n) { /* everything but its own block to our extra rank */
        coll_sched_step_init(&t);
        t.send_peer = r + p;
        t.send_buf = out;
        t.send_bytes = (size_t)(r + p) * bytes;
        t.send_dep = last_recv;
        t.send_dep_all = 1;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        t.send_buf = out + (size_t)(r + p + 1) * bytes;
        t.send_bytes = (size_t)(n - r - p - 1) * bytes;
        return coll_sched_add(s, &t);
    }
    return RCOLL_OK;
}

/* log2 p rounds; ranks past p send in before and get all of it after */
double coll_allgather_rdb_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(e, m->p, bit);
    int perm = 0;
    for (int i = 0; i < nb; i++)
        perm |= bit[i] != nb - 1 - i;
    /* round j: 2^j groups (blocks, two with extras), partner bit
     * bit[nb - 1 - j]; permuted, the whole output is copied out once */
    double t = perm ? m->n * m->S / m->g : 0;
    for (int j = 0; j < nb; j++) {
        coll_tune_model_t x = coll_tune_at(m, m->loc->xq[bit[nb - 1 - j]]);
        t += x.a + (double)(1 << j) * m->S * (m->extra ? 2 : 1) / x.b;
    }
    coll_tune_model_t x = coll_tune_at(m, m->loc->xq[m->Lp]);
    return t + m->extra * 2 * coll_tune_step(&x, m->S * m->n, *c, 0);
}
