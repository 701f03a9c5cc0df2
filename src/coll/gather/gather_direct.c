/* Direct gather: every rank sends its block straight to the root, which
 * receives them in rank order into place (large blocks: each byte moves
 * once, no staging). */
#include "coll/tune.h"

rcoll_status_t coll_gather_direct(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    coll_step_t t;
    rcoll_status_t st;
    if (!b)
        return RCOLL_OK;
    if (r != s->root) {
        coll_sched_step_init(&t);
        t.send_peer = s->root;
        t.send_buf = s->sendbuf;
        t.send_bytes = b;
        return coll_sched_add(s, &t);
    }
    if (s->sendbuf != out + (size_t)r * b)
        s->md->copy(out + (size_t)r * b, s->sendbuf, b);
    for (int p = 0; p < n; p++) {
        if (p == r)
            continue;
        coll_sched_step_init(&t);
        t.recv_peer = p;
        t.recv_dst = out + (size_t)p * b;
        t.recv_bytes = b;
        t.recv_mode = RECV_COPY;
        t.recv_place = 1; /* block p is only ever p's */
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}

/* The root takes n - 1 messages (the direct scatter's root posts as
 * many: it costs the same) */
double coll_gather_direct_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    (void)c;
    return m->a + (m->n - 2) * m->a_raw + (m->n - 1) * m->S / m->b;
}
