/* The CUDA driver for the GPU tests, loaded with dlopen like the library
 * does (tests build and run on machines without CUDA; there gpu_init says
 * why and the test skips). Independent of librcoll's own loader. */
#ifndef RCOLL_TEST_CUDRV_H
#define RCOLL_TEST_CUDRV_H
#include "config.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef RCOLL_CUDA_KERNELS
#include <cuda.h>
static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*CtxCreate)(CUcontext *, unsigned, CUdevice);
    CUresult (*CtxDestroy)(CUcontext);
    CUresult (*CtxGetDevice)(CUdevice *);
} gd;

#define GPU_CHECK(call)                                                      \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CUDA_SUCCESS) {                                            \
            fprintf(stderr, "%s:%d: %s: CUDA error %d\n", __FILE__,          \
                    __LINE__, #call, (int)r_);                               \
            exit(2);                                                         \
        }                                                                    \
    } while (0)

/* Loads the driver and makes device `dev % count` current. 0 on success;
 * else why is set and the caller skips. */
static inline int gpu_init(int dev, char *why, size_t len)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        snprintf(why, len, "no CUDA driver (libcuda.so.1): %s", dlerror());
        return -1;
    }
#define GSYM(f, name)                                                        \
    if (!(*(void **)&gd.f = dlsym(h, name))) {                               \
        snprintf(why, len, "libcuda lacks %s", name);                        \
        return -1;                                                           \
    }
    GSYM(Init, "cuInit");
    GSYM(DeviceGetCount, "cuDeviceGetCount");
    GSYM(DeviceGet, "cuDeviceGet");
    GSYM(DeviceGetName, "cuDeviceGetName");
    GSYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    GSYM(CtxSetCurrent, "cuCtxSetCurrent");
    GSYM(CtxSynchronize, "cuCtxSynchronize");
    GSYM(MemAlloc, "cuMemAlloc_v2");
    GSYM(MemFree, "cuMemFree_v2");
    GSYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    GSYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    GSYM(MemcpyDtoD, "cuMemcpyDtoD_v2");
    GSYM(MemsetD8, "cuMemsetD8_v2");
    GSYM(StreamCreate, "cuStreamCreate");
    GSYM(StreamSynchronize, "cuStreamSynchronize");
    GSYM(CtxCreate, "cuCtxCreate_v2");
    GSYM(CtxDestroy, "cuCtxDestroy_v2");
    GSYM(CtxGetDevice, "cuCtxGetDevice");
#undef GSYM
    int count = 0;
    if (gd.Init(0) != CUDA_SUCCESS || gd.DeviceGetCount(&count) != CUDA_SUCCESS ||
        count < 1) {
        snprintf(why, len, "no GPU (cuInit / cuDeviceGetCount)");
        return -1;
    }
    CUdevice d;
    CUcontext ctx;
    GPU_CHECK(gd.DeviceGet(&d, dev % count));
    GPU_CHECK(gd.PrimaryCtxRetain(&ctx, d));
    GPU_CHECK(gd.CtxSetCurrent(ctx));
    return 0;
}

static inline void *gpu_alloc(size_t bytes)
{
    CUdeviceptr p = 0;
    GPU_CHECK(gd.MemAlloc(&p, bytes ? bytes : 1));
    return (void *)(uintptr_t)p;
}
static inline void gpu_free(void *p) { GPU_CHECK(gd.MemFree((CUdeviceptr)(uintptr_t)p)); }
static inline void gpu_put(void *d, const void *h, size_t b)
{
    if (b)
        GPU_CHECK(gd.MemcpyHtoD((CUdeviceptr)(uintptr_t)d, h, b));
}
static inline void gpu_get(void *h, const void *d, size_t b)
{
    if (b)
        GPU_CHECK(gd.MemcpyDtoH(h, (CUdeviceptr)(uintptr_t)d, b));
}
#else
static inline int gpu_init(int dev, char *why, size_t len)
{
    (void)dev;
    snprintf(why, len, "this rcoll was built without CUDA (no nvcc)");
    return -1;
}
static inline void *gpu_alloc(size_t b) { (void)b; abort(); }
static inline void gpu_free(void *p) { (void)p; abort(); }
static inline void gpu_put(void *d, const void *h, size_t b) { (void)d; (void)h; (void)b; abort(); }
static inline void gpu_get(void *h, const void *d, size_t b) { (void)h; (void)d; (void)b; abort(); }
#endif
#endif
