/* Direct scatter: the root sends each rank its block straight from the
 * input (large blocks: each byte moves once). */
#include "coll/sched.h"

rcoll_status_t coll_scatter_direct(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    const char *in = s->sendbuf;
    coll_step_t t;
    rcoll_status_t st;
    if (!b)
        return RCOLL_OK;
    if (r != s->root) {
        coll_sched_step_init(&t);
        t.recv_peer = s->root;
        t.recv_dst = s->recvbuf;
        t.recv_bytes = b;
        t.recv_mode = RECV_COPY;
        t.recv_place = 1;
        return coll_sched_add(s, &t);
    }
    if (s->recvbuf != in + (size_t)r * b)
        s->md->copy(s->recvbuf, in + (size_t)r * b, b);
    for (int k = 1; k < n; k++) {
        int p = (r + k) % n;
        coll_sched_step_init(&t);
        t.send_peer = p;
        t.send_buf = in + (size_t)p * b;
        t.send_bytes = b;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}
