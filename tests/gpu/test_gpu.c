/* GPU tests that need more than test_coll -g (tests/gpu/run.sh runs all):
 *   kernels    every datatype x op (and AVG's last step) of the CUDA
 *              reduction kernels against tests/ref.h's reference (not
 *              the library's CPU kernels), bit for bit, on full-range
 *              integers and full-precision floats,
 *              at several counts and at aligned and unaligned addresses;
 *   bandwidth  dst = a + b over 256 MiB buffers (float32, bfloat16,
 *              float16) against the device's own copy bandwidth
 *              (cuMemcpyDtoD): passes at >= 80 %;
 *   stream     (under rcoll-run) a kernel writes the input on a stream just
 *              before rcoll_allreduce on that stream, another reads the
 *              output right after it: the result is exact;
 *   contexts   reductions that alternate between two contexts of one
 *              device load the kernels' module once per context (not at
 *              every switch), stay bit-exact, and a context destroyed and
 *              created again still reduces;
 *   errors     (under rcoll-run) a GPU sendbuf with a host recvbuf (and the
 *              reverse) is RCOLL_ERR_INVALID_ARGUMENT naming both, a GPU
 *              buffer in a non-blocking call RCOLL_ERR_NOT_SUPPORTED, and
 *              the communicator still works after them.
 * Without a GPU (or in a build without CUDA) each mode prints why and
 * exits 77 (skipped). usage: test_gpu kernels|bandwidth|stream|errors|
 * contexts */
#include "cudrv.h"
#include "cuda/rcuda.h"
#include "../ref.h"
#include <rcoll.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef RCOLL_CUDA_KERNELS
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the inputs of rank `r` (0 or 1): full-range integers (the high bit of
 * unsigned types set, the extremes) and full-precision floats, from
 * tests/ref.h, which also writes the reference: nothing here comes from
 * the library's own CPU kernels */
static void fill(void *buf, size_t n, rcoll_datatype_t dt, rcoll_op_t op,
                 int r)
{
    if (ref_is_int(dt))
        ref_fill_wide(buf, n, 0, dt, op, r, 31);
    else
        ref_fp_fill(buf, n, 0, dt, op, r, 31);
}

static int kernels(void)
{
    const size_t counts[] = {1, 7, 1023, 65536 + 5, 1 << 20};
    int bad = 0, checks = 0;
    for (int dt = 0; dt < RCOLL_DATATYPE_COUNT; dt++) {
        size_t s = rcoll_datatype_size((rcoll_datatype_t)dt);
        for (int op = 0; op < RCOLL_OP_COUNT; op++) {
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                for (int off = 0; off < 2; off++) {
                    size_t n = counts[ci], bytes = (n + 1) * s;
                    char *a = malloc(bytes), *b = malloc(bytes),
                         *want = malloc(bytes), *got = malloc(bytes);
                    fill(a, n + 1, (rcoll_datatype_t)dt, (rcoll_op_t)op, 0);
                    fill(b, n + 1, (rcoll_datatype_t)dt, (rcoll_op_t)op, 1);
                    char *da = gpu_alloc(bytes), *db = gpu_alloc(bytes),
                         *dd = gpu_alloc(bytes);
                    gpu_put(da, a, bytes);
                    gpu_put(db, b, bytes);
                    size_t o = (size_t)off * s;
                    /* (AVG's last step divides by 3 ranks) */
                    ref_pair(want + o, a + o, b + o, n, (rcoll_datatype_t)dt,
                             (rcoll_op_t)op, 3);
                    rcoll_status_t st = rcoll_cuda_reduce(
                        (rcoll_datatype_t)dt, (rcoll_op_t)op, dd + o, da + o,
                        db + o, n, 3, NULL);
                    GPU_CHECK(gd.CtxSynchronize());
                    gpu_get(got, dd, bytes);
                    checks++;
                    if (st != RCOLL_OK || memcmp(got + o, want + o, n * s)) {
                        size_t i = 0;
                        while (i < n && !memcmp(got + o + i * s, want + o + i * s, s))
                            i++;
                        printf("FAIL kernel %s %s n=%zu offset %d: %s, first "
                               "difference at element %zu\n",
                               rcoll_datatype_name((rcoll_datatype_t)dt),
                               rcoll_op_name((rcoll_op_t)op), n, off,
                               st == RCOLL_OK ? "differs" : rcoll_last_error(), i);
                        bad++;
                    }
                    gpu_free(da); gpu_free(db); gpu_free(dd);
                    free(a); free(b); free(want); free(got);
                }
            }
        }
    }
    printf("kernels: %d checks, %d failures\n", checks, bad);
    return bad ? 1 : 0;
}

static int bandwidth(void)
{
    const size_t bytes = (size_t)256 << 20;
    const int iters = 20;
    char *a = gpu_alloc(bytes), *b = gpu_alloc(bytes), *d = gpu_alloc(bytes);
    GPU_CHECK(gd.MemsetD8((CUdeviceptr)(uintptr_t)a, 1, bytes));
    GPU_CHECK(gd.MemsetD8((CUdeviceptr)(uintptr_t)b, 1, bytes));
    GPU_CHECK(gd.MemcpyDtoD((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)a, bytes));
    GPU_CHECK(gd.CtxSynchronize());
    double t0 = now();
    for (int i = 0; i < iters; i++)
        GPU_CHECK(gd.MemcpyDtoD((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)a, bytes));
    GPU_CHECK(gd.CtxSynchronize());
    double copy = 2.0 * bytes * iters / (now() - t0) / 1e9; /* read + write */
    printf("device copy (cuMemcpyDtoD): %.0f GB/s\n", copy);
    const rcoll_datatype_t dts[] = {RCOLL_FLOAT32, RCOLL_BFLOAT16, RCOLL_FLOAT16};
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        size_t n = bytes / rcoll_datatype_size(dts[k]);
        rcoll_cuda_reduce(dts[k], RCOLL_SUM, d, a, b, n, 1, NULL); /* warm up */
        GPU_CHECK(gd.CtxSynchronize());
        t0 = now();
        for (int i = 0; i < iters; i++)
            if (rcoll_cuda_reduce(dts[k], RCOLL_SUM, d, a, b, n, 1, NULL) != RCOLL_OK) {
                printf("FAIL launch: %s\n", rcoll_last_error());
                return 1;
            }
        GPU_CHECK(gd.CtxSynchronize());
        double bw = 3.0 * bytes * iters / (now() - t0) / 1e9; /* 2 reads, 1 write */
        int ok = bw >= 0.8 * copy;
        printf("%s sum, 256 MiB: %.0f GB/s = %.0f %% of the copy bandwidth %s\n",
               rcoll_datatype_name(dts[k]), bw, 100 * bw / copy,
               ok ? "(>= 80 %: ok)" : "(FAIL: below 80 %)");
        bad += !ok;
    }
    gpu_free(a); gpu_free(b); gpu_free(d);
    return bad ? 1 : 0;
}

static int stream(void)
{
    rcoll_comm_t comm;
    rcoll_status_t st = rcoll_comm_init_env(&comm);
    if (st != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    int rank, n;
    rcoll_comm_rank(comm, &rank);
    rcoll_comm_size(comm, &n);
    const size_t cnt = (size_t)8 << 20; /* 32 MiB of float32 */
    float *h = malloc(cnt * sizeof(float));
    for (size_t i = 0; i < cnt; i++)
        h[i] = (float)(i % 1000) + (float)rank;
    char *x = gpu_alloc(cnt * 4), *y = gpu_alloc(cnt * 4), *in = gpu_alloc(cnt * 4),
         *out = gpu_alloc(cnt * 4), *z = gpu_alloc(cnt * 4);
    gpu_put(x, h, cnt * 4);
    gpu_put(y, h, cnt * 4);
    GPU_CHECK(gd.MemsetD8((CUdeviceptr)(uintptr_t)in, 0, cnt * 4));
    CUstream s;
    GPU_CHECK(gd.StreamCreate(&s, 0));
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        /* in = x + y just before the call, z = out + out just after it,
         * all on stream s, with no synchronization by the test */
        rcoll_cuda_reduce(RCOLL_FLOAT32, RCOLL_SUM, in, x, y, cnt, 1, s);
        st = rcoll_allreduce(in, out, cnt, RCOLL_FLOAT32, RCOLL_SUM, comm, s);
        if (st != RCOLL_OK) {
            printf("FAIL rcoll_allreduce: %s\n", rcoll_last_error());
            bad = 1;
            break;
        }
        rcoll_cuda_reduce(RCOLL_FLOAT32, RCOLL_SUM, z, out, out, cnt, 1, s);
        GPU_CHECK(gd.StreamSynchronize(s));
        gpu_get(h, z, cnt * 4);
        size_t wrong = 0;
        for (size_t i = 0; i < cnt; i++) {
            /* sum over ranks of 2 (i % 1000 + r), doubled */
            double want = 2.0 * (2.0 * (double)(i % 1000) * n + (double)n * (n - 1));
            wrong += h[i] != (float)want;
        }
        printf("rank %d round %d: %zu of %zu elements wrong\n", rank, round, wrong, cnt);
        bad |= wrong != 0;
    }
    rcoll_comm_destroy(comm);
    return bad;
}

static int errors(void)
{
    rcoll_comm_t comm;
    if (rcoll_comm_init_env(&comm) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    int bad = 0;
    float host[16] = {0};
    char *dev = gpu_alloc(sizeof(host));
    rcoll_status_t st = rcoll_allreduce(dev, host, 16, RCOLL_FLOAT32,
                                        RCOLL_SUM, comm, NULL);
    printf("GPU sendbuf, host recvbuf: %s: %s\n", rcoll_status_string(st),
           rcoll_last_error());
    bad |= st != RCOLL_ERR_INVALID_ARGUMENT ||
           !strstr(rcoll_last_error(), "sendbuf is GPU memory and recvbuf is host");
    st = rcoll_allreduce(host, dev, 16, RCOLL_FLOAT32, RCOLL_SUM, comm, NULL);
    printf("host sendbuf, GPU recvbuf: %s: %s\n", rcoll_status_string(st),
           rcoll_last_error());
    bad |= st != RCOLL_ERR_INVALID_ARGUMENT;
    rcoll_request_t req;
    st = rcoll_iallreduce(dev, dev, 16, RCOLL_FLOAT32, RCOLL_SUM, comm, NULL, &req);
    printf("non-blocking with GPU buffers: %s: %s\n", rcoll_status_string(st),
           rcoll_last_error());
    bad |= st != RCOLL_ERR_NOT_SUPPORTED;
    /* still usable: a GPU all-reduce of ones gives n */
    int n;
    rcoll_comm_size(comm, &n);
    for (int i = 0; i < 16; i++)
        host[i] = 1;
    gpu_put(dev, host, sizeof(host));
    st = rcoll_allreduce(dev, dev, 16, RCOLL_FLOAT32, RCOLL_SUM, comm, NULL);
    gpu_get(host, dev, sizeof(host));
    bad |= st != RCOLL_OK || host[0] != (float)n || host[15] != (float)n;
    printf("then an in-place GPU all-reduce: %s, %g (want %d)\n",
           rcoll_status_string(st), host[0], n);
    gpu_free(dev);
    rcoll_comm_destroy(comm);
    return bad;
}
#endif

#ifdef RCOLL_CUDA_KERNELS
/* dst = a + b (int32) in the current context, checked on the host */
static int ctx_reduce_once(int n, int seed)
{
    int32_t *ha = malloc(sizeof(int32_t) * (size_t)n),
            *hb = malloc(sizeof(int32_t) * (size_t)n),
            *hd = malloc(sizeof(int32_t) * (size_t)n);
    void *a = gpu_alloc(sizeof(int32_t) * (size_t)n),
         *b = gpu_alloc(sizeof(int32_t) * (size_t)n),
         *d = gpu_alloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        ha[i] = seed * 1000 + i;
        hb[i] = -i * 3;
    }
    gpu_put(a, ha, sizeof(int32_t) * (size_t)n);
    gpu_put(b, hb, sizeof(int32_t) * (size_t)n);
    int bad = rcoll_cuda_reduce(RCOLL_INT32, RCOLL_SUM, d, a, b, (size_t)n, 1,
                                NULL) != RCOLL_OK;
    if (bad)
        printf("FAIL: reduce: %s\n", rcoll_last_error());
    GPU_CHECK(gd.CtxSynchronize());
    gpu_get(hd, d, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n && !bad; i++)
        if (hd[i] != ha[i] + hb[i]) {
            printf("FAIL: element %d: %d, expected %d\n", i, hd[i],
                   ha[i] + hb[i]);
            bad = 1;
        }
    gpu_free(a);
    gpu_free(b);
    gpu_free(d);
    free(ha);
    free(hb);
    free(hd);
    return bad;
}

static int contexts(void)
{
    CUdevice dev;
    CUcontext c[2];
    GPU_CHECK(gd.CtxGetDevice(&dev));
    GPU_CHECK(gd.CtxCreate(&c[0], 0, dev));
    GPU_CHECK(gd.CtxCreate(&c[1], 0, dev));
    unsigned long before = rcoll_cuda_module_loads();
    int bad = 0;
    for (int i = 0; i < 200 && !bad; i++) {
        GPU_CHECK(gd.CtxSetCurrent(c[i % 2]));
        bad |= ctx_reduce_once(4097, i);
    }
    unsigned long loads = rcoll_cuda_module_loads() - before;
    printf("200 reductions alternating between 2 contexts: %lu module "
           "loads\n", loads);
    if (loads != 2) {
        printf("FAIL: expected 2 loads (one per context)\n");
        bad = 1;
    }
    /* a context destroyed and another created (its handle may be reused):
     * the stale entry must not break the reduction */
    GPU_CHECK(gd.CtxSetCurrent(c[1]));
    GPU_CHECK(gd.CtxDestroy(c[0]));
    GPU_CHECK(gd.CtxCreate(&c[0], 0, dev));
    GPU_CHECK(gd.CtxSetCurrent(c[0]));
    bad |= ctx_reduce_once(1000, 7);
    GPU_CHECK(gd.CtxDestroy(c[0]));
    GPU_CHECK(gd.CtxDestroy(c[1]));
    printf("%s: contexts\n", bad ? "FAIL" : "ok");
    return bad;
}
#endif

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "kernels";
#ifndef RCOLL_CUDA_KERNELS
    printf("SKIP: %s: this rcoll was built without CUDA (no nvcc)\n", mode);
    return 77;
#else
    const char *r = getenv("RCOLL_RANK");
    char why[256];
    if (gpu_init(r ? atoi(r) : 0, why, sizeof(why)) != 0) {
        printf("SKIP: %s: %s\n", mode, why);
        return 77;
    }
    if (!rcoll_cuda_available()) {
        printf("FAIL: the test sees a GPU but librcoll does not: %s\n",
               rcoll_cuda_why());
        return 1;
    }
    if (!strcmp(mode, "kernels"))
        return kernels();
    if (!strcmp(mode, "bandwidth"))
        return bandwidth();
    if (!strcmp(mode, "stream"))
        return stream();
    if (!strcmp(mode, "errors"))
        return errors();
    if (!strcmp(mode, "contexts"))
        return contexts();
    fprintf(stderr, "usage: test_gpu kernels|bandwidth|stream|errors|"
            "contexts\n");
    return 2;
#endif
}
