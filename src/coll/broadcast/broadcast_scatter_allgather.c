/* Broadcast as scatter + ring all-gather (van de Geijn), for large messages
 * on many ranks: the root sends block i of n to ring position i, then a
 * pipelined ring (in the ring order) circulates the blocks. The root
 * sends the data once (not n - 1 times as with a flat tree), and every
 * link carries about 2 * bytes / n per step instead of the chain's full
 * message through n - 1 hops. */
#include "coll/tune.h"

rcoll_status_t coll_broadcast_scatter_allgather(coll_sched_t *s,
                                                const coll_env_t *e)
{
    /* positions in the ring order (blocks are numbered by position) */
    int n = e->nranks, r = coll_ring_pos(e, e->rank);
    int root = coll_ring_pos(e, s->root);
    size_t dts = rcoll_datatype_size(s->dt);
    char *buf = s->recvbuf;
    coll_step_t t;
    rcoll_status_t st;
    size_t off[2], len[2];

    /* the root sends out of sendbuf and copies it to its recvbuf */
    const char *src = r == root ? (const char *)s->sendbuf : buf;
    if (r == root)
        coll_copy_in(s);
    if (n == 1)
        return RCOLL_OK;
    /* scatter: block b to position b */
    int scatter_step = -1;
    if (r == root) {
        for (int i = 1; i < n; i++) {
            int b = (root + i) % n;
            coll_block(s->count, n, b, &off[0], &len[0]);
            coll_sched_step_init(&t);
            t.send_peer = coll_ring_rank(e, b);
            t.send_buf = src + off[0] * dts;
            t.send_bytes = len[0] * dts;
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
        }
    } else {
        coll_block(s->count, n, r, &off[0], &len[0]);
        coll_sched_step_init(&t);
        t.recv_peer = s->root;
        t.recv_dst = buf + off[0] * dts;
        t.recv_bytes = len[0] * dts;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        scatter_step = s->nsteps - 1;
    }
    /* ring all-gather: step j sends block r - j (received in step j - 1,
     * or scattered to us) to r + 1 and receives block r - j - 1; the root
     * has everything, so nothing is sent to it and it waits for nothing */
    int prev = scatter_step, to_root = (r + 1) % n == root;
    for (int j = 0; j < n - 1; j++) {
        int sb = ((r - j) % n + n) % n, rb = ((r - j - 1) % n + n) % n;
        coll_block(s->count, n, sb, &off[0], &len[0]);
        coll_block(s->count, n, rb, &off[1], &len[1]);
        coll_sched_step_init(&t);
        if (!to_root) {
            t.send_peer = coll_ring_rank(e, r + 1);
            t.send_buf = src + off[0] * dts;
            t.send_bytes = len[0] * dts;
            t.send_dep = r == root ? -1 : prev;
        }
        if (r != root) {
            t.recv_peer = coll_ring_rank(e, r - 1);
            t.recv_dst = buf + off[1] * dts;
            t.recv_bytes = len[1] * dts;
            t.recv_mode = RECV_COPY;
        }
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        prev = s->nsteps - 1;
    }
    return RCOLL_OK;
}

/* The root sends n - 1 blocks, then a ring all-gather of them */
double coll_broadcast_scatter_allgather_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    double blk = m->S / m->n;
    coll_tune_model_t x = coll_tune_at(m, m->loc->ringq);
    return (m->n - 1) * (m->a + blk / m->b) +
           (m->n - 1) * coll_tune_step(&x, blk, *c, 0);
}
