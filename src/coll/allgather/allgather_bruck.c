/* Bruck all-gather (small messages, any rank count: ceil(log2 n) steps).
 * A scratch buffer holds the blocks in rotated order, index i being rank
 * (r + i) mod n's block. At step k (distance d = 2^k) rank r sends its first
 * min(d, n - d) blocks to r - d and appends as many from r + d at index d.
 * A step's send reads blocks earlier steps received, so it waits for the
 * whole previous receive; receives only ever write beyond what any send
 * reads. The final rotation into recvbuf runs when everything is done. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

static void bruck_unrotate(coll_sched_t *s, const coll_env_t *e)
{
    size_t b = s->count * rcoll_datatype_size(s->dt);
    int n = e->nranks, r = e->rank;
    char *out = s->recvbuf;
    if (!b)
        return;
    /* scratch[i] is rank (r + i) % n's block: two contiguous pieces */
    s->md->copy(out + (size_t)r * b, s->scratch, (size_t)(n - r) * b);
    s->md->copy(out, s->scratch + (size_t)(n - r) * b, (size_t)r * b);
}

rcoll_status_t coll_allgather_bruck(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    rcoll_status_t st;

    if (n == 1 || !b) {
        if (b && s->sendbuf != s->recvbuf)
            s->md->copy((char *)s->recvbuf + (size_t)r * b, s->sendbuf, b);
        return RCOLL_OK;
    }
    if (!(s->scratch = malloc(b * (size_t)n)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                "allgather: no memory for %zu scratch bytes",
                                b * (size_t)n);
    s->md->copy(s->scratch, s->sendbuf, b);
    for (int d = 1, k = 0; d < n; d <<= 1, k++) {
        int cnt = d < n - d ? d : n - d;
        coll_step_t t;
        coll_sched_step_init(&t);
        t.send_peer = (r - d + n) % n;
        t.send_buf = s->scratch;
        t.send_bytes = (size_t)cnt * b;
        t.send_dep = k - 1;
        t.send_dep_all = 1;
        t.recv_peer = (r + d) % n;
        t.recv_dst = s->scratch + (size_t)d * b;
        t.recv_bytes = (size_t)cnt * b;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    s->finish = bruck_unrotate;
    return RCOLL_OK;
}

/* ceil(log2 n) rounds, plus the final local rotation of everything */
double coll_allgather_bruck_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    (void)c;
    double t = m->n * m->S / m->g;
    for (int k = 0; k < m->L; k++) { /* min(2^k, n - 2^k) blocks */
        coll_tune_model_t x = coll_tune_at(m, m->loc->sq[k]);
        int d = 1 << k, blocks = d < m->n - d ? d : m->n - d;
        t += x.a + blocks * m->S / x.b;
    }
    return t;
}
