/* Reduction kernels. Plain loops that GCC vectorizes at -O3 (this file is
 * built with -O3), cloned per CPU level (see KERNEL); integers wrap by doing
 * the arithmetic in the unsigned type; MIN/MAX propagate NaN; float16 and
 * bfloat16 go through float32 and round once (float16 with the F16C
 * conversion instructions where the CPU has them, bit-identical to the
 * portable conversion). */
#include "reduce.h"
#include "util/params.h"
/* -O3 here even when CFLAGS says -O2 (CFLAGS comes last on the command
 * line): -O2's cheap vectorizer gives up on loops whose output may alias an
 * input, which every kernel's does (in-place reductions). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float half_to_float(uint16_t h)
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

static inline uint16_t float_to_half(float f)
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

static inline float bf16_to_float(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t u = f2u(f);
    uint32_t q = (u >> 16) | 0x40;         /* nan: keep it quiet */
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

float rcoll_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t rcoll_float_to_half(float f) { return float_to_half(f); }
float rcoll_bf16_to_float(uint16_t h) { return bf16_to_float(h); }
uint16_t rcoll_float_to_bf16(float f) { return float_to_bf16(f); }

/* Kernels are compiled for several CPU levels and the best one the CPU has
 * is picked when the library loads (GCC function multi-versioning through
 * an ifunc): AVX-512, AVX2 (+FMA, F16C), and the baseline x86-64. Not
 * under ThreadSanitizer: its instrumented ifunc resolvers run before its
 * runtime is up and crash at load (--enable-tsan). */
#if defined(__SANITIZE_THREAD__)
#define RCOLL_NO_CLONES 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__ELF__) && !defined(RCOLL_NO_CLONES)
#define KERNEL \
    __attribute__((target_clones("default", "arch=haswell", \
                                 "arch=skylake-avx512")))
#define HAVE_X86_F16C 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define KERNEL
#endif

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
    static KERNEL void NAME##_sum(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)(UT)((UT)aa[i] + (UT)bb[i]);                          \
    }                                                                        \
    static KERNEL void NAME##_prod(void *d, const void *a, const void *b,    \
                                 size_t n) \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)(UT)((UT)aa[i] * (UT)bb[i]);                          \
    }                                                                        \
    static KERNEL void NAME##_min(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MIN_I(aa[i], bb[i]);                                  \
    }                                                                        \
    static KERNEL void NAME##_max(void *d, const void *a, const void *b,    \
                                 size_t n)  \
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
    static KERNEL void NAME##_sum(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = aa[i] + bb[i];                                           \
    }                                                                        \
    static KERNEL void NAME##_prod(void *d, const void *a, const void *b,    \
                                 size_t n) \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = aa[i] * bb[i];                                           \
    }                                                                        \
    static KERNEL void NAME##_min(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MIN_F(aa[i], bb[i]);                                  \
    }                                                                        \
    static KERNEL void NAME##_max(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        T *dd = d; const T *aa = a, *bb = b;                                 \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = OP_MAX_F(aa[i], bb[i]);                                  \
    }

DEF_FLT(f32, float)
DEF_FLT(f64, double)

/* 16-bit floats: through float32, rounded once */
#define DEF_H(NAME, TOF, FROMF)                                              \
    static KERNEL void NAME##_sum(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = FROMF(TOF(aa[i]) + TOF(bb[i]));                          \
    }                                                                        \
    static KERNEL void NAME##_prod(void *d, const void *a, const void *b,    \
                                 size_t n) \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = FROMF(TOF(aa[i]) * TOF(bb[i]));                          \
    }                                                                        \
    static KERNEL void NAME##_min(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++) {                                     \
            float x = TOF(aa[i]), y = TOF(bb[i]);                            \
            dd[i] = FROMF(OP_MIN_F(x, y));                                   \
        }                                                                    \
    }                                                                        \
    static KERNEL void NAME##_max(void *d, const void *a, const void *b,    \
                                 size_t n)  \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        for (size_t i = 0; i < n; i++) {                                     \
            float x = TOF(aa[i]), y = TOF(bb[i]);                            \
            dd[i] = FROMF(OP_MAX_F(x, y));                                   \
        }                                                                    \
    }

DEF_H(f16, half_to_float, float_to_half)
DEF_H(bf16, bf16_to_float, float_to_bf16)

#define ROW(N) {N##_sum, N##_prod, N##_min, N##_max, N##_sum}
static const rcoll_reduce_fn_t table[RCOLL_DATATYPE_COUNT][RCOLL_OP_COUNT] = {
    ROW(i8), ROW(u8), ROW(i32), ROW(u32), ROW(i64),
    ROW(u64), ROW(f16), ROW(bf16), ROW(f32), ROW(f64)};

#ifdef HAVE_X86_F16C
/* float16 with F16C: 8 elements per instruction, rounding to nearest even
 * like float_to_half (NaN quieted, subnormals and overflow alike). */
#define F16C_LOOP(NAME, EXPR, SCALAR)                                         \
    __attribute__((target("avx,f16c"))) static void NAME(                     \
        void *d, const void *a, const void *b, size_t n)                     \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        size_t i = 0;                                                        \
        for (; i + 8 <= n; i += 8) {                                         \
            __m256 x = _mm256_cvtph_ps(                                      \
                _mm_loadu_si128((const __m128i *)(aa + i)));                 \
            __m256 y = _mm256_cvtph_ps(                                      \
                _mm_loadu_si128((const __m128i *)(bb + i)));                 \
            __m256 r = EXPR;                                                 \
            _mm_storeu_si128((__m128i *)(dd + i),                            \
                             _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT)); \
        }                                                                    \
        if (i < n)                                                           \
            SCALAR(dd + i, aa + i, bb + i, n - i);                           \
    }
/* NaN wins, as in OP_MIN_F / OP_MAX_F: x if x < y or x is NaN, else y */
#define F16C_PICK(CMP)                                                       \
    _mm256_blendv_ps(y, x, _mm256_or_ps(_mm256_cmp_ps(x, y, CMP),            \
                                        _mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
F16C_LOOP(f16c_sum, _mm256_add_ps(x, y), f16_sum)
F16C_LOOP(f16c_prod, _mm256_mul_ps(x, y), f16_prod)
F16C_LOOP(f16c_min, F16C_PICK(_CMP_LT_OQ), f16_min)
F16C_LOOP(f16c_max, F16C_PICK(_CMP_GT_OQ), f16_max)

/* bfloat16 with AVX2: widen (shift left 16), compute in float32, round to
 * nearest even with integer arithmetic, quiet NaNs: float_to_bf16, 8 at a
 * time. */
#define BF16_LOOP(NAME, EXPR, SCALAR)                                         \
    __attribute__((target("avx2"))) static void NAME(                         \
        void *d, const void *a, const void *b, size_t n)                     \
    {                                                                        \
        uint16_t *dd = d; const uint16_t *aa = a, *bb = b;                   \
        const __m256i one = _mm256_set1_epi32(1);                            \
        const __m256i bias = _mm256_set1_epi32(0x7fff);                      \
        const __m256i absm = _mm256_set1_epi32(0x7fffffff);                  \
        const __m256i inf = _mm256_set1_epi32(0x7f800000);                   \
        const __m256i quiet = _mm256_set1_epi32(0x40);                       \
        size_t i = 0;                                                        \
        for (; i + 8 <= n; i += 8) {                                         \
            __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(                \
                _mm256_cvtepu16_epi32(                                       \
                    _mm_loadu_si128((const __m128i *)(aa + i))), 16));       \
            __m256 y = _mm256_castsi256_ps(_mm256_slli_epi32(                \
                _mm256_cvtepu16_epi32(                                       \
                    _mm_loadu_si128((const __m128i *)(bb + i))), 16));       \
            __m256i u = _mm256_castps_si256(EXPR);                           \
            __m256i hi = _mm256_srli_epi32(u, 16);                           \
            __m256i rnd = _mm256_srli_epi32(                                 \
                _mm256_add_epi32(u, _mm256_add_epi32(                        \
                                        bias, _mm256_and_si256(hi, one))),   \
                16);                                                         \
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);\
            __m256i r = _mm256_blendv_epi8(rnd, _mm256_or_si256(hi, quiet),  \
                                           nan);                             \
            __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r),  \
                                                 0x08);                      \
            _mm_storeu_si128((__m128i *)(dd + i),                            \
                             _mm256_castsi256_si128(p));                     \
        }                                                                    \
        if (i < n)                                                           \
            SCALAR(dd + i, aa + i, bb + i, n - i);                           \
    }
BF16_LOOP(avx2_bf16_sum, _mm256_add_ps(x, y), bf16_sum)
BF16_LOOP(avx2_bf16_prod, _mm256_mul_ps(x, y), bf16_prod)
BF16_LOOP(avx2_bf16_min, F16C_PICK(_CMP_LT_OQ), bf16_min)
BF16_LOOP(avx2_bf16_max, F16C_PICK(_CMP_GT_OQ), bf16_max)

static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    /* F16C (bit 29) and AVX usable: the OS saves the YMM state */
    return (c & bit_F16C) && __builtin_cpu_supports("avx");
}
#endif

#ifdef HAVE_X86_F16C
static int f16c, avx2;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
/* RCOLL_SIMD: kernels are looked up before and without a communicator,
 * so the table is read here (once, like everywhere) */
static int simd_on(void)
{
    return rcoll_config_init() != RCOLL_OK || rcoll_config.simd != 0;
}

static void cpu_detect(void)
{
    int simd = simd_on();
    f16c = simd && cpu_has_f16c();
    avx2 = simd && __builtin_cpu_supports("avx2");
}
#endif

const char *rcoll_reduce_isa(void)
{
#ifdef HAVE_X86_F16C
    pthread_once(&cpu_once, cpu_detect);
    if (!simd_on())
        return "portable (RCOLL_SIMD=0)";
    if (__builtin_cpu_supports("avx512f"))
        return f16c ? "avx512 (+f16c)" : "avx512";
    if (__builtin_cpu_supports("avx2"))
        return f16c ? "avx2 (+f16c)" : "avx2";
    return f16c ? "x86-64 (+f16c)" : "x86-64";
#else
    return "portable";
#endif
}

rcoll_reduce_fn_t rcoll_reduce_get(rcoll_datatype_t dt, rcoll_op_t op)
{
    if ((unsigned)dt >= RCOLL_DATATYPE_COUNT || (unsigned)op >= RCOLL_OP_COUNT)
        return NULL;
#ifdef HAVE_X86_F16C
    pthread_once(&cpu_once, cpu_detect);
    if (dt == RCOLL_FLOAT16 && f16c) {
        static const rcoll_reduce_fn_t t[RCOLL_OP_COUNT] = {
            f16c_sum, f16c_prod, f16c_min, f16c_max, f16c_sum};
        return t[op];
    }
    if (dt == RCOLL_BFLOAT16 && avx2) {
        static const rcoll_reduce_fn_t t[RCOLL_OP_COUNT] = {
            avx2_bf16_sum, avx2_bf16_prod, avx2_bf16_min, avx2_bf16_max,
            avx2_bf16_sum};
        return t[op];
    }
#endif
    return table[dt][op];
}

/* Integers: the wrapped sum in T, divided by the rank count as a 64-bit
 * integer of T's signedness (truncating toward zero). Casting the count to
 * T instead divided int8 by 0 at 256 ranks (SIGFPE) and by a negative
 * number at 128-255. */
#define AVG_INT(T, UT, WT)                                                   \
    do {                                                                     \
        T *dd = dst; const T *aa = a, *bb = b;                               \
        for (size_t i = 0; i < n; i++)                                       \
            dd[i] = (T)((WT)(T)(UT)((UT)aa[i] + (UT)(bb ? bb[i] : 0)) /      \
                        (WT)nr);                                             \
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
    if (nr < 1)
        nr = 1; /* not reached: communicators have at least one rank */
    switch (dt) {
    case RCOLL_INT8:     AVG_INT(int8_t, uint8_t, int64_t); break;
    case RCOLL_UINT8:    AVG_INT(uint8_t, uint8_t, uint64_t); break;
    case RCOLL_INT32:    AVG_INT(int32_t, uint32_t, int64_t); break;
    case RCOLL_UINT32:   AVG_INT(uint32_t, uint32_t, uint64_t); break;
    case RCOLL_INT64:    AVG_INT(int64_t, uint64_t, int64_t); break;
    case RCOLL_UINT64:   AVG_INT(uint64_t, uint64_t, uint64_t); break;
    case RCOLL_FLOAT16:  AVG_H(half_to_float, float_to_half); break;
    case RCOLL_BFLOAT16: AVG_H(bf16_to_float, float_to_bf16); break;
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
