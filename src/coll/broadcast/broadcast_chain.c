/* Pipelined chain broadcast: root -> root+1 -> ... -> root-1. Each rank
 * forwards chunk c as soon as it has received it, so for large messages
 * the time approaches one message transfer plus n-1 chunk latencies. */
#include "coll/sched.h"
#include <string.h>

rcoll_status_t coll_broadcast_chain(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    int pos = (r - s->root + n) % n;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    coll_step_t t;
    rcoll_status_t st;

    if (pos == 0) {
        coll_copy_in(s);
        if (n == 1)
            return RCOLL_OK;
        coll_sched_step_init(&t);
        t.send_peer = (r + 1) % n;
        t.send_buf = s->recvbuf;
        t.send_bytes = bytes;
        return coll_sched_add(s, &t);
    }
    coll_sched_step_init(&t);
    t.recv_peer = (r - 1 + n) % n;
    t.recv_dst = s->recvbuf;
    t.recv_bytes = bytes;
    t.recv_mode = RECV_COPY;
    if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
        return st;
    if (pos == n - 1)
        return RCOLL_OK;
    coll_sched_step_init(&t);
    t.send_peer = (r + 1) % n;
    t.send_buf = s->recvbuf;
    t.send_bytes = bytes;
    t.send_dep = 0;
    return coll_sched_add(s, &t);
}
