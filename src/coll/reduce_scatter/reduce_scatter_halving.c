/* Reduce-scatter by recursive halving: log2(p) exchange rounds, round k
 * swapping half of the range still held with a partner r ^ 2^k and
 * reducing the partner's copy of the half kept, so each rank moves about
 * (n - 1) blocks like the ring, in log2(p) steps instead of n - 1: for
 * small blocks, where the ring's steps and the tree's whole-vector reduce
 * cost more than the bytes.
 *
 * p is the largest power of two <= n. Every rank works in a scratch copy
 * of its input whose blocks are permuted so that "group" v (block v and,
 * for v < n - p, block v + p) is contiguous; the halving runs over the p
 * groups. An extra rank r >= p hands its whole (permuted) input to r - p
 * first, which reduces it in, and receives its finished block back at the
 * end. Each block is reduced on one rank only, so results need no
 * agreement between ranks; AVG divides in the last round.
 *
 * The rounds take the partners r ^ 2^k in the order of
 * coll_rabenseifner_order: across hosts, the host's own ranks first, so
 * the first and largest halves stay inside the host. Round i keeps the
 * lower half of the range when bit k_i of r is clear, so rank r ends
 * holding position P(r) = the bits of r in round order, first bit most
 * significant; group v is laid out at position P(v) in the scratch copy,
 * so that rank r ends with group r (one host: P(r) = r, today's layout). */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

static void rs_halving_finish(coll_sched_t *s, const coll_env_t *e)
{
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    int p = 1, bit[COLL_LOC_BITS];
    while (p * 2 <= e->nranks)
        p *= 2;
    int nb = coll_rabenseifner_order(e, p, bit);
    const size_t *po = coll_halving_po(s, bytes * (size_t)e->nranks);
    size_t at = po[coll_halving_pos(e->rank, bit, nb)] * bytes;
    if (bytes) /* our block: the first of our group */
        s->md->copy(s->recvbuf, s->scratch + at, bytes);
}

rcoll_status_t coll_reduce_scatter_halving(coll_sched_t *s,
                                           const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, p = 1;
    size_t bytes = s->count * rcoll_datatype_size(s->dt); /* per block */
    size_t total = bytes * (size_t)n;
    const char *in = s->sendbuf;
    coll_step_t t;
    rcoll_status_t st;

    if (n == 1 || !bytes) {
        if (bytes && in != s->recvbuf)
            s->md->copy(s->recvbuf, in, bytes);
        return RCOLL_OK;
    }
    while (p * 2 <= n)
        p *= 2;
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(e, p, bit);
    size_t *po = coll_halving_scratch(s, total, n, p, bit, nb);
    if (!po)
        return RCOLL_ERR_NO_MEMORY; /* (message set) */
    /* the input, permuted into groups: v, then v + p where it exists */
    char *w = s->scratch;
    for (int g = 0; g < p; g++) {
        size_t o = po[coll_halving_pos(g, bit, nb)] * bytes;
        s->md->copy(w + o, in + (size_t)g * bytes, bytes);
        if (g + p < n)
            s->md->copy(w + o + bytes, in + (size_t)(g + p) * bytes, bytes);
    }
    if (r >= p) { /* extra rank: hand over, get our block back */
        coll_sched_step_init(&t);
        t.send_peer = r - p;
        t.send_buf = w;
        t.send_bytes = total;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        coll_sched_step_init(&t);
        t.recv_peer = r - p;
        t.recv_dst = s->recvbuf;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        return coll_sched_add(s, &t);
    }
    int last = -1; /* the latest step with a receive */
    if (r + p < n) {
        coll_sched_step_init(&t);
        t.recv_peer = r + p;
        t.recv_dst = w;
        t.recv_local = w;
        t.recv_bytes = total;
        t.recv_mode = RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
    }
#define OFF(j) (po[j] * bytes)
    int lo = 0, hi = p; /* positions */
    for (int i = 0; i < nb; i++) {
        int m = 1 << bit[i], peer = r ^ m, mid = lo + (hi - lo) / 2;
        int klo = (r & m) ? mid : lo, khi = (r & m) ? hi : mid;
        int glo = (r & m) ? lo : mid, ghi = (r & m) ? mid : hi;
        coll_sched_step_init(&t);
        t.send_peer = peer;
        t.send_buf = w + OFF(glo);
        t.send_bytes = OFF(ghi) - OFF(glo);
        t.send_dep = last;
        t.send_dep_all = 1;
        t.recv_peer = peer;
        t.recv_dst = w + OFF(klo);
        t.recv_local = w + OFF(klo);
        t.recv_bytes = OFF(khi) - OFF(klo);
        t.recv_mode = (i == nb - 1 && s->op == RCOLL_AVG) ? RECV_REDUCE_AVG
                                                          : RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
        lo = klo;
        hi = khi;
    }
    if (r + p < n) { /* block r + p, finished here, to its rank */
        coll_sched_step_init(&t);
        t.send_peer = r + p;
        t.send_buf = w + OFF(coll_halving_pos(r, bit, nb)) + bytes;
        t.send_bytes = bytes;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.send_copy = 1;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
#undef OFF
    s->finish = rs_halving_finish;
    return RCOLL_OK;
}

/* The input permuted into scratch and our block out of it, the extra
 * ranks' whole input in and their block out, then log2(p) rounds of half
 * the range still held, none overlapping the next */
double coll_reduce_scatter_halving_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    int n = m->n;
    coll_tune_model_t x = coll_tune_at(m, m->loc->xq[m->Lp]);
    double t = (n + 1) * m->S / m->g +
               m->extra * (coll_tune_step(&x, m->S * n, *c, 1) +
                           coll_tune_step(&x, m->S, *c, 0));
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(e, m->p, bit);
    double h = m->S * n / 2;
    for (int i = 0; i < nb; i++, h /= 2) { /* partner r ^ 2^bit[i] */
        x = coll_tune_at(m, m->loc->xq[bit[i]]);
        t += coll_tune_step(&x, h, *c, 1);
    }
    return t;
}
