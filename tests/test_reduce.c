/* Unit tests of the CPU reduction kernels and the 16-bit conversions:
 * every datatype x op against a scalar reference written here, float16 and
 * bfloat16 rounding (exhaustive round trips, ties to even, subnormals,
 * overflow), NaN/inf behaviour, integer wrap-around, AVG. */
#include "reduce/reduce.h"
#include "ref.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_half_conversions(void)
{
    /* every half -> float -> half round trip is the identity (NaNs stay
     * NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rcoll_half_to_float((uint16_t)h);
        double want = ref_h2d((uint16_t)h);
        int isn = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (isn) {
            CHECK(isnan(f), "half 0x%04x -> %g, want NaN", h, f);
            CHECK(isnan(rcoll_half_to_float(rcoll_float_to_half(f))),
                  "NaN 0x%04x lost", h);
            continue;
        }
        CHECK((double)f == want, "half 0x%04x -> %g, want %g", h, f, want);
        CHECK(rcoll_float_to_half(f) == h, "round trip 0x%04x -> 0x%04x", h,
              rcoll_float_to_half(f));
    }
    /* float -> half against the reference on midpoints and neighbours of
     * every finite half: ties go to even */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double a = ref_h2d((uint16_t)h), b = ref_h2d((uint16_t)(h + 1));
        float mids[3] = {(float)((a + b) / 2), nextafterf((float)((a + b) / 2), 0),
                         nextafterf((float)((a + b) / 2), INFINITY)};
        for (int k = 0; k < 3; k++) {
            for (int sg = 0; sg < 2; sg++) {
                float x = sg ? -mids[k] : mids[k];
                uint16_t got = rcoll_float_to_half(x), want = ref_f2h(x);
                CHECK(got == want, "float %a -> half 0x%04x, want 0x%04x", x,
                      got, want);
            }
        }
    }
    CHECK(rcoll_float_to_half(65504.0f) == 0x7bff, "max half");
    CHECK(rcoll_float_to_half(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(rcoll_float_to_half(65519.99f) == 0x7bff, "65519.99 stays finite");
    CHECK(rcoll_float_to_half(INFINITY) == 0x7c00, "inf");
    CHECK(rcoll_float_to_half(-INFINITY) == 0xfc00, "-inf");
    CHECK(rcoll_float_to_half(1e-10f) == 0, "underflow to 0");
    CHECK(rcoll_float_to_half(-0.0f) == 0x8000, "-0");
}

static void test_bf16_conversions(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rcoll_bf16_to_float((uint16_t)h);
        CHECK(ref_bf2d((uint16_t)h) == (double)f || isnan(f), "bf16 0x%04x",
              h);
        if (!isnan(f))
            CHECK(rcoll_float_to_bf16(f) == h, "bf16 round trip 0x%04x", h);
        else
            CHECK(isnan(rcoll_bf16_to_float(rcoll_float_to_bf16(f))),
                  "bf16 NaN 0x%04x lost", h);
    }
    /* ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1) */
    CHECK(rcoll_float_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie down");
    CHECK(rcoll_float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "bf16 tie up");
    srand(7);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
        float f = u2f(u);
        if (isnan(f) || isinf(f))
            continue;
        CHECK(rcoll_float_to_bf16(f) == ref_f2bf(f), "bf16(%a) 0x%04x vs 0x%04x",
              f, rcoll_float_to_bf16(f), ref_f2bf(f));
        if (fabsf(f) < 65504.0f)
            CHECK(rcoll_float_to_half(f) == ref_f2h(f), "half(%a)", f);
    }
}

/* scalar reference in double/int64 for finite integer-valued inputs */
static void test_kernels_vs_scalar(void)
{
    const size_t n = 1000;
    for (int dt = 0; dt < RCOLL_DATATYPE_COUNT; dt++) {
        size_t s = rcoll_datatype_size((rcoll_datatype_t)dt);
        char *a = malloc(n * s), *b = malloc(n * s), *d = malloc(n * s),
             *e = malloc(n * s);
        for (int op = 0; op < RCOLL_OP_COUNT; op++) {
            rcoll_reduce_fn_t fn =
                rcoll_reduce_get((rcoll_datatype_t)dt, (rcoll_op_t)op);
            CHECK(fn != NULL, "no kernel for dt %d op %d", dt, op);
            if (!fn)
                continue;
            /* two ranks' inputs; ref_reduce is the independent answer */
            ref_fill(a, n, 0, (rcoll_datatype_t)dt, (rcoll_op_t)op, 0, 9);
            ref_fill(b, n, 0, (rcoll_datatype_t)dt, (rcoll_op_t)op, 1, 9);
            if (op == RCOLL_AVG) {
                rcoll_reduce_avg_final((rcoll_datatype_t)dt, d, a, b, n, 2);
            } else {
                fn(d, a, b, n);
            }
            ref_reduce(e, n, 0, (rcoll_datatype_t)dt, (rcoll_op_t)op, 2, 9);
            CHECK(ref_count_wrong(d, e, n, (rcoll_datatype_t)dt) == 0,
                  "dt %d op %d: %zu wrong", dt, op,
                  ref_count_wrong(d, e, n, (rcoll_datatype_t)dt));
            /* in place: dst aliases a */
            ref_fill(a, n, 0, (rcoll_datatype_t)dt, (rcoll_op_t)op, 0, 9);
            if (op != RCOLL_AVG) {
                fn(a, a, b, n);
                CHECK(ref_count_wrong(a, e, n, (rcoll_datatype_t)dt) == 0,
                      "dt %d op %d in place", dt, op);
            }
        }
        free(a); free(b); free(d); free(e);
    }
    CHECK(rcoll_reduce_get(RCOLL_DATATYPE_COUNT, RCOLL_SUM) == NULL, "bad dt");
    CHECK(rcoll_reduce_get(RCOLL_FLOAT32, RCOLL_OP_COUNT) == NULL, "bad op");
}

static void test_wrap(void)
{
    int8_t a8[2] = {127, -128}, b8[2] = {1, -1}, d8[2];
    rcoll_reduce_get(RCOLL_INT8, RCOLL_SUM)(d8, a8, b8, 2);
    CHECK(d8[0] == -128 && d8[1] == 127, "int8 sum wraps: %d %d", d8[0], d8[1]);
    int32_t a32 = INT32_MAX, b32 = 2, d32;
    rcoll_reduce_get(RCOLL_INT32, RCOLL_PROD)(&d32, &a32, &b32, 1);
    CHECK(d32 == -2, "int32 prod wraps: %d", d32);
    uint64_t au = UINT64_MAX, bu = 2, du;
    rcoll_reduce_get(RCOLL_UINT64, RCOLL_SUM)(&du, &au, &bu, 1);
    CHECK(du == 1, "uint64 sum wraps");
    int64_t ai = INT64_MIN, bi = -1, di;
    rcoll_reduce_get(RCOLL_INT64, RCOLL_SUM)(&di, &ai, &bi, 1);
    CHECK(di == INT64_MAX, "int64 sum wraps");
    uint8_t x = 200, y = 100, z;
    rcoll_reduce_get(RCOLL_UINT8, RCOLL_MAX)(&z, &x, &y, 1);
    CHECK(z == 200, "uint8 max is unsigned");
    int8_t sx = -100, sy = 100, sz;
    rcoll_reduce_get(RCOLL_INT8, RCOLL_MIN)(&sz, &sx, &sy, 1);
    CHECK(sz == -100, "int8 min is signed");
    /* AVG of integers: wrapped sum, then truncating division */
    int32_t p = 7, q = -2, r;
    rcoll_reduce_avg_final(RCOLL_INT32, &r, &p, &q, 1, 2);
    CHECK(r == 2, "int32 avg (7 + -2) / 2 = 2, got %d", r);
    int32_t m = -7, o = 0;
    rcoll_reduce_avg_final(RCOLL_INT32, &r, &m, &o, 1, 2);
    CHECK(r == -3, "int32 avg truncates toward zero, got %d", r);
}

/* Integer AVG at rank counts past what the type holds: the divisor is the
 * rank count itself, never the count cast to the element type (which was
 * 0 for int8/uint8 at 256 ranks: SIGFPE, and negative for int8 at
 * 128-255). The reference: the sum reduced modulo 2^bits by hand into the
 * type's range, then C's division of 64-bit integers (toward zero). */
static int64_t wrap_s(int64_t v, int bits)
{
    if (bits == 64)
        return v;
    int64_t m = (int64_t)1 << bits;
    v %= m;
    if (v < 0)
        v += m;
    return v >= m / 2 ? v - m : v;
}

static void test_avg_rank_counts(void)
{
    static const int nrs[] = {1, 2, 3, 127, 128, 255, 256, 1000, 65537,
                              2147483647};
    static const struct { rcoll_datatype_t dt; int bits, sgn; } ty[] = {
        {RCOLL_INT8, 8, 1}, {RCOLL_UINT8, 8, 0}, {RCOLL_INT32, 32, 1},
        {RCOLL_UINT32, 32, 0}, {RCOLL_INT64, 64, 1}, {RCOLL_UINT64, 64, 0}};
    /* operand pairs as raw 64-bit patterns; truncated to the type */
    static const uint64_t va[] = {0, 1, 127, 128, 255, 0x7fffffffu,
                                  0x80000000u, 0xffffffffu,
                                  0x7fffffffffffffffull,
                                  0x8000000000000000ull, ~0ull, 12345,
                                  0xdeadbeefcafef00dull};
    enum { NV = sizeof(va) / sizeof(va[0]) };
    for (size_t t = 0; t < sizeof(ty) / sizeof(ty[0]); t++) {
        int bits = ty[t].bits;
        size_t es = (size_t)bits / 8;
        uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
        for (size_t k = 0; k < sizeof(nrs) / sizeof(nrs[0]); k++) {
            int nr = nrs[k];
            unsigned char a[NV * NV * 8], b[NV * NV * 8], d[NV * NV * 8],
                d1[NV * NV * 8];
            int bad = 0;
            for (int i = 0; i < NV; i++)
                for (int j = 0; j < NV; j++) {
                    uint64_t x = va[i] & mask, y = va[j] & mask;
                    memcpy(a + (i * NV + j) * es, &x, es);
                    memcpy(b + (i * NV + j) * es, &y, es);
                }
            rcoll_reduce_avg_final(ty[t].dt, d, a, b, NV * NV, nr);
            rcoll_reduce_avg_scale(ty[t].dt, d1, a, NV * NV, nr);
            for (int i = 0; i < NV && !bad; i++)
                for (int j = 0; j < NV && !bad; j++) {
                    uint64_t x = va[i] & mask, y = va[j] & mask, got = 0,
                             got1 = 0, want, want1;
                    memcpy(&got, d + (i * NV + j) * es, es);
                    memcpy(&got1, d1 + (i * NV + j) * es, es);
                    uint64_t sum = (x + y) & mask;
                    if (ty[t].sgn) {
                        int64_t sv = wrap_s((int64_t)sum, bits),
                                xv = wrap_s((int64_t)x, bits);
                        want = (uint64_t)(sv / (int64_t)nr) & mask;
                        want1 = (uint64_t)(xv / (int64_t)nr) & mask;
                    } else {
                        want = (sum / (uint64_t)nr) & mask;
                        want1 = (x / (uint64_t)nr) & mask;
                    }
                    if (got != want || got1 != want1) {
                        bad = 1;
                        CHECK(0, "%s avg at %d ranks: (%llx + %llx) -> %llx "
                              "(want %llx), alone %llx (want %llx)",
                              rcoll_datatype_name(ty[t].dt), nr,
                              (unsigned long long)x, (unsigned long long)y,
                              (unsigned long long)got,
                              (unsigned long long)want,
                              (unsigned long long)got1,
                              (unsigned long long)want1);
                    }
                }
            if (!bad)
                CHECK(1, "");
        }
    }
}

static void test_nan_inf(void)
{
    float a[6] = {NAN, 1.0f, INFINITY, -INFINITY, INFINITY, 0.0f};
    float b[6] = {1.0f, NAN, 1.0f, -1.0f, -INFINITY, -0.0f};
    float d[6];
    rcoll_reduce_get(RCOLL_FLOAT32, RCOLL_MIN)(d, a, b, 6);
    CHECK(isnan(d[0]) && isnan(d[1]), "min propagates NaN");
    CHECK(d[2] == 1.0f && d[3] == -INFINITY && d[4] == -INFINITY, "min inf");
    rcoll_reduce_get(RCOLL_FLOAT32, RCOLL_MAX)(d, a, b, 6);
    CHECK(isnan(d[0]) && isnan(d[1]), "max propagates NaN");
    CHECK(d[2] == INFINITY && d[3] == -1.0f && d[4] == INFINITY, "max inf");
    rcoll_reduce_get(RCOLL_FLOAT32, RCOLL_SUM)(d, a, b, 6);
    CHECK(isnan(d[0]) && isnan(d[1]) && d[2] == INFINITY && isnan(d[4]),
          "sum: NaN, inf, inf + -inf = NaN");
    double da[2] = {NAN, 2.0}, db[2] = {3.0, NAN}, dd[2];
    rcoll_reduce_get(RCOLL_FLOAT64, RCOLL_PROD)(dd, da, db, 2);
    CHECK(isnan(dd[0]) && isnan(dd[1]), "double prod NaN");
    uint16_t ha[3] = {0x7e00 /* nan */, 0x7c00 /* inf */, 0x7bff /* max */};
    uint16_t hb[3] = {0x3c00, 0x3c00, 0x7bff}, hd[3];
    rcoll_reduce_get(RCOLL_FLOAT16, RCOLL_MAX)(hd, ha, hb, 3);
    CHECK((hd[0] & 0x7c00) == 0x7c00 && (hd[0] & 0x3ff), "half max NaN");
    rcoll_reduce_get(RCOLL_FLOAT16, RCOLL_SUM)(hd, ha, hb, 3);
    CHECK(hd[1] == 0x7c00 && hd[2] == 0x7c00, "half sum overflows to inf");
    uint16_t ba[1] = {0x7fc0}, bb[1] = {0x3f80}, bd[1];
    rcoll_reduce_get(RCOLL_BFLOAT16, RCOLL_MIN)(bd, ba, bb, 1);
    CHECK(isnan(rcoll_bf16_to_float(bd[0])), "bf16 min NaN");
    /* f16 sum rounds once: 2048 + 1 = 2049 is a tie -> 2048 (even) */
    uint16_t t1 = rcoll_float_to_half(2048.0f), t2 = rcoll_float_to_half(1.0f),
             t3;
    rcoll_reduce_get(RCOLL_FLOAT16, RCOLL_SUM)(&t3, &t1, &t2, 1);
    CHECK(rcoll_half_to_float(t3) == 2048.0f, "half 2048 + 1 = 2048 (tie)");
    uint16_t t4 = rcoll_float_to_half(3.0f), t5;
    rcoll_reduce_get(RCOLL_FLOAT16, RCOLL_SUM)(&t5, &t1, &t4, 1);
    CHECK(rcoll_half_to_float(t5) == 2052.0f, "half 2048 + 3 = 2052 (tie up)");
}

/* The 16-bit float kernels (vectorized where the CPU allows: F16C, AVX2)
 * on every 16-bit pattern against the scalar conversions checked
 * exhaustively above: a = every value, b = the values in other orders;
 * lengths that are not multiples of the vector width exercise the tails. */
static void test_16bit_kernels_exhaustive(void)
{
    static uint16_t a[65536], b[65536], d[65536];
    const unsigned mul[] = {1, 40503, 257, 3};
    for (int dt = RCOLL_FLOAT16; dt <= RCOLL_BFLOAT16; dt++) {
        float (*tof)(uint16_t) = dt == RCOLL_FLOAT16 ? rcoll_half_to_float
                                                     : rcoll_bf16_to_float;
        uint16_t (*fromf)(float) = dt == RCOLL_FLOAT16 ? rcoll_float_to_half
                                                       : rcoll_float_to_bf16;
        for (int op = 0; op < 4; op++) {
            rcoll_reduce_fn_t f = rcoll_reduce_get((rcoll_datatype_t)dt,
                                                   (rcoll_op_t)op);
            for (int m = 0; m < 4; m++) {
                for (uint32_t i = 0; i < 65536; i++) {
                    a[i] = (uint16_t)i;
                    b[i] = (uint16_t)(i * mul[m] + 12345u * (unsigned)m);
                }
                size_t n = 65536 - (size_t)m; /* tails of 0..3 elements */
                f(d, a, b, n);
                int bad = 0;
                uint32_t first = 0;
                for (size_t i = 0; i < n; i++) {
                    float x = tof(a[i]), y = tof(b[i]), r;
                    switch (op) {
                    case 0: r = x + y; break;
                    case 1: r = x * y; break;
                    case 2: r = (x < y || x != x) ? x : y; break;
                    default: r = (x > y || x != x) ? x : y; break;
                    }
                    uint16_t want = fromf(r);
                    int nan_both = r != r && tof(d[i]) != tof(d[i]);
                    if (d[i] != want && !nan_both && !bad++)
                        first = (uint32_t)i;
                }
                CHECK(bad == 0, "%s op %d pattern %d: %d wrong, first at "
                      "a=0x%04x b=0x%04x got 0x%04x", rcoll_datatype_name(
                          (rcoll_datatype_t)dt), op, m, bad, a[first],
                      b[first], d[first]);
            }
        }
    }
}

/* Every kernel at odd and prime lengths, from aligned and misaligned
 * starts (one element off), so each vector width's tail runs: full-range
 * integers (the high bit of unsigned types set, the extremes) and floats
 * of full precision. Bit-exact against references written here: ints by
 * ref.h's full-range rules; floats by one rounding of the exact two-input
 * result (exact in double for these inputs: 16-bit types are summed in
 * float, which is exact for them too). The element after the last must be
 * left alone. Run with RCOLL_SIMD=0 too (make check does), for the
 * portable 16-bit kernels. */
static void test_kernels_odd_lengths(void)
{
    static const size_t lens[] = {1, 2, 3, 5, 7, 9, 11, 13, 15, 17, 19, 23,
                                  29, 31, 33, 37, 61, 63, 65, 127, 129, 257,
                                  1031, 4099};
    const size_t nl = sizeof(lens) / sizeof(lens[0]), max = 4099 + 2;
    for (int dt = 0; dt < RCOLL_DATATYPE_COUNT; dt++) {
        rcoll_datatype_t d = (rcoll_datatype_t)dt;
        size_t s = rcoll_datatype_size(d);
        char *a = malloc(max * s), *b = malloc(max * s), *o = malloc(max * s),
             *e = malloc(max * s);
        for (int op = 0; op < RCOLL_OP_COUNT; op++) {
            rcoll_op_t p = (rcoll_op_t)op;
            rcoll_reduce_fn_t fn = rcoll_reduce_get(d, p);
            for (size_t li = 0; li < nl; li++) {
                for (size_t off = 0; off < 2; off++) {
                    size_t L = lens[li];
                    char *x = a + off * s, *y = b + off * s, *z = o + off * s;
                    if (ref_is_int(d)) {
                        ref_fill_wide(x, L, 0, d, p, 0, 21);
                        ref_fill_wide(y, L, 0, d, p, 1, 21);
                        ref_reduce_wide(e, L, 0, d, p, 2, 21);
                    } else {
                        ref_fp_fill(x, L, 0, d, p, 0, 21);
                        ref_fp_fill(y, L, 0, d, p, 1, 21);
                        ref_pair(e, x, y, L, d, p, 2);
                    }
                    /* the two references agree (ints) */
                    if (ref_is_int(d)) {
                        char *e2 = malloc(L * s);
                        ref_pair(e2, x, y, L, d, p, 2);
                        CHECK(ref_count_wrong(e, e2, L, d) == 0, "ref_pair "
                              "and ref_reduce_wide differ: %s op %d",
                              rcoll_datatype_name(d), op);
                        free(e2);
                    }
                    memset(z, 0xa5, (L + 1) * s);
                    if (p == RCOLL_AVG)
                        rcoll_reduce_avg_final(d, z, x, y, L, 2);
                    else
                        fn(z, x, y, L);
                    size_t w = ref_count_wrong(z, e, L, d);
                    int tail = 1;
                    for (size_t k = 0; k < s; k++)
                        tail &= (unsigned char)z[L * s + k] == 0xa5;
                    CHECK(w == 0 && tail, "%s op %d length %zu offset %zu: "
                          "%zu wrong%s", rcoll_datatype_name(d), op, L, off,
                          w, tail ? "" : ", wrote past the end");
                }
            }
        }
        free(a); free(b); free(o); free(e);
    }
}

/* The full-range rules on hand-picked values, so the reference itself is
 * checked: unsigned MIN/MAX with the high bit set, signed extremes. */
static void test_unsigned_extremes(void)
{
    uint64_t a = 0x8000000000000000ull, b = 1, d;
    rcoll_reduce_get(RCOLL_UINT64, RCOLL_MIN)(&d, &a, &b, 1);
    CHECK(d == 1, "uint64 min(2^63, 1) = 1, got %llx", (unsigned long long)d);
    rcoll_reduce_get(RCOLL_UINT64, RCOLL_MAX)(&d, &a, &b, 1);
    CHECK(d == a, "uint64 max(2^63, 1) = 2^63");
    uint32_t a32 = 0xffffffffu, b32 = 0x7fffffffu, d32;
    rcoll_reduce_get(RCOLL_UINT32, RCOLL_MAX)(&d32, &a32, &b32, 1);
    CHECK(d32 == 0xffffffffu, "uint32 max is unsigned");
    rcoll_reduce_get(RCOLL_UINT32, RCOLL_MIN)(&d32, &a32, &b32, 1);
    CHECK(d32 == 0x7fffffffu, "uint32 min is unsigned");
    int64_t s1 = INT64_MIN, s2 = INT64_MAX, sd;
    rcoll_reduce_get(RCOLL_INT64, RCOLL_MIN)(&sd, &s1, &s2, 1);
    CHECK(sd == INT64_MIN, "int64 min is signed");
    uint64_t av = UINT64_MAX, bv = UINT64_MAX;
    rcoll_reduce_avg_final(RCOLL_UINT64, &d, &av, &bv, 1, 2);
    CHECK(d == UINT64_MAX / 2, "uint64 avg of two maxima: the wrapped sum "
          "(2^64 - 2) / 2, got %llx", (unsigned long long)d);
    /* the reference agrees with the hand-computed values */
    uint64_t e;
    int rk = 0;
    for (; rk < 6 && ref_wide_bits(rk, 0, RCOLL_UINT64, RCOLL_MIN, 0) != 0;
         rk++)
        ;
    ref_reduce_wide(&e, 1, 0, RCOLL_UINT64, RCOLL_MAX, 6, 0);
    CHECK(e == UINT64_MAX, "ref: uint64 max over the extremes is 2^64-1");
    ref_reduce_wide(&e, 1, 0, RCOLL_UINT64, RCOLL_MIN, 6, 0);
    CHECK(e == 0 && rk < 6, "ref: uint64 min over the extremes is 0");
    int8_t e8;
    ref_reduce_wide(&e8, 1, 0, RCOLL_INT8, RCOLL_MIN, 6, 0);
    CHECK(e8 == -128, "ref: int8 min over the extremes is -128, got %d", e8);
}

int main(void)
{
    test_half_conversions();
    test_bf16_conversions();
    test_kernels_vs_scalar();
    test_kernels_odd_lengths();
    test_unsigned_extremes();
    test_16bit_kernels_exhaustive();
    test_wrap();
    test_avg_rank_counts();
    test_nan_inf();
    printf("test_reduce: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
