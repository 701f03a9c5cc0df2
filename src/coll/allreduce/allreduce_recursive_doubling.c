/* Recursive-doubling all-reduce (small messages: log2(n) steps instead of
 * the ring's 2(n-1)). With p the largest power of two <= n, the n - p
 * "extra" ranks first hand their data to rank r - p and get the result back
 * at the end; among the p others, step k exchanges the whole partial with
 * r ^ 2^k and reduces. Every rank combines in the same tree, so results are
 * identical on all ranks.
 *
 * Each step reduces into a fresh buffer (scratch, the last one recvbuf): a
 * step's incoming data may arrive before our own send of that step has left
 * the buffer it reads, so no buffer that a send reads is ever written. The
 * input is first copied into scratch, which also makes in-place safe. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

rcoll_status_t coll_allreduce_rd(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, p = 1, logp = 0;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    coll_step_t t;
    rcoll_status_t st;

    if (n == 1) {
        coll_copy_in(s);
        return RCOLL_OK;
    }
    while (p * 2 <= n) {
        p *= 2;
        logp++;
    }
    if (r >= p) { /* extra rank: hand over, get the result back */
        coll_sched_step_init(&t);
        t.send_peer = r - p;
        t.send_buf = s->sendbuf;
        t.send_bytes = bytes;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        coll_sched_step_init(&t);
        t.recv_peer = r - p;
        t.recv_dst = s->recvbuf;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        return coll_sched_add(s, &t);
    }
    /* buffers: buf[0] = our input (+ an extra rank's), buf[k + 1] = after
     * step k, buf[logp] = recvbuf */
    int extra = r < n - p;
    /* [input][input + extra rank's, if any][after steps 0 .. logp-2] */
    size_t nbuf = 1 + (size_t)(extra ? 1 : 0) + (size_t)(logp - 1);
    if (bytes && !(s->scratch = malloc(bytes * nbuf)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                "allreduce: no memory for %zu scratch bytes",
                                bytes * nbuf);
    char *in = s->scratch;
    if (bytes)
        s->md->copy(in, s->sendbuf, bytes);
    int prev = -1; /* step whose receive produced `in` */
    if (extra) {
        coll_sched_step_init(&t);
        t.recv_peer = r + p;
        t.recv_dst = s->scratch + bytes;
        t.recv_local = in;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        in = s->scratch + bytes;
        prev = s->nsteps - 1;
    }
    for (int k = 0; k < logp; k++) {
        char *out = k == logp - 1 ? (char *)s->recvbuf
                                  : s->scratch + bytes * (size_t)(k + 1 + extra);
        coll_sched_step_init(&t);
        t.send_peer = r ^ (1 << k);
        t.send_buf = in;
        t.send_bytes = bytes;
        t.send_dep = prev;
        t.recv_peer = r ^ (1 << k);
        t.recv_dst = out;
        t.recv_local = in;
        t.recv_bytes = bytes;
        t.recv_mode = (k == logp - 1 && s->op == RCOLL_AVG) ? RECV_REDUCE_AVG
                                                            : RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        in = out;
        prev = s->nsteps - 1;
    }
    if (extra) { /* the result back to our extra rank */
        coll_sched_step_init(&t);
        t.send_peer = r + p;
        t.send_buf = s->recvbuf;
        t.send_bytes = bytes;
        t.send_dep = prev;
        t.send_copy = 1;
        return coll_sched_add(s, &t);
    }
    return RCOLL_OK;
}

/* log2 p exchanges of the whole buffer, reduced; ranks past p fold in
 * before and get the result after */
double coll_allreduce_rd_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    double t = 0;
    for (int k = 0; k < m->Lp; k++) {
        coll_tune_model_t x = coll_tune_at(m, m->loc->xq[k]);
        t += coll_tune_step(&x, m->S, *c, 1);
    }
    coll_tune_model_t x = coll_tune_at(m, m->loc->xq[m->Lp]);
    return t + m->extra * 2 * coll_tune_step(&x, m->S, *c, 0);
}
