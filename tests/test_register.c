/* rcoll_comm_register: collectives whose buffers are registered (sends
 * then skip the staging copy over RDMA) give bit-exact results, across
 * sizes that span inline, staged and zero-copy chunks; registrations may
 * overlap and be undone in any order; bad arguments are errors. Run with
 * rcoll-run (any transport: without RDMA registering is bookkeeping only).
 * Values are small integers in float, so sums are exact in any order. */
#include "check.h"
#include <rcoll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1, nranks;
#undef CHECK_RANK
#define CHECK_RANK rank

#define ST(call)                                                             \
    do {                                                                     \
        rcoll_status_t _s = (call);                                          \
        CHECK(_s == RCOLL_OK, "%s: %s", #call, rcoll_last_error());          \
    } while (0)

static float val(int r, size_t i) { return (float)((r + 1) * 3 + (int)(i % 251)); }

int main(void)
{
    rcoll_comm_t c;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &nranks);
    static const size_t counts[] = {1, 33, 4096, 70000, 300000};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k];
        float *src = malloc(n * sizeof(float));
        float *dst = malloc(n * nranks * sizeof(float));
        void *hs, *hd, *hsub;
        for (size_t i = 0; i < n; i++)
            src[i] = val(rank, i);
        ST(rcoll_comm_register(c, src, n * sizeof(float), &hs));
        ST(rcoll_comm_register(c, dst, n * nranks * sizeof(float), &hd));
        /* an overlapping registration of part of dst */
        ST(rcoll_comm_register(c, dst, n * sizeof(float), &hsub));
        ST(rcoll_allreduce(src, dst, n, RCOLL_FLOAT32, RCOLL_SUM, c, NULL));
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < nranks; r++)
                want += val(r, i);
            if (dst[i] != want) {
                CHECK(0, "allreduce n=%zu [%zu] = %g, want %g", n, i, dst[i],
                      want);
                break;
            }
        }
        /* in place from registered memory */
        memcpy(dst, src, n * sizeof(float));
        ST(rcoll_allreduce(dst, dst, n, RCOLL_FLOAT32, RCOLL_MAX, c, NULL));
        for (size_t i = 0; i < n; i++)
            if (dst[i] != val(nranks - 1, i)) {
                CHECK(0, "allreduce max n=%zu [%zu] = %g", n, i, dst[i]);
                break;
            }
        ST(rcoll_comm_deregister(c, hsub)); /* out of order */
        ST(rcoll_allgather(src, dst, n, RCOLL_FLOAT32, c, NULL));
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < n; i++)
                if (dst[(size_t)r * n + i] != val(r, i)) {
                    CHECK(0, "allgather n=%zu block %d [%zu]", n, r, i);
                    r = nranks;
                    break;
                }
        int root = nranks > 1 ? 1 : 0;
        if (rank == root)
            memcpy(dst, src, n * sizeof(float));
        ST(rcoll_broadcast(dst, dst, n, RCOLL_FLOAT32, root, c, NULL));
        for (size_t i = 0; i < n; i++)
            if (dst[i] != val(root, i)) {
                CHECK(0, "broadcast n=%zu [%zu] = %g", n, i, dst[i]);
                break;
            }
        ST(rcoll_comm_deregister(c, hs));
        ST(rcoll_comm_deregister(c, hd));
        free(src);
        free(dst);
    }
    /* bad arguments: errors, not crashes */
    void *h;
    int x;
    CHECK(rcoll_comm_register(c, NULL, 4, &h) == RCOLL_ERR_INVALID_ARGUMENT,
          "register NULL buffer");
    CHECK(rcoll_comm_register(c, &x, 0, &h) == RCOLL_ERR_INVALID_ARGUMENT,
          "register 0 bytes");
    CHECK(rcoll_comm_register(NULL, &x, 4, &h) == RCOLL_ERR_INVALID_ARGUMENT,
          "register on NULL comm");
    CHECK(rcoll_comm_deregister(c, NULL) == RCOLL_ERR_INVALID_ARGUMENT,
          "deregister NULL");
    ST(rcoll_comm_register(c, &x, sizeof(x), &h));
    ST(rcoll_comm_deregister(c, h));
    CHECK(rcoll_comm_deregister(c, &x) == RCOLL_ERR_INVALID_ARGUMENT,
          "deregister a pointer that is no handle");
    /* one left registered: destroy undoes it */
    ST(rcoll_comm_register(c, &x, sizeof(x), &h));
    ST(rcoll_comm_destroy(c));
    printf("test_register: rank %d of %d: %d checks, %d failures\n", rank,
           nranks, checks, failures);
    return failures ? 1 : 0;
}
