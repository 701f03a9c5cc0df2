/* Reduction kernels. Plain loops over restrict-free pointers that GCC
 * vectorizes at -O3 (this file is built with -O3); integers wrap by doing
 * the arithmetic in the unsigned type; MIN/MAX propagate NaN; float16 and
 * bfloat16 go through float32 and round once. */
#include "reduce.h"
#include <math.h>
#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float rcoll_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)                       /* inf / nan */
        return u2f(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp == 0) {
        if (man == 0)
            return u2f(sign);
        /* subnormal: value = man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t rcoll_float_to_half(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t au = u & 0x7fffffffu;
    if (au >= 0x7f800000u)                 /* inf or nan */
        return sign | 0x7c00 | (au > 0x7f800000u ? 0x200 | ((au >> 13) & 0x3ff)
                                                 : 0);
    if (au >= 0x477ff000u)                 /* rounds to >= 65520: inf */
        return sign | 0x7c00;
    if (au < 0x38800000u) {                /* below 2^-14: subnormal or 0 */
        /* value / 2^-24, rounded to nearest even; exact in float math */
        float v = u2f(au) * 0x1p24f;
        float r = nearbyintf(v);           /* current mode: nearest even */
        return sign | (uint16_t)r;
    }
    /* normal: drop 13 mantissa bits with round to nearest even */
    uint32_t mant_odd = (au >> 13) & 1;
    au += 0xfffu + mant_odd;
    return sign | (uint16_t)((au - 0x38000000u) >> 13);
}

float rcoll_bf16_to_float(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t rcoll_float_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)   /* nan: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- integer and native float kernels ---- */
#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MIN_I(a, b) ((a) < (b) ? (a) : (b))
#define OP_MAX_I(a, b) ((a) > (b) ? (a) : (b))
/* NaN wins: if a is NaN, a != a picks a; if b is NaN the compare is false */
#define OP_MIN_F(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define OP_MAX_F(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))

/* signed integers: arithmetic in the unsigned type (wraps, no UB) */
#define DEF_INT(NAME, T, UT)                                                 \
    static void NAME##_sum(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)(UT)((UT)aa[i] + (UT)bb[i]);                          \
    }                                                                        \
    static void NAME##_prod(void *d, const void *a, const void *b, size_t n) \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)(UT)((UT)aa[i] * (UT)bb[i]);                          \
    }                                                                        \
    static void NAME##_min(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MIN_I(aa[i], bb[i]);                                  \
    }                                                                        \
    static void NAME##_max(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MAX_I(aa[i], bb[i]);                                  \
    }

DEF_INT(i8, int8_t, uint8_t)
DEF_INT(u8, uint8_t, uint8_t)
DEF_INT(i32, int32_t, uint32_t)
DEF_INT(u32, uint32_t, uint32_t)
DEF_INT(i64, int64_t, uint64_t)
DEF_INT(u64, uint64_t, uint64_t)

#define DEF_FLT(NAME, T)                                                     \
    static void NAME##_sum(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = aa[i] + bb[i];                                           \
    }                                                                        \
    static void NAME##_prod(void *d, const void *a, const void *b, size_t n) \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = aa[i] * bb[i];                                           \
    }                                                                        \
    static void NAME##_min(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MIN_F(aa[i], bb[i]);                                  \
    }                                                                        \
    static void NAME##_max(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MAX_F(aa[i], bb[i]);                                  \
    }

DEF_FLT(f32, float)
DEF_FLT(f64, double)

/* 16-bit floats: through float32, rounded once */
#define DEF_H(NAME, TOF, FROMF)                                              \
    static void NAME##_sum(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = FROMF(TOF(aa[i]) + TOF(bb[i]));                          \
    }                                                                        \
    static void NAME##_prod(void *d, const void *a, const void *b, size_t n) \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = FROMF(TOF(aa[i]) * TOF(bb[i]));                          \
    }                                                                        \
    static void NAME##_min(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++) {                                     \
            float x = TOF(aa[i]), y = TOF(bb[i]);                            \
            dd[i] = FROMF(OP_MIN_F(x, y));                                   \
        }                                                                    \
    }                                                                        \
    static void NAME##_max(void *d, const void *a, const void *b, size_t n)  \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++) {                                     \
            float x = TOF(aa[i]), y = TOF(bb[i]);                            \
            dd[i] = FROMF(OP_MAX_F(x, y));                                   \
        }                                                                    \
    }

DEF_H(f16, rcoll_half_to_float, rcoll_float_to_half)
DEF_H(bf16, rcoll_bf16_to_float, rcoll_float_to_bf16)

#define ROW(N) {N##_sum, N##_prod, N##_min, N##_max, N##_sum}
static const rcoll_reduce_fn_t table[RCOLL_DATATYPE_COUNT][RCOLL_OP_COUNT] = {
    ROW(i8), ROW(u8), ROW(i32), ROW(u32), ROW(i64),
    ROW(u64), ROW(f16), ROW(bf16), ROW(f32), ROW(f64)};

rcoll_reduce_fn_t rcoll_reduce_get(rcoll_datatype_t dt, rcoll_op_t op)
{
    if ((unsigned)dt >= RCOLL_DATATYPE_COUNT || (unsigned)op >= RCOLL_OP_COUNT)
        return NULL;
    return table[dt][op];
}

#define AVG_INT(T, UT)                                                       \
    do {                                                                     \
        T *dd = dst; const T *aa = a, *bb = b;                               \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)((T)(UT)((UT)aa[i] + (UT)(bb ? bb[i] : 0)) / (T)nr);  \
    } while (0)
#define AVG_F(T)                                                             \
    do {                                                                     \
        T *dd = dst; const T *aa = a, *bb = b;                               \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)(((double)aa[i] + (bb ? (double)bb[i] : 0.0)) / nr);  \
    } while (0)
#define AVG_H(TOF, FROMF)                                                    \
    do {                                                                     \
        uint16_t *dd = dst; const uint16_t *aa = a, *bb = b;                 \
        for (size_t i = 0; i < n; i++) {                                     \
            float s = bb ? TOF(aa[i]) + TOF(bb[i]) : TOF(aa[i]);             \
            dd[i] = FROMF((float)((double)s / nr));                          \
        }                                                                    \
    } while (0)

static void avg(rcoll_datatype_t dt, void *dst, const void *a, const void *b,
                size_t n, int nr)
{
    switch (dt) {
    case RCOLL_INT8:     AVG_INT(int8_t, uint8_t); break;
    case RCOLL_UINT8:    AVG_INT(uint8_t, uint8_t); break;
    case RCOLL_INT32:    AVG_INT(int32_t, uint32_t); break;
    case RCOLL_UINT32:   AVG_INT(uint32_t, uint32_t); break;
    case RCOLL_INT64:    AVG_INT(int64_t, uint64_t); break;
    case RCOLL_UINT64:   AVG_INT(uint64_t, uint64_t); break;
    case RCOLL_FLOAT16:  AVG_H(rcoll_half_to_float, rcoll_float_to_half); break;
    case RCOLL_BFLOAT16: AVG_H(rcoll_bf16_to_float, rcoll_float_to_bf16); break;
    case RCOLL_FLOAT32:  AVG_F(float); break;
    case RCOLL_FLOAT64:  AVG_F(double); break;
    default: break;
    }
}

void rcoll_reduce_avg_final(rcoll_datatype_t dt, void *dst, const void *a,
                            const void *b, size_t n, int nranks)
{
    avg(dt, dst, a, b, n, nranks);
}

void rcoll_reduce_avg_scale(rcoll_datatype_t dt, void *dst, const void *src,
                            size_t n, int nranks)
{
    avg(dt, dst, src, NULL, n, nranks);
}
