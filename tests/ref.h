/* Reference values for tests and rcoll-perf -c: inputs are small integers
 * chosen so every reduction is exact in every datatype, and the expected
 * result is computed here independently of the library (its own float16
 * and bfloat16 conversions; integer wrap-around in the integer type). */
#ifndef RCOLL_TEST_REF_H
#define RCOLL_TEST_REF_H

#include <rcoll.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* float -> binary16, round to nearest even, written independently of the
 * library: scale into the target precision and use rint(). */
static inline uint16_t ref_f2h(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f))
        return 0x7e00 | sign;
    if (a >= 65520.0)
        return sign | 0x7c00;
    if (a < ldexp(1.0, -14)) /* subnormal: units of 2^-24 */
        return sign | (uint16_t)rint(a * ldexp(1.0, 24));
    int e;
    frexp(a, &e);            /* a = m * 2^e, m in [0.5, 1) */
    double q = rint(ldexp(a, 11 - e)); /* 11 significant bits */
    if (q >= 2048.0) {
        q /= 2;
        e++;
    }
    if (e - 1 + 15 >= 31)
        return sign | 0x7c00;
    return sign | (uint16_t)(((e - 1 + 15) << 10) | ((uint32_t)q & 0x3ff));
}

static inline double ref_h2d(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* float -> bfloat16, round to nearest even via the same scaling idea */
static inline uint16_t ref_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40);
    if (isinf(f) || f == 0.0f)
        return (uint16_t)(u >> 16);
    double a = fabs((double)f);
    float r;
    if (a < ldexp(1.0, -126)) { /* float subnormal: units of 2^-133 */
        r = (float)ldexp(rint(ldexp(a, 133)), -133);
    } else {
        int e;
        frexp(a, &e);
        double q = rint(ldexp(a, 8 - e)); /* 8 significant bits */
        r = (float)ldexp(q, e - 8);
    }
    if (signbit(f))
        r = -r;
    memcpy(&u, &r, 4);
    return (uint16_t)(u >> 16);
}

static inline double ref_bf2d(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline int ref_is_signed(rcoll_datatype_t dt)
{
    return dt == RCOLL_INT8 || dt == RCOLL_INT32 || dt == RCOLL_INT64 ||
           dt >= RCOLL_FLOAT16;
}

/* The input of `rank` at global index i. */
static inline int64_t ref_gen(int rank, size_t i, rcoll_datatype_t dt,
                              rcoll_op_t op, int salt)
{
    uint64_t x = (uint64_t)rank * 7 + i * 3 + (uint64_t)salt * 11;
    int sg = ref_is_signed(dt);
    switch (op) {
    case RCOLL_PROD:
        if ((rank + i + (size_t)salt) % 4 == 0)
            return 2;
        return (sg && (x % 7) == 3) ? -1 : 1;
    case RCOLL_MIN:
    case RCOLL_MAX:
        x = (uint64_t)rank * 13 + i * 7 + (uint64_t)salt;
        return sg ? (int64_t)(x % 31) - 15 : (int64_t)(x % 31);
    default:
        return sg ? (int64_t)(x % 9) - 4 : (int64_t)(x % 9);
    }
}

/* Stores integer-valued v (exact) as element i of a typed buffer. For
 * integer types the conversion wraps modulo 2^bits. */
static inline void ref_store(void *buf, size_t i, rcoll_datatype_t dt,
                             int64_t v)
{
    switch (dt) {
    case RCOLL_INT8:     ((int8_t *)buf)[i] = (int8_t)(uint8_t)v; break;
    case RCOLL_UINT8:    ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case RCOLL_INT32:    ((int32_t *)buf)[i] = (int32_t)(uint32_t)v; break;
    case RCOLL_UINT32:   ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case RCOLL_INT64:    ((int64_t *)buf)[i] = v; break;
    case RCOLL_UINT64:   ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case RCOLL_FLOAT16:  ((uint16_t *)buf)[i] = ref_f2h((float)v); break;
    case RCOLL_BFLOAT16: ((uint16_t *)buf)[i] = ref_f2bf((float)v); break;
    case RCOLL_FLOAT32:  ((float *)buf)[i] = (float)v; break;
    case RCOLL_FLOAT64:  ((double *)buf)[i] = (double)v; break;
    default: break;
    }
}

/* buf[j] = input of `rank` at global index first + j */
static inline void ref_fill(void *buf, size_t n, size_t first,
                            rcoll_datatype_t dt, rcoll_op_t op, int rank,
                            int salt)
{
    for (size_t j = 0; j < n; j++)
        ref_store(buf, j, dt, ref_gen(rank, first + j, dt, op, salt));
}

/* The AVG of an exact integer sum, by the documented rule: integers divide
 * the wrapped sum in the type (truncating); floats divide in double and
 * round once (16-bit types through float). */
static inline void ref_store_avg(void *buf, size_t i, rcoll_datatype_t dt,
                                 int64_t sum, int n)
{
    switch (dt) {
    case RCOLL_INT8:   ((int8_t *)buf)[i] = (int8_t)((int8_t)(uint8_t)sum / n); break;
    case RCOLL_UINT8:  ((uint8_t *)buf)[i] = (uint8_t)((uint8_t)sum / n); break;
    case RCOLL_INT32:  ((int32_t *)buf)[i] = (int32_t)(uint32_t)sum / n; break;
    case RCOLL_UINT32: ((uint32_t *)buf)[i] = (uint32_t)sum / (uint32_t)n; break;
    case RCOLL_INT64:  ((int64_t *)buf)[i] = sum / n; break;
    case RCOLL_UINT64: ((uint64_t *)buf)[i] = (uint64_t)sum / (uint64_t)n; break;
    case RCOLL_FLOAT16:
        ((uint16_t *)buf)[i] = ref_f2h((float)((double)sum / n)); break;
    case RCOLL_BFLOAT16:
        ((uint16_t *)buf)[i] = ref_f2bf((float)((double)sum / n)); break;
    case RCOLL_FLOAT32: ((float *)buf)[i] = (float)((double)sum / n); break;
    case RCOLL_FLOAT64: ((double *)buf)[i] = (double)sum / n; break;
    default: break;
    }
}

/* buf[j] = reduction over ranks 0..n-1 of their inputs at first + j */
static inline void ref_reduce(void *buf, size_t cnt, size_t first,
                              rcoll_datatype_t dt, rcoll_op_t op, int n,
                              int salt)
{
    for (size_t j = 0; j < cnt; j++) {
        int64_t acc = ref_gen(0, first + j, dt, op, salt);
        for (int r = 1; r < n; r++) {
            int64_t v = ref_gen(r, first + j, dt, op, salt);
            switch (op) {
            case RCOLL_PROD: acc *= v; break;
            case RCOLL_MIN:  acc = v < acc ? v : acc; break;
            case RCOLL_MAX:  acc = v > acc ? v : acc; break;
            default:         acc += v; break;
            }
        }
        if (op == RCOLL_AVG)
            ref_store_avg(buf, j, dt, acc, n);
        else
            ref_store(buf, j, dt, acc);
    }
}

/* Number of elements whose bytes differ. */
static inline size_t ref_count_wrong(const void *a, const void *b, size_t n,
                                     rcoll_datatype_t dt)
{
    size_t s = rcoll_datatype_size(dt), wrong = 0;
    const char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        wrong += memcmp(x + i * s, y + i * s, s) != 0;
    return wrong;
}

#endif
