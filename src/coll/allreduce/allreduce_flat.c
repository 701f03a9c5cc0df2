/* Flat all-reduce for small messages: every rank sends its input to every
 * other rank and receives all of theirs, then reduces all n inputs locally
 * in rank order (so every rank computes the same bits). One round instead
 * of log2(n): a rank finishes as soon as every other rank has posted, not
 * after a chain of partners has each been scheduled in turn - what costs
 * most when ranks outnumber cores. It moves (n - 1) times the data, so the
 * tuner keeps it to small messages. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

static void flat_finish(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    /* scratch holds everyone's input at rank * bytes; ours too */
    const char *x0 = s->scratch;
    if (!bytes)
        return;
    (void)r;
    s->md->copy(out, x0, bytes);
    for (int p = 1; p < n; p++)
        s->reduce(out, out, s->scratch + (size_t)p * bytes, s->count);
    if (s->op == RCOLL_AVG)
        s->md->reduce_avg_scale(s->dt, out, out, s->count, n);
}

rcoll_status_t coll_allreduce_flat(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    coll_step_t t;
    rcoll_status_t st;

    if (n == 1) {
        coll_copy_in(s);
        return RCOLL_OK;
    }
    if (bytes && !(s->scratch = malloc(bytes * (size_t)n)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "allreduce: no memory "
                                "for %zu scratch bytes", bytes * (size_t)n);
    if (bytes) /* a copy: in place, recvbuf is written by the finish */
        s->md->copy(s->scratch + (size_t)r * bytes, s->sendbuf, bytes);
    /* peers in the order r+1, r+2, ...: every rank starts with a different
     * partner */
    for (int i = 1; i < n; i++) {
        int to = (r + i) % n, from = (r - i + n) % n;
        coll_sched_step_init(&t);
        t.send_peer = to;
        t.send_buf = s->scratch + (size_t)r * bytes;
        t.send_bytes = bytes;
        t.send_copy = 1;
        t.recv_peer = from;
        t.recv_dst = s->scratch + (size_t)from * bytes;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    s->finish = flat_finish;
    return RCOLL_OK;
}

/* One dependent round; the other n - 2 messages are only posted; n - 1
 * inputs moved and reduced. Over a network transport with more ranks than
 * cores, each of the n - 1 messages also needs its sender and then the
 * receiver to get a core for a system call (TCP): each costs the scaled
 * alpha, so the tuner does not choose flat there (recursive doubling is
 * 2-3x faster at 8-16 ranks on 2 cores). Over shared memory a sender
 * writes into the receiver's ring on its own: there flat stays ahead. */
double coll_allreduce_flat_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    int n = m->n;
    int net = e->link_name && strcmp(e->link_name, "shm") != 0;
    return m->a + (n - 2) * (net ? m->a : m->a_raw) +
           (n - 1) *
               (coll_tune_nch(m, m->S, *c) > 1 ? coll_tune_nch(m, m->S, *c) - 1
                                               : 0) *
               m->a +
           (n - 1) * (m->S / coll_tune_at(m, m->loc->allq).b + m->S / m->g);
}
