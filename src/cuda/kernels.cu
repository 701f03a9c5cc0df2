/* CUDA reduction kernels: dst[i] = a[i] op b[i] for every rcoll datatype
 * and op, and AVG's last step dst[i] = (a[i] + b[i]) / nranks, with the
 * same arithmetic as the CPU kernels (src/reduce), so that results are
 * bit-identical whichever side reduces: integers wrap (unsigned
 * arithmetic), MIN/MAX propagate NaN, float16/bfloat16 are computed in
 * float32 and rounded to nearest even once, AVG divides in double (16-bit
 * types: their float sum, rounded to float then to the type, as the CPU
 * does), integers truncate.
 *
 * Built by nvcc into a fatbin (sm_80, sm_90 and compute_90 PTX for later
 * GPUs) that is embedded in librcoll and loaded with the driver API
 * (src/cuda/cuda.c), so librcoll has no link-time CUDA dependency. Kernel
 * names are extern "C": rcoll_red_<type>_<op>, rcoll_avg_<type>.
 *
 * Vectorized: each thread handles VEC consecutive elements through 16-byte
 * loads and stores when all three pointers are 16-byte aligned (the launch
 * picks the aligned kernel variant, suffix _v), else one element per
 * iteration; a grid-stride loop covers any count. */
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

template <typename T> struct Acc { typedef T type; };
template <> struct Acc<__half> { typedef float type; };
template <> struct Acc<__nv_bfloat16> { typedef float type; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type ld(T v) { return v; }
template <> __device__ __forceinline__ float ld<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T st(typename Acc<T>::type v) { return (T)v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* wrapping integer arithmetic: compute in the unsigned type */
template <typename T> struct U { typedef T type; };
template <> struct U<int8_t> { typedef uint8_t type; };
template <> struct U<int32_t> { typedef uint32_t type; };
template <> struct U<int64_t> { typedef uint64_t type; };

template <typename T> __device__ __forceinline__ bool isnan_(T) { return false; }
__device__ __forceinline__ bool isnan_(float x) { return x != x; }
__device__ __forceinline__ bool isnan_(double x) { return x != x; }

struct OpSum { template <typename A> __device__ static A f(A a, A b) { return a + b; } };
struct OpProd { template <typename A> __device__ static A f(A a, A b) { return a * b; } };
struct OpMin { template <typename A> __device__ static A f(A a, A b) {
    return isnan_(a) ? a : isnan_(b) ? b : (b < a ? b : a); } };
struct OpMax { template <typename A> __device__ static A f(A a, A b) {
    return isnan_(a) ? a : isnan_(b) ? b : (b > a ? b : a); } };

template <typename T, typename Op> __device__ __forceinline__ T apply(T a, T b)
{
    return st<T>(Op::template f<typename Acc<T>::type>(ld(a), ld(b)));
}
/* sums and products of integers wrap */
#define WRAP(T)                                                               \
    template <> __device__ __forceinline__ T apply<T, OpSum>(T a, T b)        \
    { return (T)(typename U<T>::type)((typename U<T>::type)a + (typename U<T>::type)b); } \
    template <> __device__ __forceinline__ T apply<T, OpProd>(T a, T b)       \
    { return (T)(typename U<T>::type)((typename U<T>::type)a * (typename U<T>::type)b); }
WRAP(int8_t) WRAP(uint8_t) WRAP(int32_t) WRAP(uint32_t) WRAP(int64_t) WRAP(uint64_t)

template <typename T, typename Op>
__device__ void red(T *dst, const T *a, const T *b, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride)
        dst[i] = apply<T, Op>(a[i], b[i]);
}

/* 16 bytes per thread per iteration; the tail (n % VEC) element-wise */
template <typename T, typename Op>
__device__ void red_v(T *dst, const T *a, const T *b, size_t n)
{
    const int VEC = 16 / sizeof(T);
    size_t nv = n / VEC;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    const uint4 *av = (const uint4 *)a, *bv = (const uint4 *)b;
    uint4 *dv = (uint4 *)dst;
    for (size_t k = i; k < nv; k += stride) {
        uint4 x = av[k], y = bv[k], z;
        const T *xs = (const T *)&x, *ys = (const T *)&y;
        T *zs = (T *)&z;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            zs[j] = apply<T, Op>(xs[j], ys[j]);
        dv[k] = z;
    }
    for (size_t k = nv * VEC + i; k < n; k += stride)
        dst[k] = apply<T, Op>(a[k], b[k]);
}

template <typename T> __device__ __forceinline__ T avg1(T a, T b, int n)
{
    typedef typename U<T>::type UT;
    T s = (T)(UT)((UT)a + (UT)b); /* the wrapped sum, then truncate */
    /* divide by the count as a 64-bit integer of T's signedness, as the
     * CPU does: (T)n is 0 for 8-bit types at 256 ranks */
    if ((T)-1 < (T)0)
        return (T)((long long)s / (long long)n);
    return (T)((unsigned long long)s / (unsigned long long)n);
}
__device__ __forceinline__ float avg1(float a, float b, int n)
{ return (float)(((double)a + (double)b) / n); }
__device__ __forceinline__ double avg1(double a, double b, int n)
{ return (a + b) / n; }
/* as the CPU does it: the sum in float, divided in double, rounded to
 * float, then to the 16-bit type */
__device__ __forceinline__ __half avg1(__half a, __half b, int n)
{ return __float2half_rn((float)((double)(__half2float(a) + __half2float(b)) / n)); }
__device__ __forceinline__ __nv_bfloat16 avg1(__nv_bfloat16 a, __nv_bfloat16 b, int n)
{ return __float2bfloat16_rn((float)((double)(__bfloat162float(a) + __bfloat162float(b)) / n)); }

template <typename T>
__device__ void avg(T *dst, const T *a, const T *b, size_t n, int nranks)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride)
        dst[i] = avg1(a[i], b[i], nranks);
}

#define KOP(T, tn, Op, on)                                                    \
    extern "C" __global__ void rcoll_red_##tn##_##on(T *d, const T *a,        \
                                                     const T *b, size_t n)    \
    { red<T, Op>(d, a, b, n); }                                               \
    extern "C" __global__ void rcoll_red_##tn##_##on##_v(T *d, const T *a,    \
                                                         const T *b, size_t n) \
    { red_v<T, Op>(d, a, b, n); }
#define KTYPE(T, tn)                                                          \
    KOP(T, tn, OpSum, sum) KOP(T, tn, OpProd, prod) KOP(T, tn, OpMin, min)   \
    KOP(T, tn, OpMax, max)                                                    \
    extern "C" __global__ void rcoll_avg_##tn(T *d, const T *a, const T *b,   \
                                              size_t n, int nranks)           \
    { avg<T>(d, a, b, n, nranks); }
KTYPE(int8_t, int8)
KTYPE(uint8_t, uint8)
KTYPE(int32_t, int32)
KTYPE(uint32_t, uint32)
KTYPE(int64_t, int64)
KTYPE(uint64_t, uint64)
KTYPE(__half, float16)
KTYPE(__nv_bfloat16, bfloat16)
KTYPE(float, float32)
KTYPE(double, float64)
