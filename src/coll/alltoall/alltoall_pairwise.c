/* Pairwise all-to-all: at step k (1 .. n-1) rank r sends its block for
 * rank r + k and receives rank r - k's block for it. The steps do not wait
 * for each other: every send is posted at once (credits permitting) and
 * the receives complete in step order, so each pair of ranks exchanges
 * exactly one block each way and no rank waits on a chain of others. In
 * place (sendbuf == recvbuf) the input is copied aside first. */
#include "coll/tune.h"
#include <stdlib.h>

/* A copy of the `bytes` input when the call is in place, else NULL. */
static rcoll_status_t in_place_copy(coll_sched_t *s, size_t bytes,
                                    const char **src)
{
    *src = s->sendbuf;
    if (s->sendbuf != s->recvbuf || !bytes)
        return RCOLL_OK;
    if (!(s->scratch = malloc(bytes)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory for "
                                "%zu bytes (in place)",
                                coll_kind_name(s->kind), bytes);
    s->md->copy(s->scratch, s->sendbuf, bytes);
    *src = s->scratch;
    return RCOLL_OK;
}

/* The n - 1 exchange steps; block p of the input is `sb(p)` bytes at
 * src + soff(p), block p of the output rb(p) at recvbuf + roff(p). */
static rcoll_status_t pairwise(coll_sched_t *s, const coll_env_t *e,
                               const char *src, const size_t *so,
                               const size_t *sl, const size_t *ro,
                               const size_t *rl, size_t mul)
{
    int n = e->nranks, r = e->rank;
    char *out = s->recvbuf;
    rcoll_status_t st;
#define AT(a, p) ((a) ? (a)[p] * mul : (size_t)(p) * mul)
#define LEN(a, p) ((a) ? (a)[p] * mul : mul)
    if (LEN(sl, r) && (src + AT(so, r) != out + AT(ro, r)))
        s->md->copy(out + AT(ro, r), src + AT(so, r), LEN(sl, r));
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = (r - k + n) % n;
        coll_step_t t;
        coll_sched_step_init(&t);
        t.send_peer = to;
        t.send_buf = LEN(sl, to) ? src + AT(so, to) : NULL;
        t.send_bytes = LEN(sl, to);
        t.recv_peer = from;
        t.recv_dst = LEN(rl, from) ? out + AT(ro, from) : NULL;
        t.recv_bytes = LEN(rl, from);
        t.recv_mode = RECV_COPY;
        t.recv_place = 1; /* the input is never recvbuf (in place: a copy) */
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
#undef AT
#undef LEN
    return RCOLL_OK;
}

rcoll_status_t coll_alltoall_pairwise(coll_sched_t *s, const coll_env_t *e)
{
    size_t b = s->count * rcoll_datatype_size(s->dt);
    const char *src;
    rcoll_status_t st;
    if (!b)
        return RCOLL_OK;
    if ((st = in_place_copy(s, b * (size_t)e->nranks, &src)) != RCOLL_OK)
        return st;
    return pairwise(s, e, src, NULL, NULL, NULL, NULL, b);
}

rcoll_status_t coll_alltoallv_pairwise(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks;
    size_t dts = rcoll_datatype_size(s->dt), extent = 0;
    const size_t *sc = s->v, *sd = s->v + n, *rc = s->v + 2 * n,
                 *rd = s->v + 3 * n;
    const char *src;
    rcoll_status_t st;
    for (int p = 0; p < n; p++)
        if (sc[p] && sd[p] + sc[p] > extent)
            extent = sd[p] + sc[p];
    if ((st = in_place_copy(s, extent * dts, &src)) != RCOLL_OK)
        return st;
    return pairwise(s, e, src, sd, sc, rd, rc, dts);
}

/* One dependent round, n - 1 messages posted (as the flat all-reduce);
 * across several hosts the (L - 1) messages inside the host cost the host
 * link's posting only: the network's (H - 1) L dominate */
double coll_alltoall_pairwise_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    coll_tune_model_t ml;
    int H, L, net = m->n - 1;
    double loc = 0;
    if (coll_tune_hier(m, e, &ml, &H, &L)) {
        net = (H - 1) * L;
        loc = (L - 1) * ml.a_raw;
    }
    return m->a + (net - 1) * m->a_raw + loc +
           net *
               (coll_tune_nch(m, m->S, *c) > 1 ? coll_tune_nch(m, m->S, *c) - 1
                                               : 0) *
               m->a +
           net * m->S / coll_tune_at(m, m->loc->allq).b;
}
