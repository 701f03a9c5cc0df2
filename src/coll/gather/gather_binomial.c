/* Binomial-tree gather (small blocks: ceil(log2 n) rounds at the root
 * instead of n - 1 messages). Ranks are placed at virtual positions
 * v = rank - root (mod n); position v gathers the blocks of positions
 * v .. v + size(v) - 1 (its subtree, size(v) = min(lowbit(v), n - v)) in
 * position order, receiving each child's subtree after its own block, and
 * then sends them all to its parent v - lowbit(v). Leaves send their input
 * as it is; the root receives into a scratch buffer in position order and
 * rotates it into rank order at the end. */
#include "coll/tune.h"
#include <stdlib.h>

static void gather_unrotate(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, root = s->root;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    /* scratch[i] is rank (root + i) % n's block */
    s->md->copy(out + (size_t)root * b, s->scratch, (size_t)(n - root) * b);
    if (root)
        s->md->copy(out, s->scratch + (size_t)(n - root) * b,
                    (size_t)root * b);
}

rcoll_status_t coll_gather_binomial(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, root = s->root;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    int v = (r - root + n) % n, lowbit;
    coll_step_t t;
    rcoll_status_t st;
    if (!b)
        return RCOLL_OK;
    if (n == 1) {
        if (s->sendbuf != s->recvbuf)
            s->md->copy(s->recvbuf, s->sendbuf, b);
        return RCOLL_OK;
    }
    int nchild = coll_binomial(v, n, &lowbit);
    int size = lowbit < n - v ? lowbit : n - v;
    const char *buf = s->sendbuf;
    if (nchild) {
        if (!(s->scratch = malloc((size_t)size * b)))
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "gather: no memory "
                                    "for %zu scratch bytes",
                                    (size_t)size * b);
        s->md->copy(s->scratch, s->sendbuf, b);
        buf = s->scratch;
    }
    int last = -1;
    for (int m = 1; m < lowbit && v + m < n; m <<= 1) {
        int c = v + m, csize = m < n - c ? m : n - c;
        coll_sched_step_init(&t);
        t.recv_peer = (c + root) % n;
        t.recv_dst = s->scratch + (size_t)m * b;
        t.recv_bytes = (size_t)csize * b;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
    }
    if (v == 0) {
        s->finish = gather_unrotate;
        return RCOLL_OK;
    }
    coll_sched_step_init(&t);
    t.send_peer = (v - lowbit + root) % n;
    t.send_buf = buf;
    t.send_bytes = (size_t)size * b;
    t.send_dep = last;
    t.send_dep_all = last >= 0 ? 2 : 0;
    return coll_sched_add(s, &t);
}

/* ceil(log2 n) rounds; the blocks also pass through the inner nodes'
 * scratch (about log2(n) / 2 copies each). The binomial scatter costs the
 * same. */
double coll_gather_binomial_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    (void)c;
    int n = m->n;
    return m->L * m->a + (n - 1) * m->S / m->b +
           (n - 1) * m->S * m->L / 2 / m->g;
}
