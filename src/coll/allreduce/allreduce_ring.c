/* Ring all-reduce = ring reduce-scatter + ring all-gather, pipelined by
 * chunks. The ring follows the communicator's ring order (host-contiguous
 * by default): the rank at position r sends block (r - s) mod n at step s
 * to position r + 1 and receives block (r - s - 1) mod n from r - 1, reducing in steps 0..n-2 (AVG divides in the last
 * of them) and copying in steps n-1..2n-3. Each send waits only for the same
 * chunk of the previous step's receive, so chunks flow around the ring
 * while later ones are still arriving. Out of place, the local operand is
 * always read from sendbuf and results land in recvbuf. */
#include "coll/tune.h"
#include <string.h>

rcoll_status_t coll_allreduce_ring(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = coll_ring_pos(e, e->rank);
    size_t dts = rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    const char *in = s->sendbuf;
    rcoll_status_t st;

    if (n == 1) {
        coll_copy_in(s);
        return RCOLL_OK;
    }
    for (int step = 0; step < 2 * (n - 1); step++) {
        coll_step_t t;
        size_t soff, slen, roff, rlen;
        int sb = ((r - step) % n + n) % n, rb = ((r - step - 1) % n + n) % n;
        coll_block(s->count, n, sb, &soff, &slen);
        coll_block(s->count, n, rb, &roff, &rlen);
        coll_sched_step_init(&t);
        t.send_peer = coll_ring_rank(e, r + 1);
        /* step 0 sends our own contribution; later steps what we reduced */
        t.send_buf = (step == 0 ? in : out) + soff * dts;
        t.send_bytes = slen * dts;
        t.send_dep = step - 1;
        t.send_copy = step >= n - 1; /* the all-gather half */
        t.recv_peer = coll_ring_rank(e, r - 1);
        t.recv_dst = out + roff * dts;
        t.recv_local = in + roff * dts;
        t.recv_bytes = rlen * dts;
        if (step < n - 2)
            t.recv_mode = RECV_REDUCE;
        else if (step == n - 2)
            t.recv_mode = s->op == RCOLL_AVG ? RECV_REDUCE_AVG : RECV_REDUCE;
        else
            t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}

/* n - 1 streaming reduce-scatter steps and n - 1 all-gather steps of a
 * block each */
double coll_allreduce_ring_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    double blk = m->S / m->n;
    coll_tune_model_t x = coll_tune_at(m, m->loc->ringq);
    return (m->n - 1) * (coll_tune_step_ovl(&x, blk, *c, 1) +
                         coll_tune_step(&x, blk, *c, 0));
}
