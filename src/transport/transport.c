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
 * RCOLL_CHUNK_SIZE while their receive rings and the shared area fit
 * RCOLL_SHM_BUDGET, else the largest multiple of 4 KiB (not below 4 KiB)
 * that fits; *over: the budget is missed even at 4 KiB. */
size_t rcoll_tl_chunk_fit(size_t chunk, int nslots, int peers, int *over)
{
    const size_t step = 4096;
    size_t budget = rcoll_config.shm_budget, fixed = 4096;
    char what[256];
    *over = 0;
    if (!budget || peers < 1)
        return chunk;
    if (rcoll_config.shm_area)
        fixed += RCOLL_AREA_LEN(rcoll_config.shm_area);
    if (budget <= fixed) {
        *over = 1;
        return RCOLL_MIN(chunk, step);
    }
    /* OVER(c): a ring of c-byte slots passes a peer's share of the budget
     * (a division, so nothing overflows) */
#define OVER(c) (rcoll_tl_shm_ops.peer_bytes((c), nslots, what, sizeof(what)) \
                > (budget - fixed) / (size_t)peers)
    if (!OVER(chunk))
        return chunk;
    size_t lo = step, hi = chunk / step * step; /* hi may fit */
    if (chunk <= step || OVER(lo)) {
        *over = 1;
        return RCOLL_MIN(chunk, lo);
    }
    while (hi - lo > step) { /* lo fits, hi may not */
        size_t mid = (lo + hi) / 2 / step * step;
        if (!OVER(mid))
            lo = mid;
        else
            hi = mid;
    }
    return !OVER(hi) ? hi : lo;
#undef OVER
}
