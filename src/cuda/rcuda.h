/* GPU buffers (src/cuda/cuda.c): the CUDA driver is loaded at run time
 * (dlopen libcuda.so.1), so librcoll has no link-time CUDA dependency and
 * runs unchanged on machines without a GPU or driver, where every buffer
 * is host memory. RCOLL_CUDA=0 never looks at the driver. */
#ifndef RCOLL_RCUDA_H
#define RCOLL_RCUDA_H

#include "util/util.h"
#include <stddef.h>

typedef enum { RCOLL_MEM_HOST = 0, RCOLL_MEM_DEVICE = 1 } rcoll_mem_t;

/* 1 when this build has the CUDA parts (kernels compiled in). */
int rcoll_cuda_built(void);
/* 1 when the driver loaded and initialized (once per process). */
int rcoll_cuda_available(void);
/* Why the driver is not available ("" when it is). */
const char *rcoll_cuda_why(void);
/* The memory type of ptr: device for cudaMalloc'd memory, host otherwise
 * (host, pinned, managed, or any pointer when no driver). */
rcoll_mem_t rcoll_cuda_mem_type(const void *ptr);

/* Host staging for a blocking call with device buffers (api.c): waits for
 * the work queued on `stream`, copies device -> host, and back. The
 * pointer's context is made current around each call. */
rcoll_status_t rcoll_cuda_stream_sync(void *stream, const void *devptr);
rcoll_status_t rcoll_cuda_d2h(void *dst, const void *src, size_t bytes);
rcoll_status_t rcoll_cuda_h2d(void *dst, const void *src, size_t bytes);

/* The reduction kernels (kernels.cu), launched on `stream` in the current
 * context: dst = a op b over n elements; op RCOLL_AVG is AVG's last step,
 * (a + b) / nranks. All three pointers are device memory. */
rcoll_status_t rcoll_cuda_reduce(rcoll_datatype_t dt, rcoll_op_t op,
                                 void *dst, const void *a, const void *b,
                                 size_t n, int nranks, void *stream);
/* How many times the kernels' module was loaded (one per context that
 * reduced; for tests). */
unsigned long rcoll_cuda_module_loads(void);

#endif
