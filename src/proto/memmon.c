/* The memory monitor: which address ranges the process unmapped, or whose
 * pages it dropped, since a registration cache last looked (rcache.c).
 *
 * A registration pins the pages behind an address range at the time it is
 * made. If the program frees that memory (munmap, or free of a large
 * block, which glibc unmaps) and maps new memory at the same address, or
 * drops the pages (madvise MADV_DONTNEED, glibc's trimming), a cached
 * registration would still point at the old pages: a send from it would
 * carry stale bytes. So a range is cached only once it is watched here:
 * registered with a userfaultfd in write-protect mode (no page is ever
 * write-protected, so no fault ever waits on us) with the unmap, remove
 * and remap events, which the kernel reports for watched ranges whatever
 * made them (libc's free, a raw syscall, another library). A thread reads
 * the events as they come (the kernel holds a madvise(DONTNEED) until its
 * event is read) into a log of ranges; a cache applies what is new in the
 * log before it trusts a hit, after reading itself what the kernel has
 * queued, so that a range unmapped and mapped again before the thread
 * woke is never used through its old registration.
 *
 * Where userfaultfd is not available (an old kernel, a seccomp filter, a
 * range it cannot watch such as a file mapping), nothing is watched and
 * the caches register per use (rcoll-info says so). */
#define _GNU_SOURCE
#include "proto/memmon.h"
#include "util/util.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#define MEMMON_LOG 256 /* ranges remembered; a cache further behind drops
                          everything */

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;   /* the log */
    pthread_mutex_t rlock;  /* reading the fd and logging what it gave, so
                               that a sync never returns while the thread
                               holds an event it has read but not logged */
    int fd;                 /* -1: not available */
    char why[160];
    uint64_t gen;           /* ranges logged */
    uintptr_t lo[MEMMON_LOG], hi[MEMMON_LOG];
    unsigned long watched;  /* ranges registered */
} mm = {PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER,
        PTHREAD_MUTEX_INITIALIZER, -1, "", 0, {0}, {0}, 0};

static void memmon_log(uintptr_t lo, uintptr_t hi)
{
    pthread_mutex_lock(&mm.lock);
    mm.lo[mm.gen % MEMMON_LOG] = lo;
    mm.hi[mm.gen % MEMMON_LOG] = hi;
    __atomic_store_n(&mm.gen, mm.gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mm.lock);
}

/* Reads what the kernel has queued (non-blocking); 1 if it logged any. */
static int memmon_read(void)
{
    struct uffd_msg m[16];
    int any = 0;
    pthread_mutex_lock(&mm.rlock);
    for (;;) {
        ssize_t n = read(mm.fd, m, sizeof(m));
        if (n <= 0) {
            pthread_mutex_unlock(&mm.rlock);
            return any;
        }
        for (size_t i = 0; i < (size_t)n / sizeof(m[0]); i++) {
            switch (m[i].event) {
            case UFFD_EVENT_UNMAP:
            case UFFD_EVENT_REMOVE:
                memmon_log((uintptr_t)m[i].arg.remove.start,
                           (uintptr_t)m[i].arg.remove.end);
                any = 1;
                break;
            case UFFD_EVENT_REMAP:
                memmon_log((uintptr_t)m[i].arg.remap.from,
                           (uintptr_t)m[i].arg.remap.from +
                               (uintptr_t)m[i].arg.remap.len);
                any = 1;
                break;
            default: /* (no faults: nothing is write-protected) */
                break;
            }
        }
    }
}

static void *memmon_thread(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p = {.fd = mm.fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return NULL;
        memmon_read();
    }
}

static void memmon_init(void)
{
    int fd = (int)syscall(SYS_userfaultfd,
                          O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) {
        snprintf(mm.why, sizeof(mm.why), "userfaultfd: %s", strerror(errno));
        return;
    }
    struct uffdio_api api = {.api = UFFD_API,
                             .features = UFFD_FEATURE_EVENT_UNMAP |
                                         UFFD_FEATURE_EVENT_REMOVE |
                                         UFFD_FEATURE_EVENT_REMAP};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        snprintf(mm.why, sizeof(mm.why), "userfaultfd's unmap and remove "
                 "events: %s", strerror(errno));
        close(fd);
        return;
    }
    mm.fd = fd;
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, prev;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all); /* signals go to the application's threads */
    pthread_sigmask(SIG_SETMASK, &all, &prev);
    int rc = pthread_create(&t, &attr, memmon_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        /* without a reader, a watched madvise would wait: watch nothing */
        snprintf(mm.why, sizeof(mm.why), "pthread_create: %s",
                 strerror(rc));
        close(fd);
        mm.fd = -1;
        return;
    }
    pthread_setname_np(t, "rcoll-memmon");
}

int rcoll_memmon_available(char *why, size_t len)
{
    pthread_once(&mm.once, memmon_init);
    if (mm.fd < 0 && why)
        snprintf(why, len, "%s", mm.why);
    return mm.fd >= 0;
}

int rcoll_memmon_watch(const void *addr, size_t len)
{
    if (!rcoll_memmon_available(NULL, 0) || !len)
        return -1;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    uintptr_t hi = ((uintptr_t)addr + len + (uintptr_t)pg - 1) &
                   ~(uintptr_t)(pg - 1);
    struct uffdio_register r = {.range = {.start = lo, .len = hi - lo},
                                .mode = UFFDIO_REGISTER_MODE_WP};
    if (ioctl(mm.fd, UFFDIO_REGISTER, &r) != 0)
        return -1; /* a file mapping, or another watcher: not cached */
    __atomic_add_fetch(&mm.watched, 1, __ATOMIC_RELAXED);
    return 0;
}

uint64_t rcoll_memmon_sync(void)
{
    if (mm.fd < 0)
        return 0;
    memmon_read();
    return __atomic_load_n(&mm.gen, __ATOMIC_ACQUIRE);
}

uint64_t rcoll_memmon_changes(uint64_t since,
                              void (*fn)(void *arg, uintptr_t lo,
                                         uintptr_t hi),
                              void *arg)
{
    uintptr_t lo[MEMMON_LOG], hi[MEMMON_LOG];
    pthread_mutex_lock(&mm.lock);
    uint64_t gen = mm.gen, n = gen - since;
    if (n > MEMMON_LOG) { /* fell behind: everything may have changed */
        pthread_mutex_unlock(&mm.lock);
        fn(arg, 0, UINTPTR_MAX);
        return gen;
    }
    for (uint64_t i = 0; i < n; i++) {
        lo[i] = mm.lo[(since + i) % MEMMON_LOG];
        hi[i] = mm.hi[(since + i) % MEMMON_LOG];
    }
    pthread_mutex_unlock(&mm.lock);
    for (uint64_t i = 0; i < n; i++)
        fn(arg, lo[i], hi[i]);
    return gen;
}
