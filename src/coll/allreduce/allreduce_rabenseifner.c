/* Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an
 * all-gather by recursive doubling; each rank moves about 2 * bytes like
 * the ring, in 2 log2(p) steps instead of 2(n - 1). With p the largest
 * power of two <= n, the "extra" ranks r >= p first hand their data to
 * r - p (which reduces it in) and get the result back at the end.
 *
 * Everything happens in recvbuf (after copying the input in): halving round
 * k sends the half this rank gives up and reduces the partner's copy of
 * the half it keeps, and the two halves are disjoint; doubling rounds
 * receive only blocks this rank has not sent. So no receive writes what a
 * pending send reads. Every block is combined in the same order on every
 * rank, so all ranks get identical results. */
#include "coll/tune.h"
#include <string.h>

/* The first element of block b of p (b = p: the end). */
static size_t blk_off(size_t count, int p, int b)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p;
    size_t ub = (size_t)b;
    return ub * base + (ub < rem ? ub : rem);
}

rcoll_status_t coll_allreduce_rabenseifner(coll_sched_t *s,
                                           const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, p = 1;
    size_t dts = rcoll_datatype_size(s->dt);
    size_t bytes = s->count * dts;
    char *out = s->recvbuf;
    coll_step_t t;
    rcoll_status_t st;

    coll_copy_in(s);
    if (n == 1)
        return RCOLL_OK;
    while (p * 2 <= n)
        p *= 2;
    if (r >= p) { /* extra rank: hand over, get the result back */
        coll_sched_step_init(&t);
        t.send_peer = r - p;
        t.send_buf = out;
        t.send_bytes = bytes;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        coll_sched_step_init(&t);
        t.recv_peer = r - p;
        t.recv_dst = out;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        return coll_sched_add(s, &t);
    }
    int last = -1; /* the latest step with a receive */
    if (r + p < n) {
        coll_sched_step_init(&t);
        t.recv_peer = r + p;
        t.recv_dst = out;
        t.recv_local = out;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
    }
    /* block b of p: elements [OFF(b), OFF(b + 1)) */
#define OFF(b) blk_off(s->count, p, b)
    int lo = 0, hi = p;
    for (int m = p / 2; m >= 1; m /= 2) {
        int peer = r ^ m, mid = lo + (hi - lo) / 2;
        int klo = (r & m) ? mid : lo, khi = (r & m) ? hi : mid;
        int glo = (r & m) ? lo : mid, ghi = (r & m) ? mid : hi;
        size_t ko = OFF(klo), kb = OFF(khi) - ko;
        size_t go = OFF(glo), gb = OFF(ghi) - go;
        coll_sched_step_init(&t);
        t.send_peer = peer;
        t.send_buf = out + go * dts;
        t.send_bytes = gb * dts;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.recv_peer = peer;
        t.recv_dst = out + ko * dts;
        t.recv_local = out + ko * dts;
        t.recv_bytes = kb * dts;
        t.recv_mode = (m == 1 && s->op == RCOLL_AVG) ? RECV_REDUCE_AVG
                                                     : RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
        lo = klo;
        hi = khi;
    }
    /* now block r is final here; double the range back up */
    for (int m = 1; m < p; m *= 2) {
        int peer = r ^ m;
        int mlo = r & ~(m - 1), plo = peer & ~(m - 1);
        size_t mo = OFF(mlo), mb = OFF(mlo + m) - mo;
        size_t po = OFF(plo), pb = OFF(plo + m) - po;
        coll_sched_step_init(&t);
        t.send_peer = peer;
        t.send_buf = out + mo * dts;
        t.send_bytes = mb * dts;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.send_copy = 1;
        t.recv_peer = peer;
        t.recv_dst = out + po * dts;
        t.recv_bytes = pb * dts;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
    }
#undef OFF
    if (r + p < n) { /* the result to our extra rank */
        coll_sched_step_init(&t);
        t.send_peer = r + p;
        t.send_buf = out;
        t.send_bytes = bytes;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.send_copy = 1;
        return coll_sched_add(s, &t);
    }
    return RCOLL_OK;
}

/* Each halving and doubling step waits for the whole previous one */
double coll_allreduce_rabenseifner_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    double t = m->extra * (coll_tune_step(m, m->S, *c, 1) +
                           coll_tune_step(m, m->S, *c, 0));
    for (double h = m->S / 2; h * m->p >= m->S * 0.99 && h > 0; h /= 2)
        t += coll_tune_step(m, h, *c, 1) + coll_tune_step(m, h, *c, 0);
    return t;
}
