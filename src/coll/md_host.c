/* The host memory domain: copies and reductions of CPU memory (the
 * vectorized kernels of src/reduce). */
#include "sched.h"
#include <string.h>

static void host_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

const coll_md_t coll_md_host = {
    .name = "host",
    .copy = host_copy,
    .reduce_get = rcoll_reduce_get,
    .reduce_avg_final = rcoll_reduce_avg_final,
    .reduce_avg_scale = rcoll_reduce_avg_scale,
};
