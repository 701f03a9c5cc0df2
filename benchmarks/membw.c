/* The machine's limits for benchmarks/compare: one core's bandwidth for
 * memcpy and for the float reduction a[i] += b[i] over buffers much larger
 * than the caches (default 256 MiB). Best of 5 passes, in GB/s of one
 * buffer's bytes per second (what a collective's busbw counts).
 * usage: membw [BYTES] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (256u << 20);
    size_t n = bytes / sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b)
        return 1;
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i & 1023);
        b[i] = 1.0f;
    }
    double best_add = 1e9, best_cpy = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
        double t1 = now();
        memcpy(a, b, bytes);
        double t2 = now();
        if (t1 - t0 < best_add)
            best_add = t1 - t0;
        if (t2 - t1 < best_cpy)
            best_cpy = t2 - t1;
    }
    printf("reduce %.2f\nmemcpy %.2f\n", bytes / best_add / 1e9,
           bytes / best_cpy / 1e9);
    free(a);
    free(b);
    return 0;
}
