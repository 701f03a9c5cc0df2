/* The tuner's model of a call (coll/tune.h says what it models), and an
 * algorithm's estimated time through its cost function (each algorithm
 * file has its own, named in coll_algos). */
#include "tune.h"

static int ilog2ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

double coll_tune_cost(const coll_algo_t *a, const coll_sched_t *s,
                      const coll_env_t *e, size_t *chunk)
{
    coll_tune_model_t m;
    int n = e->nranks;
    m.dts = rcoll_datatype_size(s->dt);
    m.S = (double)s->count * (double)m.dts;
    m.a = e->link.alpha_us * 1e-6;
    m.a_raw = m.a;
    if (e->local_size > e->ncores)
        m.a *= (double)e->local_size / e->ncores;
    m.b = e->link.gbps * 1e9;
    m.g = rcoll_config.tune_reduce_gbps * 1e9;
    m.slot = (double)((e->chunk_size / m.dts) * m.dts);
    m.n = n;
    m.p = 1;
    while (m.p * 2 <= n)
        m.p *= 2;
    m.L = ilog2ceil(n);
    m.Lp = ilog2ceil(m.p);
    m.extra = n != m.p;
    double c = m.slot;
    double t = a->cost ? a->cost(&m, e, &c) : 0;
    /* several rails: a ring step's share (S / n) goes in at least one
     * chunk per rail, each chunk at least COLL_PATH_CHUNK_MIN, so that the
     * lanes striped over the rails all carry part of every step */
    if (e->paths > 1) {
        double per = m.S / n / e->paths;
        per = (double)(((size_t)per + m.dts - 1) / m.dts * m.dts);
        if (per >= COLL_PATH_CHUNK_MIN && per < c)
            c = per;
    }
    if (chunk)
        *chunk = (size_t)c;
    return t;
}
