/* Ring all-gather: at step s rank r forwards block (r - s) mod n to r + 1
 * and receives block (r - s - 1) mod n from r - 1, pipelined by chunks. */
#include "coll/sched.h"
#include <string.h>

rcoll_status_t coll_allgather_ring(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    rcoll_status_t st;

    if (bytes && s->sendbuf != out + (size_t)r * bytes)
        memcpy(out + (size_t)r * bytes, s->sendbuf, bytes);
    for (int step = 0; step < n - 1; step++) {
        coll_step_t t;
        int sb = ((r - step) % n + n) % n, rb = ((r - step - 1) % n + n) % n;
        coll_sched_step_init(&t);
        t.send_peer = (r + 1) % n;
        t.send_buf = out + (size_t)sb * bytes;
        t.send_bytes = bytes;
        t.send_dep = step - 1;
        t.recv_peer = (r - 1 + n) % n;
        t.recv_dst = out + (size_t)rb * bytes;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}
