/* GPU buffers: the CUDA driver loaded at run time, memory types, host
 * staging, and the reduction kernels' launcher. See rcuda.h. */
#include "config.h"
#include "cuda/rcuda.h"
#include "util/params.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef RCOLL_CUDA_KERNELS
#include <cuda.h>

/* the fatbin nvcc made from kernels.cu (kernels_fatbin.c, by bin2c) */
extern const unsigned char rcoll_cuda_fatbin[];

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
} cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[256] = "";

static void load(void)
{
    if (rcoll_config_init() == RCOLL_OK && rcoll_config.cuda == 0) {
        snprintf(why, sizeof(why), "RCOLL_CUDA=0");
        return;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, sizeof(why), "no CUDA driver (dlopen libcuda.so.1: %s)",
                 dlerror());
        return;
    }
#define SYM(field, name)                                                     \
    if (!(*(void **)&cu.field = dlsym(h, name))) {                           \
        snprintf(why, sizeof(why), "the CUDA driver lacks %s", name);        \
        return;                                                              \
    }
    SYM(Init, "cuInit");
    SYM(GetErrorString, "cuGetErrorString");
    SYM(PointerGetAttribute, "cuPointerGetAttribute");
    SYM(CtxPushCurrent, "cuCtxPushCurrent_v2");
    SYM(CtxPopCurrent, "cuCtxPopCurrent_v2");
    SYM(CtxGetCurrent, "cuCtxGetCurrent");
    SYM(StreamSynchronize, "cuStreamSynchronize");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(ModuleLoadData, "cuModuleLoadData");
    SYM(ModuleUnload, "cuModuleUnload");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(LaunchKernel, "cuLaunchKernel");
#undef SYM
    CUresult r = cu.Init(0);
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        cu.GetErrorString(r, &s);
        snprintf(why, sizeof(why), "cuInit: %s (no usable GPU)",
                 s ? s : "unknown error");
        return;
    }
    loaded = 1; /* the handle stays open for the process's life */
}

static rcoll_status_t cu_error(const char *call, CUresult r)
{
    const char *s = NULL;
    if (cu.GetErrorString)
        cu.GetErrorString(r, &s);
    return rcoll__set_error(RCOLL_ERR_SYSTEM, "%s: CUDA error %d (%s)", call,
                            (int)r, s ? s : "unknown");
}

int rcoll_cuda_built(void) { return 1; }

int rcoll_cuda_available(void)
{
    pthread_once(&load_once, load);
    return loaded;
}

const char *rcoll_cuda_why(void)
{
    pthread_once(&load_once, load);
    return why;
}

rcoll_mem_t rcoll_cuda_mem_type(const void *ptr)
{
    if (!ptr || !rcoll_cuda_available())
        return RCOLL_MEM_HOST;
    unsigned int type = 0;
    /* fails (CUDA_ERROR_INVALID_VALUE) for memory CUDA does not know */
    if (cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                               (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
        return RCOLL_MEM_HOST;
    if (type != CU_MEMORYTYPE_DEVICE)
        return RCOLL_MEM_HOST;
    int managed = 0;
    if (cu.PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                               (CUdeviceptr)(uintptr_t)ptr) == CUDA_SUCCESS &&
        managed)
        return RCOLL_MEM_HOST; /* the CPU may touch managed memory */
    return RCOLL_MEM_DEVICE;
}

/* runs with the context that owns devptr current (pushed, then popped) */
static rcoll_status_t push_ctx(const void *devptr, int *pushed)
{
    CUcontext ctx = NULL;
    *pushed = 0;
    CUresult r = cu.PointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
                                        (CUdeviceptr)(uintptr_t)devptr);
    if (r != CUDA_SUCCESS)
        return cu_error("cuPointerGetAttribute(CONTEXT)", r);
    if (ctx && (r = cu.CtxPushCurrent(ctx)) != CUDA_SUCCESS)
        return cu_error("cuCtxPushCurrent", r);
    *pushed = ctx != NULL;
    return RCOLL_OK;
}

static void pop_ctx(int pushed)
{
    CUcontext c;
    if (pushed)
        cu.CtxPopCurrent(&c);
}

rcoll_status_t rcoll_cuda_stream_sync(void *stream, const void *devptr)
{
    int pushed;
    rcoll_status_t st = push_ctx(devptr, &pushed);
    if (st != RCOLL_OK)
        return st;
    CUresult r = cu.StreamSynchronize((CUstream)stream);
    pop_ctx(pushed);
    return r == CUDA_SUCCESS ? RCOLL_OK : cu_error("cuStreamSynchronize", r);
}

rcoll_status_t rcoll_cuda_d2h(void *dst, const void *src, size_t bytes)
{
    int pushed;
    if (!bytes)
        return RCOLL_OK;
    rcoll_status_t st = push_ctx(src, &pushed);
    if (st != RCOLL_OK)
        return st;
    CUresult r = cu.MemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, bytes);
    pop_ctx(pushed);
    return r == CUDA_SUCCESS ? RCOLL_OK : cu_error("cuMemcpyDtoH", r);
}

rcoll_status_t rcoll_cuda_h2d(void *dst, const void *src, size_t bytes)
{
    int pushed;
    if (!bytes)
        return RCOLL_OK;
    rcoll_status_t st = push_ctx(dst, &pushed);
    if (st != RCOLL_OK)
        return st;
    CUresult r = cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, bytes);
    pop_ctx(pushed);
    return r == CUDA_SUCCESS ? RCOLL_OK : cu_error("cuMemcpyHtoD", r);
}

/* ---- kernels: one module per context, loaded once and kept, so that a
 * process that drives several devices (or contexts) alternately finds
 * each one's module here instead of loading the fatbin again on every
 * switch. Past MOD_MAX contexts the oldest entry is unloaded in
 * its context (if that context still exists) and reused. An entry whose
 * context was destroyed and whose handle came back for a new one fails
 * cuModuleGetFunction: it is dropped and loaded again, once. ---- */
#define MOD_MAX 16
static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { CUcontext ctx; CUmodule mod; } mods[MOD_MAX];
static int nmods, mod_next;
static unsigned long mod_loads; /* for tests: fatbin loads so far */

unsigned long rcoll_cuda_module_loads(void)
{
    pthread_mutex_lock(&mod_lock);
    unsigned long n = mod_loads;
    pthread_mutex_unlock(&mod_lock);
    return n;
}

/* The module of ctx (current on this thread), loading it if needed; with
 * `fresh`, any cached one is dropped first. Under mod_lock. */
static CUresult module_of(CUcontext ctx, int fresh, CUmodule *out)
{
    int k;
    for (k = 0; k < nmods; k++)
        if (mods[k].ctx == ctx)
            break;
    if (k < nmods && !fresh) {
        *out = mods[k].mod;
        return CUDA_SUCCESS;
    }
    CUmodule m;
    CUresult r = cu.ModuleLoadData(&m, rcoll_cuda_fatbin);
    if (r != CUDA_SUCCESS)
        return r;
    mod_loads++;
    if (k == nmods) { /* a new context: a free entry, or the oldest */
        if (nmods < MOD_MAX) {
            k = nmods++;
        } else {
            k = mod_next;
            mod_next = (mod_next + 1) % MOD_MAX;
            if (cu.CtxPushCurrent(mods[k].ctx) == CUDA_SUCCESS) {
                cu.ModuleUnload(mods[k].mod);
                CUcontext dummy;
                cu.CtxPopCurrent(&dummy);
            }
        }
    }
    /* (a stale entry of a destroyed context: its module went with it) */
    mods[k].ctx = ctx;
    mods[k].mod = m;
    *out = m;
    return CUDA_SUCCESS;
}

static const char *const type_names[RCOLL_DATATYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64"};
static const char *const op_names[RCOLL_OP_COUNT] = {"sum", "prod", "min",
                                                     "max", "avg"};

rcoll_status_t rcoll_cuda_reduce(rcoll_datatype_t dt, rcoll_op_t op,
                                 void *dst, const void *a, const void *b,
                                 size_t n, int nranks, void *stream)
{
    if (!rcoll_cuda_available())
        return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED, "GPU reduction: %s",
                                why);
    if ((unsigned)dt >= RCOLL_DATATYPE_COUNT || (unsigned)op >= RCOLL_OP_COUNT)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "GPU reduction: bad datatype %d or op %d",
                                (int)dt, (int)op);
    if (n == 0)
        return RCOLL_OK;
    CUcontext ctx = NULL;
    CUresult r = cu.CtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS || !ctx)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "GPU reduction: "
                                "no current CUDA context on this thread");
    CUmodule m;
    pthread_mutex_lock(&mod_lock);
    r = module_of(ctx, 0, &m);
    pthread_mutex_unlock(&mod_lock);
    if (r != CUDA_SUCCESS)
        return cu_error("cuModuleLoadData (rcoll's kernels: no code for "
                        "this GPU?)", r);

    size_t dts = rcoll_datatype_size(dt);
    int vec = op != RCOLL_AVG && ((uintptr_t)dst | (uintptr_t)a |
                                  (uintptr_t)b) % 16 == 0;
    char name[64];
    if (op == RCOLL_AVG)
        snprintf(name, sizeof(name), "rcoll_avg_%s", type_names[dt]);
    else
        snprintf(name, sizeof(name), "rcoll_red_%s_%s%s", type_names[dt],
                 op_names[op], vec ? "_v" : "");
    CUfunction f;
    if ((r = cu.ModuleGetFunction(&f, m, name)) != CUDA_SUCCESS) {
        /* a context destroyed and its handle reused: load afresh, once */
        pthread_mutex_lock(&mod_lock);
        r = module_of(ctx, 1, &m);
        pthread_mutex_unlock(&mod_lock);
        if (r != CUDA_SUCCESS ||
            (r = cu.ModuleGetFunction(&f, m, name)) != CUDA_SUCCESS)
            return cu_error(name, r);
    }
    /* enough blocks to fill the GPU, each thread a few 16-byte vectors */
    size_t per = vec ? 16 / dts : 1, items = (n + per - 1) / per;
    unsigned threads = 512, blocks = (unsigned)((items + threads - 1) / threads);
    if (blocks > 65535)
        blocks = 65535;
    if (blocks == 0)
        blocks = 1;
    void *args[5] = {&dst, &a, &b, &n, &nranks};
    r = cu.LaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, (CUstream)stream,
                        args, NULL);
    return r == CUDA_SUCCESS ? RCOLL_OK : cu_error(name, r);
}

#else /* a build without the CUDA parts */

unsigned long rcoll_cuda_module_loads(void) { return 0; }

int rcoll_cuda_built(void) { return 0; }
int rcoll_cuda_available(void) { return 0; }
const char *rcoll_cuda_why(void)
{
    return "built without CUDA (configure --with-cuda)";
}
rcoll_mem_t rcoll_cuda_mem_type(const void *ptr)
{
    (void)ptr;
    return RCOLL_MEM_HOST;
}
rcoll_status_t rcoll_cuda_stream_sync(void *stream, const void *devptr)
{
    (void)stream; (void)devptr;
    return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED, "built without CUDA");
}
rcoll_status_t rcoll_cuda_d2h(void *dst, const void *src, size_t bytes)
{
    (void)dst; (void)src; (void)bytes;
    return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED, "built without CUDA");
}
rcoll_status_t rcoll_cuda_h2d(void *dst, const void *src, size_t bytes)
{
    (void)dst; (void)src; (void)bytes;
    return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED, "built without CUDA");
}
rcoll_status_t rcoll_cuda_reduce(rcoll_datatype_t dt, rcoll_op_t op,
                                 void *dst, const void *a, const void *b,
                                 size_t n, int nranks, void *stream)
{
    (void)dt; (void)op; (void)dst; (void)a; (void)b; (void)n; (void)nranks;
    (void)stream;
    return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED, "built without CUDA");
}
#endif
