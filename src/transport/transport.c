/* The one place transports are registered, in order of preference: each
 * pair of ranks uses the first transport both can use that reaches. */
#include "transport.h"
#include "util/params.h"
#include "util/util.h"

const rcoll_tl_ops_t *const rcoll_transports[] = {
    &rcoll_tl_shm_ops, /* first: preferred where it reaches */
#if HAVE_VERBS && HAVE_RDMACM
    &rcoll_tl_ib_ops,
#endif
    &rcoll_tl_tcp_ops,
    NULL,
};

/* The communicator's chunk when a rank has `peers` shared-memory peers:
 * RCOLL_CHUNK_SIZE while rcoll_shm_plan keeps within RCOLL_SHM_BUDGET
 * (full rings, or small rings and a pool), else the largest multiple of
 * 4 KiB (not below 4 KiB) whose full rings fit: a pool only ever keeps
 * the chunk asked for; *over: the budget is missed even at 4 KiB. */
size_t rcoll_tl_chunk_fit(size_t chunk, int nslots, int peers, size_t region,
                          int *over)
{
    const size_t step = 4096;
    rcoll_shm_plan_t pl;
    *over = 0;
    if (!rcoll_config.shm_budget || peers < 1 ||
        rcoll_shm_plan(chunk, nslots, peers, 1, region, &pl))
        return chunk;
    size_t lo = step, hi = chunk / step * step; /* hi may fit */
    if (chunk <= step || !rcoll_shm_plan(lo, nslots, peers, 0, region, &pl)) {
        *over = 1;
        return RCOLL_MIN(chunk, lo);
    }
    while (hi - lo > step) { /* lo fits, hi may not */
        size_t mid = (lo + hi) / 2 / step * step;
        if (rcoll_shm_plan(mid, nslots, peers, 0, region, &pl))
            lo = mid;
        else
            hi = mid;
    }
    return rcoll_shm_plan(hi, nslots, peers, 0, region, &pl) ? hi : lo;
}
