/* Binomial-tree scatter (small blocks), the gather tree run backwards:
 * position v = rank - root (mod n) receives the blocks of its subtree
 * (positions v .. v + size(v) - 1, in position order) from its parent,
 * then passes each child its part, the largest subtree first, and keeps
 * its own block. The root rotates its input into position order first;
 * leaves receive straight into recvbuf. */
#include "coll/sched.h"
#include <stdlib.h>

static void scatter_own_block(coll_sched_t *s, const coll_env_t *e)
{
    size_t b = s->count * rcoll_datatype_size(s->dt);
    (void)e;
    if (s->recvbuf)
        s->md->copy(s->recvbuf, s->scratch, b);
}

rcoll_status_t coll_scatter_binomial(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, root = s->root;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    int v = (r - root + n) % n, lowbit;
    const char *in = s->sendbuf;
    coll_step_t t;
    rcoll_status_t st;
    if (!b)
        return RCOLL_OK;
    if (n == 1) {
        if (s->recvbuf != s->sendbuf)
            s->md->copy(s->recvbuf, s->sendbuf, b);
        return RCOLL_OK;
    }
    int nchild = coll_binomial(v, n, &lowbit);
    int size = lowbit < n - v ? lowbit : n - v;
    if (!nchild) { /* a leaf */
        coll_sched_step_init(&t);
        t.recv_peer = (v - lowbit + root) % n;
        t.recv_dst = s->recvbuf;
        t.recv_bytes = b;
        t.recv_mode = RECV_COPY;
        return coll_sched_add(s, &t);
    }
    if (!(s->scratch = malloc((size_t)size * b)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "scatter: no memory "
                                "for %zu scratch bytes", (size_t)size * b);
    int dep = -1;
    if (v == 0) {
        /* scratch[i] = the block of rank (root + i) % n */
        s->md->copy(s->scratch, in + (size_t)root * b,
                    (size_t)(n - root) * b);
        if (root)
            s->md->copy(s->scratch + (size_t)(n - root) * b, in,
                        (size_t)root * b);
    } else {
        coll_sched_step_init(&t);
        t.recv_peer = (v - lowbit + root) % n;
        t.recv_dst = s->scratch;
        t.recv_bytes = (size_t)size * b;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        dep = 0;
    }
    int top = 1;
    while (top * 2 < lowbit && v + top * 2 < n)
        top <<= 1;
    for (int m = top; m >= 1; m >>= 1) {
        int c = v + m;
        if (c >= n)
            continue;
        int csize = m < n - c ? m : n - c;
        coll_sched_step_init(&t);
        t.send_peer = (c + root) % n;
        t.send_buf = s->scratch + (size_t)m * b;
        t.send_bytes = (size_t)csize * b;
        t.send_dep = dep;
        t.send_dep_all = dep >= 0 ? 1 : 0;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    /* the own block, unless the root's recvbuf is its block in place */
    if (!(v == 0 && s->recvbuf == in + (size_t)root * b))
        s->finish = scatter_own_block;
    return RCOLL_OK;
}
