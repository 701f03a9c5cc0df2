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

/* ---- full-range integer inputs ----
 * The inputs above are tiny, so they never set an unsigned type's high
 * bit: a MIN/MAX that compared uint64 as signed passed everything. These
 * cover the whole range of each integer type: hashed bit patterns (about
 * half with the high bit set) and the type's extremes (0, 1, its minimum
 * and maximum, the sign boundary) at fixed positions. The reference works
 * on the bit pattern in uint64 (sums and products wrap modulo 2^bits, so
 * they are the same for signed and unsigned types) and compares in the
 * type's own signedness. Float types get the exact small inputs above. */
static inline int ref_is_int(rcoll_datatype_t dt)
{
    return dt <= RCOLL_UINT64;
}

static inline int ref_int_bits(rcoll_datatype_t dt)
{
    return (int)rcoll_datatype_size(dt) * 8;
}

static inline uint64_t ref_mask(rcoll_datatype_t dt)
{
    int b = ref_int_bits(dt);
    return b == 64 ? ~0ull : (1ull << b) - 1;
}

static inline uint64_t ref_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* element i of `rank`'s full-range input, as a bit pattern in the type */
static inline uint64_t ref_wide_bits(int rank, size_t i, rcoll_datatype_t dt,
                                     rcoll_op_t op, int salt)
{
    uint64_t m = ref_mask(dt), top = 1ull << (ref_int_bits(dt) - 1);
    /* extremes: each rank puts a different one at each of the first
     * positions, so MIN/MAX meet every pair of them */
    const uint64_t ext[6] = {0, 1, top - 1, top, m, m - 1};
    if (i < 12)
        return ext[(i + (size_t)rank * 5) % 6];
    uint64_t h = ref_mix((uint64_t)rank * 0x9e3779b97f4a7c15ull ^
                         (uint64_t)i * 0x100000001b3ull ^
                         (uint64_t)salt << 48 ^ (uint64_t)op << 40);
    if (op == RCOLL_PROD && (h & 3))
        h |= 1; /* mostly odd factors, so products do not collapse to 0 */
    return h & m;
}

/* the bit pattern as a signed value of the type, in int64 */
static inline int64_t ref_sext(uint64_t v, rcoll_datatype_t dt)
{
    int b = ref_int_bits(dt);
    if (b == 64)
        return (int64_t)v;
    uint64_t top = 1ull << (b - 1);
    return (int64_t)((v ^ top) - top);
}

static inline void ref_store_bits(void *buf, size_t i, rcoll_datatype_t dt,
                                  uint64_t v)
{
    switch (rcoll_datatype_size(dt)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

/* ref_fill with full-range integers (float types: ref_fill's inputs) */
static inline void ref_fill_wide(void *buf, size_t n, size_t first,
                                 rcoll_datatype_t dt, rcoll_op_t op,
                                 int rank, int salt)
{
    if (!ref_is_int(dt)) {
        ref_fill(buf, n, first, dt, op, rank, salt);
        return;
    }
    for (size_t j = 0; j < n; j++)
        ref_store_bits(buf, j, dt, ref_wide_bits(rank, first + j, dt, op, salt));
}

/* ref_reduce over ref_fill_wide's inputs of ranks 0..n-1 */
static inline void ref_reduce_wide(void *buf, size_t cnt, size_t first,
                                   rcoll_datatype_t dt, rcoll_op_t op, int n,
                                   int salt)
{
    if (!ref_is_int(dt)) {
        ref_reduce(buf, cnt, first, dt, op, n, salt);
        return;
    }
    uint64_t m = ref_mask(dt);
    int sg = ref_is_signed(dt);
    for (size_t j = 0; j < cnt; j++) {
        uint64_t acc = ref_wide_bits(0, first + j, dt, op, salt);
        for (int r = 1; r < n; r++) {
            uint64_t v = ref_wide_bits(r, first + j, dt, op, salt);
            int less = sg ? ref_sext(v, dt) < ref_sext(acc, dt) : v < acc;
            switch (op) {
            case RCOLL_PROD: acc = (acc * v) & m; break;
            case RCOLL_MIN:  acc = less ? v : acc; break;
            case RCOLL_MAX:  acc = (!less && v != acc) ? v : acc; break;
            default:         acc = (acc + v) & m; break;
            }
        }
        if (op == RCOLL_AVG) /* the wrapped sum, divided toward zero */
            acc = sg ? (uint64_t)(ref_sext(acc, dt) / n) & m
                     : acc / (uint64_t)n;
        ref_store_bits(buf, j, dt, acc);
    }
}

/* ---- float inputs whose result depends on the order of reduction ----
 * Exact small integers cannot tell one order from another, so a reduction
 * that dropped or doubled a rounding step passed. These are random
 * mantissas of the type's full precision over a range of exponents (signs
 * mixed), so sums and products round at every step. The result is
 * checked against the exact value (in long double) within the bound of
 * any order of pairwise reduction (Higham, Accuracy and Stability of
 * Numerical Algorithms, 4.2): with u the unit roundoff and
 * g(k) = k u / (1 - k u),
 *   SUM   |got - S| <= g(n-1) * sum |x_r|
 *   AVG   |got - S/n| <= g(n+1) * sum |x_r| / n   (a sum, then / n)
 *   PROD  |got - P| <= g(n-1) * |P|
 *   MIN, MAX exact.
 * 16-bit types compute in float and round to the type at each step, so
 * their u is 2^-p + 2^-24. */
static inline int ref_fp_bits(rcoll_datatype_t dt)
{
    switch (dt) {
    case RCOLL_FLOAT16:  return 11;
    case RCOLL_BFLOAT16: return 8;
    case RCOLL_FLOAT32:  return 24;
    default:             return 53;
    }
}

static inline double ref_fp_gen(int rank, size_t i, rcoll_datatype_t dt,
                                rcoll_op_t op, int salt)
{
    int p = ref_fp_bits(dt), er = p <= 11 ? 5 : 12;
    uint64_t h = ref_mix((uint64_t)rank * 0x9e3779b97f4a7c15ull ^
                         (uint64_t)i * 0x100000001b3ull ^
                         (uint64_t)salt << 48 ^ (uint64_t)op << 40 ^ 0xf1);
    if (op == RCOLL_PROD) {
        /* factors within 2^-5 of 1 on either side, so no order of up to
         * 256 ranks leaves even a 16-bit float's range (1.03125^256 =
         * 2.7e3; 0.96875^256 = 3.0e-4) */
        uint64_t r = (h >> 8) & ((1ull << (p - 6)) - 1);
        double v = (h >> 62 & 1)
                       ? ldexp((double)((1ull << (p - 1)) + r), -(p - 1))
                       : ldexp((double)((1ull << p) - 2 * r), -p);
        return (h >> 63) ? -v : v;
    }
    uint64_t mant = (h & ((1ull << (p - 1)) - 1)) | (1ull << (p - 1));
    int e = (int)((h >> 54) % (uint64_t)(2 * er + 1)) - er;
    double v = ldexp((double)mant, e - (p - 1)); /* in [2^e, 2^(e+1)) */
    return (h >> 63) ? -v : v;
}

static inline void ref_fp_store(void *buf, size_t i, rcoll_datatype_t dt,
                                double v)
{
    switch (dt) {
    case RCOLL_FLOAT16:  ((uint16_t *)buf)[i] = ref_f2h((float)v); break;
    case RCOLL_BFLOAT16: ((uint16_t *)buf)[i] = ref_f2bf((float)v); break;
    case RCOLL_FLOAT32:  ((float *)buf)[i] = (float)v; break;
    default:             ((double *)buf)[i] = v; break;
    }
}

static inline double ref_fp_load(const void *buf, size_t i,
                                 rcoll_datatype_t dt)
{
    switch (dt) {
    case RCOLL_FLOAT16:  return ref_h2d(((const uint16_t *)buf)[i]);
    case RCOLL_BFLOAT16: return ref_bf2d(((const uint16_t *)buf)[i]);
    case RCOLL_FLOAT32:  return ((const float *)buf)[i];
    default:             return ((const double *)buf)[i];
    }
}

/* buf[j] = `rank`'s order-sensitive input at first + j (float types) */
static inline void ref_fp_fill(void *buf, size_t n, size_t first,
                               rcoll_datatype_t dt, rcoll_op_t op, int rank,
                               int salt)
{
    for (size_t j = 0; j < n; j++)
        ref_fp_store(buf, j, dt, ref_fp_gen(rank, first + j, dt, op, salt));
}

/* The number of elements of got (the reduction over ranks 0..n-1 at
 * first + j) outside the bound above; *bad is the first such index. */
static inline size_t ref_fp_check(const void *got, size_t cnt, size_t first,
                                  rcoll_datatype_t dt, rcoll_op_t op, int n,
                                  int salt, size_t *bad)
{
    int p = ref_fp_bits(dt);
    double u = ldexp(1.0, -p) + (p < 24 ? ldexp(1.0, -24) : 0.0);
    double k = op == RCOLL_AVG ? n + 1 : n - 1;
    double g = k * u / (1 - k * u);
    size_t wrong = 0;
    for (size_t j = 0; j < cnt; j++) {
        long double acc = op == RCOLL_PROD ? 1.0L : 0.0L, mag = 0.0L;
        double mm = 0.0;
        for (int r = 0; r < n; r++) {
            double v = ref_fp_gen(r, first + j, dt, op, salt);
            acc = op == RCOLL_PROD ? acc * v : acc + v;
            mag += fabsl((long double)v);
            if (r == 0 || (op == RCOLL_MIN ? v < mm : v > mm))
                mm = v;
        }
        double x = ref_fp_load(got, j, dt);
        int ok;
        if (op == RCOLL_MIN || op == RCOLL_MAX) {
            ok = x == mm;
        } else {
            long double want = op == RCOLL_AVG ? acc / n : acc;
            long double b = op == RCOLL_PROD ? g * fabsl(acc)
                            : op == RCOLL_AVG ? g * mag / n : g * mag;
            b += ldexpl(mag, -62); /* the long double sum's own rounding */
            ok = fabsl((long double)x - want) <= b;
        }
        if (!ok && !wrong++ && bad)
            *bad = j;
    }
    return wrong;
}

/* The reference of one kernel call, dst = x OP y elementwise, or AVG's last
 * step (x + y) / nr, written here: integers on their bit patterns (sums
 * and products modulo 2^bits, MIN/MAX in the type's signedness, AVG the
 * wrapped sum divided toward zero); floats computed in double and rounded
 * once to the type (exact before that rounding for the inputs of ref_fill
 * and ref_fp_fill: 16-bit types are summed in float, exact for them too). */
static inline uint64_t ref_load_bits(const void *buf, size_t i,
                                     rcoll_datatype_t dt)
{
    switch (rcoll_datatype_size(dt)) {
    case 1: return ((const uint8_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
    }
}

static inline void ref_pair(void *dst, const void *x, const void *y,
                            size_t cnt, rcoll_datatype_t dt, rcoll_op_t op,
                            int nr)
{
    for (size_t i = 0; i < cnt; i++) {
        if (ref_is_int(dt)) {
            uint64_t m = ref_mask(dt), u = ref_load_bits(x, i, dt),
                     v = ref_load_bits(y, i, dt), r;
            int sg = ref_is_signed(dt);
            int less = sg ? ref_sext(v, dt) < ref_sext(u, dt) : v < u;
            switch (op) {
            case RCOLL_PROD: r = (u * v) & m; break;
            case RCOLL_MIN: r = less ? v : u; break;
            case RCOLL_MAX: r = (!less && v != u) ? v : u; break;
            default: r = (u + v) & m; break;
            }
            if (op == RCOLL_AVG)
                r = sg ? (uint64_t)(ref_sext(r, dt) / nr) & m
                       : r / (uint64_t)nr;
            ref_store_bits(dst, i, dt, r);
        } else {
            double u = ref_fp_load(x, i, dt), v = ref_fp_load(y, i, dt), r;
            switch (op) {
            case RCOLL_PROD: r = u * v; break;
            case RCOLL_MIN: r = v < u ? v : u; break;
            case RCOLL_MAX: r = v > u ? v : u; break;
            case RCOLL_AVG: r = (u + v) / nr; break;
            default: r = u + v; break;
            }
            ref_fp_store(dst, i, dt, r);
        }
    }
}

#endif
