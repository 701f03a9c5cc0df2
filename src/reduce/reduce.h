/* CPU reduction kernels for every datatype and operation. */
#ifndef RCOLL_REDUCE_H
#define RCOLL_REDUCE_H

#include "util/util.h"
#include <stdint.h>

/* dst[i] = a[i] op b[i]; dst may alias a or b. For AVG this is the SUM. */
typedef void (*rcoll_reduce_fn_t)(void *dst, const void *a, const void *b,
                                  size_t n);
rcoll_reduce_fn_t rcoll_reduce_get(rcoll_datatype_t dt, rcoll_op_t op);

/* The last step of an AVG: dst[i] = (a[i] + b[i]) / nranks, rounded once. */
void rcoll_reduce_avg_final(rcoll_datatype_t dt, void *dst, const void *a,
                            const void *b, size_t n, int nranks);
/* dst[i] = src[i] / nranks (AVG when a rank's value is already the sum). */
void rcoll_reduce_avg_scale(rcoll_datatype_t dt, void *dst, const void *src,
                            size_t n, int nranks);

/* The kernels this CPU runs: "avx512", "avx2" or "x86-64", plus "+f16c"
 * for the float16 path (or "portable" with RCOLL_SIMD=0). */
const char *rcoll_reduce_isa(void);

/* Exact conversions (round to nearest even, NaN kept quiet, subnormals). */
float rcoll_half_to_float(uint16_t h);
uint16_t rcoll_float_to_half(float f);
float rcoll_bf16_to_float(uint16_t h);
uint16_t rcoll_float_to_bf16(float f);

#endif
