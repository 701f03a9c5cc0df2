/* The tuner's model of a call (coll/tune.h says what it models), and an
 * algorithm's estimated time through its cost function (each algorithm
 * file has its own, named in coll_algos). */
#include "tune.h"
#include <stdlib.h>
#include <string.h>

int coll_peers_all(const coll_env_t *e)
{
    return e->nranks - 1;
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
    if (e->nhosts > 1 && e->paths > 1)
        m.b *= e->paths; /* a message is striped over the rails */
    m.al = e->link_local.alpha_us * 1e-6;
    m.al_raw = m.al;
    if (e->local_size > e->ncores)
        m.al *= (double)e->local_size / e->ncores;
    m.bl = e->link_local.gbps * 1e9;
    m.loc = &e->loc;
    m.g = rcoll_config.tune_reduce_gbps * 1e9;
    m.slot = (double)((e->chunk_size / m.dts) * m.dts);
    m.n = n;
    m.p = 1;
    while (m.p * 2 <= n)
        m.p *= 2;
    m.L = coll_log2ceil(n);
    m.Lp = coll_log2ceil(m.p);
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

/* The most ranks of one host whose partner (part(r), or -1 for none) is
 * on another host; cnt has nhosts zeroed entries and is left zeroed. */
static int cross_max(int n, const int *host, int *cnt, int nhosts,
                     int (*part)(int r, int n, int k, const int *ring),
                     int k, const int *ring)
{
    int q = 0;
    for (int r = 0; r < n; r++) {
        int p = part(r, n, k, ring);
        if (p >= 0 && host[p] != host[r] && ++cnt[host[r]] > q)
            q = cnt[host[r]];
    }
    for (int h = 0; h < nhosts; h++)
        cnt[h] = 0;
    return q;
}
/* r ^ 2^k; below the largest power of two p <= n only ranks < p take
 * part (the others have handed their data over), at 2^k = p the pairs
 * (r, r + p) of the ranks beyond p */
static int part_xor(int r, int n, int k, const int *ring)
{
    (void)ring;
    int p = 1;
    while (p <= n / 2)
        p *= 2;
    if ((1 << k) < p && r >= p)
        return -1;
    int q = r ^ (1 << k);
    return q < n ? q : -1;
}
static int part_shift(int r, int n, int k, const int *ring)
{
    (void)ring;
    return (int)(((long)r + (1L << k)) % n);
}
static int part_ring(int r, int n, int k, const int *ring)
{
    (void)n;
    (void)k;
    return ring[r]; /* here ring is rank -> successor */
}

int coll_locality_init(coll_locality_t *loc, int n, const int *host,
                       int nhosts, const int *ring)
{
    memset(loc, 0, sizeof(*loc));
    if (n < 1 || nhosts < 1)
        return 0; /* unknown: the model charges one flow per step */
    int *cnt = calloc((size_t)nhosts, sizeof(int));
    int *succ = malloc((size_t)n * sizeof(int));
    if (!cnt || !succ) {
        free(cnt);
        free(succ);
        return -1;
    }
    for (int i = 0; i < n; i++) { /* ring: position -> rank (NULL: rank order) */
        int a = ring ? ring[i] : i, b = ring ? ring[(i + 1) % n] : (i + 1) % n;
        succ[a] = b;
    }
    for (int k = 0; k < COLL_LOC_BITS - 1 && (1L << k) < n; k++) {
        loc->xq[k] = cross_max(n, host, cnt, nhosts, part_xor, k, NULL);
        loc->sq[k] = cross_max(n, host, cnt, nhosts, part_shift, k, NULL);
    }
    loc->ringq = cross_max(n, host, cnt, nhosts, part_ring, 0, succ);
    if (nhosts > 1) {
        for (int r = 0; r < n; r++)
            cnt[host[r]]++;
        for (int h = 0; h < nhosts; h++)
            if (cnt[h] > loc->allq)
                loc->allq = cnt[h];
    }
    loc->valid = 1;
    free(cnt);
    free(succ);
    return 0;
}
