/* Dissemination barrier: in round k rank r signals r + 2^k and waits for
 * r - 2^k; after ceil(log2 n) rounds every rank has heard, transitively,
 * from every other. Works for any n. */
#include "coll/sched.h"

rcoll_status_t coll_barrier_dissemination(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    rcoll_status_t st;
    for (int d = 1, k = 0; d < n; d <<= 1, k++) {
        coll_step_t t;
        coll_sched_step_init(&t);
        t.send_peer = (r + d) % n;
        t.send_bytes = 0;
        t.send_dep = k - 1;
        t.recv_peer = (r - d + n) % n;
        t.recv_bytes = 0;
        t.recv_mode = RECV_DISCARD;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}
