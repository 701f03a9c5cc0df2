/* Time, randomness, SipHash, hex, names. */
#include "util.h"
#include "params.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_GETRANDOM
#include <sys/random.h>
#endif

double rcoll_time_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

rcoll_status_t rcoll_random_bytes(void *buf, size_t len)
{
    uint8_t *p = buf;
    size_t got = 0;
#ifdef HAVE_GETRANDOM
    while (got < len) {
        ssize_t n = getrandom(p + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t)n;
    }
#endif
    if (got < len) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return RCOLL_ERR_SYSTEM;
        while (got < len) {
            ssize_t n = read(fd, p + got, len - got);
            if (n <= 0) {
                close(fd);
                return RCOLL_ERR_SYSTEM;
            }
            got += (size_t)n;
        }
        close(fd);
    }
    return RCOLL_OK;
}

/* SipHash-2-4 (Aumasson & Bernstein), written from the paper's description. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                             \
    do {                                                                     \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);            \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                               \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                               \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);            \
    } while (0)

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint64_t rcoll_siphash(const uint8_t key[16], const void *data, size_t len)
{
    const uint8_t *in = data;
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
    uint64_t v3 = 0x7465646279746573ULL ^ k1;
    uint64_t b = ((uint64_t)len) << 56;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        uint64_t m = le64(in + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t j = 0; i + j < len; j++)
        b |= ((uint64_t)in[i + j]) << (8 * j);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static const char *const dt_names[RCOLL_DATATYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
    "bfloat16", "float", "double"};

/* CRC32C, reflected polynomial 0x82F63B78. The table path is the
 * reference; the SSE4.2 path computes the same function 8 bytes a time. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_hw;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    crc_hw = __builtin_cpu_supports("sse4.2") &&
             (rcoll_config_init() != RCOLL_OK || !rcoll_config.crc_soft);
#endif
}

static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t len)
{
    while (len--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t
crc_hw_run(uint32_t c, const uint8_t *p, size_t len)
{
    uint64_t c64 = c;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        len -= 8;
    }
    c = (uint32_t)c64;
    while (len--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t rcoll_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    uint32_t c = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw)
        return ~crc_hw_run(c, data, len);
#endif
    return ~crc_soft(c, data, len);
}

const char *rcoll_datatype_name(rcoll_datatype_t dt)
{
    return ((unsigned)dt < RCOLL_DATATYPE_COUNT) ? dt_names[dt] : "invalid";
}

static const char *const op_names[RCOLL_OP_COUNT] = {"sum", "prod", "min",
                                                     "max", "avg"};

const char *rcoll_op_name(rcoll_op_t op)
{
    return ((unsigned)op < RCOLL_OP_COUNT) ? op_names[op] : "invalid";
}

RCOLL_API size_t rcoll_datatype_size(rcoll_datatype_t dt)
{
    static const size_t sz[RCOLL_DATATYPE_COUNT] = {1, 1, 4, 4, 8, 8,
                                                    2, 2, 4, 8};
    return ((unsigned)dt < RCOLL_DATATYPE_COUNT) ? sz[dt] : 0;
}

RCOLL_API const char *rcoll_version(void)
{
    return PACKAGE_VERSION;
}

int rcoll_hex_encode(const void *in, size_t len, char *out, size_t outlen)
{
    static const char hx[] = "0123456789abcdef";
    const uint8_t *p = in;
    if (outlen < 2 * len + 1)
        return -1;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * len] = '\0';
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes exactly 2*len hex digits; returns 0 or -1. */
int rcoll_hex_decode(const char *in, void *out, size_t len)
{
    uint8_t *p = out;
    if (strlen(in) != 2 * len)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int h = hexval(in[2 * i]), l = hexval(in[2 * i + 1]);
        if (h < 0 || l < 0)
            return -1;
        p[i] = (uint8_t)(h << 4 | l);
    }
    return 0;
}

const char *rcoll_hostname(void)
{
    static __thread char name[256];
    if (!name[0] && gethostname(name, sizeof(name) - 1) != 0)
        strcpy(name, "?");
    return name;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#define MADV_POPULATE_WRITE 23
#endif

/* One madvise for the range, or a touch per page where the kernel lacks
 * MADV_POPULATE_* (before 5.14). */
void rcoll_prefault(void *p, size_t len, int write)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0)
        pg = 4096;
    if (!p || !len)
        return;
    uintptr_t lo = (uintptr_t)p & ~((uintptr_t)pg - 1);
    size_t l = len + ((uintptr_t)p - lo);
    if (madvise((void *)lo, l, write ? MADV_POPULATE_WRITE
                                     : MADV_POPULATE_READ) == 0)
        return;
    for (size_t o = 0; o < len; o += (size_t)pg) {
        if (write) /* a write fault now, not later */
            __atomic_fetch_add((char *)p + o, 0, __ATOMIC_RELAXED);
        else
            (void)*(volatile char *)((char *)p + o);
    }
}

unsigned long rcoll_fd_limit_raise(unsigned long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
                        ? (rlim_t)want
                        : rl.rlim_max;
        if (to > rl.rlim_cur) {
            struct rlimit nl = {to, rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &nl) == 0)
                rl.rlim_cur = to;
        }
    }
    return (unsigned long)rl.rlim_cur;
}

long rcoll_fd_open_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    long n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

const char *rcoll_fd_limit_hint(int err, char *buf, size_t len)
{
    struct rlimit rl;
    buf[0] = '\0';
    if (err == ENFILE)
        snprintf(buf, len, " (the system's table of open files is full: "
                 "fs.file-max)");
    else if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(buf, len, " (this process has used its RLIMIT_NOFILE of "
                 "%llu open files, hard limit %llu: a communicator over TCP "
                 "takes RCOLL_TCP_NSOCKS per peer; raise the hard limit, "
                 "e.g. ulimit -Hn, or lower RCOLL_TCP_NSOCKS)",
                 (unsigned long long)rl.rlim_cur,
                 (unsigned long long)rl.rlim_max);
    return buf;
}
