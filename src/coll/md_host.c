/* The host memory domain: copies and reductions of CPU memory (the
 * vectorized kernels of src/reduce). */
#include "sched.h"
#include <stdlib.h>
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

/* ---- coll_md_host_deferred: the host domain, asynchronous ----
 * Receive-path operations wait in a FIFO and each runs only when a test
 * finds it at the head, one per test: they complete late and in order, as
 * a GPU stream's would, so that a slot released before its copy ran, or a
 * chunk forwarded before it was reduced, shows as wrong bytes. */
typedef struct {
    coll_md_op_t *q;
    size_t cap, head, count;
    uint64_t posted, done;
} deferred_t;

static void deferred_run(const coll_md_op_t *op)
{
    size_t count = op->bytes / rcoll_datatype_size(op->dt);
    if (op->kind == COLL_MD_COPY)
        memcpy(op->dst, op->src, op->bytes);
    else if (op->kind == COLL_MD_REDUCE)
        op->fn(op->dst, op->local, op->src, count);
    else
        rcoll_reduce_avg_final(op->dt, op->dst, op->local, op->src, count,
                               op->nranks);
}

static void *deferred_create(void)
{
    return calloc(1, sizeof(deferred_t));
}

static void deferred_destroy(void *ctx)
{
    deferred_t *d = ctx;
    if (d)
        free(d->q);
    free(d);
}

static void deferred_one(deferred_t *d)
{
    deferred_run(&d->q[d->head]);
    d->head = (d->head + 1) % d->cap;
    d->count--;
    d->done++;
}

static void deferred_quiesce(void *ctx)
{
    deferred_t *d = ctx;
    while (d->count)
        deferred_one(d);
}

static uint64_t deferred_post(void *ctx, const coll_md_op_t *op)
{
    deferred_t *d = ctx;
    if (d->count == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 16;
        coll_md_op_t *q = malloc(cap * sizeof(*q));
        if (!q) { /* no room: everything before it, then it, now */
            deferred_quiesce(d);
            deferred_run(op);
            return 0;
        }
        for (size_t k = 0; k < d->count; k++)
            q[k] = d->q[(d->head + k) % d->cap];
        free(d->q);
        d->q = q;
        d->cap = cap;
        d->head = 0;
    }
    d->q[(d->head + d->count++) % d->cap] = *op;
    return ++d->posted;
}

static int deferred_test(void *ctx, uint64_t ticket)
{
    deferred_t *d = ctx;
    if (d->done < ticket && d->count)
        deferred_one(d);
    return d->done >= ticket;
}

const coll_md_t coll_md_host_deferred = {
    .name = "host-deferred",
    .copy = host_copy,
    .reduce_get = rcoll_reduce_get,
    .reduce_avg_final = rcoll_reduce_avg_final,
    .reduce_avg_scale = rcoll_reduce_avg_scale,
    .ctx_create = deferred_create,
    .ctx_destroy = deferred_destroy,
    .post = deferred_post,
    .test = deferred_test,
    .quiesce = deferred_quiesce,
};
