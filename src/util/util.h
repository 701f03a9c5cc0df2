/* Internal utilities: status/error messages, logging, time, random,
 * SipHash (the connection MAC), small helpers. */
#ifndef RCOLL_UTIL_H
#define RCOLL_UTIL_H

#include "config.h"
#include <rcoll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define RCOLL_HIDDEN __attribute__((visibility("hidden")))
#define rcoll_likely(x)   __builtin_expect(!!(x), 1)
#define rcoll_unlikely(x) __builtin_expect(!!(x), 0)

/* A busy-wait loop's pause (lets the sibling hyperthread run). */
static inline void rcoll_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}
#define RCOLL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RCOLL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- logging ---- */
typedef enum {
    RCOLL_LOG_NONE = 0, RCOLL_LOG_WARN, RCOLL_LOG_INFO, RCOLL_LOG_DEBUG,
    RCOLL_LOG_TRACE
} rcoll_log_level_t;

enum { /* subsystems, a bit each */
    RCOLL_SUBSYS_INIT = 1 << 0, RCOLL_SUBSYS_BOOT = 1 << 1,
    RCOLL_SUBSYS_NET = 1 << 2, RCOLL_SUBSYS_COLL = 1 << 3,
    RCOLL_SUBSYS_TUNE = 1 << 4, RCOLL_SUBSYS_ALL = 0xffff
};

extern int rcoll__log_level;   /* from RCOLL_DEBUG */
extern int rcoll__log_subsys;  /* from RCOLL_DEBUG_SUBSYS */
extern __thread int rcoll__log_rank; /* this thread's rank, -1 */

void rcoll__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define rcoll_log(_lvl, _sub, ...)                                           \
    do {                                                                     \
        if (rcoll_unlikely((_lvl) <= rcoll__log_level &&                     \
                           (((_sub) & rcoll__log_subsys) ||                  \
                            (_lvl) == RCOLL_LOG_WARN)))                      \
            rcoll__log((_lvl), __FILE__, __LINE__, __VA_ARGS__);             \
    } while (0)
#define rcoll_warn(...)        rcoll_log(RCOLL_LOG_WARN, RCOLL_SUBSYS_ALL, __VA_ARGS__)
#define rcoll_info(_s, ...)    rcoll_log(RCOLL_LOG_INFO, _s, __VA_ARGS__)
#define rcoll_debug(_s, ...)   rcoll_log(RCOLL_LOG_DEBUG, _s, __VA_ARGS__)
#define rcoll_trace(_s, ...)   rcoll_log(RCOLL_LOG_TRACE, _s, __VA_ARGS__)

/* ---- thread-local last error ---- */
/* Sets this thread's rcoll_last_error() message and returns `status`. */
rcoll_status_t rcoll__set_error(rcoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void rcoll__set_error_str(const char *msg);
void rcoll__clear_error(void);

/* ---- time ---- */
double rcoll_time_sec(void); /* monotonic seconds */

/* ---- random bytes (getrandom / urandom) ---- */
rcoll_status_t rcoll_random_bytes(void *buf, size_t len);

/* ---- SipHash-2-4: keyed 64-bit MAC, key = the job's 128-bit secret ---- */
uint64_t rcoll_siphash(const uint8_t key[16], const void *data, size_t len);

/* ---- CRC32C (Castagnoli): SSE4.2 instruction when the CPU has it ---- */
uint32_t rcoll_crc32c(uint32_t crc, const void *data, size_t len);

/* ---- misc ---- */
const char *rcoll_datatype_name(rcoll_datatype_t dt); /* nccl-tests names */
const char *rcoll_op_name(rcoll_op_t op);
int rcoll_hex_encode(const void *in, size_t len, char *out, size_t outlen);
int rcoll_hex_decode(const char *in, void *out, size_t len);
const char *rcoll_hostname(void);
/* Maps every page of [p, p + len) now (for writing if `write`, else for
 * reading), so that the first calls that use a buffer do not take its
 * page faults one page at a time. */
void rcoll_prefault(void *p, size_t len, int write);

/* ---- open files ---- */
/* Raises the soft RLIMIT_NOFILE to `want` descriptors, at most to the hard
 * limit, if it is lower (a communicator needs one or more per peer over
 * TCP). Returns the soft limit now. */
unsigned long rcoll_fd_limit_raise(unsigned long want);
/* Descriptors this process has open (from /proc/self/fd), or -1. */
long rcoll_fd_open_count(void);
/* For a call that failed with `err`: when it is EMFILE or ENFILE, text
 * naming the limit and what to do, else "" (buf is returned). */
const char *rcoll_fd_limit_hint(int err, char *buf, size_t len);

#endif
