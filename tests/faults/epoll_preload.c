/* LD_PRELOAD shim for the descriptor test: makes epoll_ctl(EPOLL_CTL_MOD)
 * fail with ENOMEM from its FAULT_EPOLL_MOD_FAIL-th call on (default 1),
 * in the processes of the ranks listed in FAULT_EPOLL_RANKS (a
 * comma-separated list matched against RCOLL_RANK; unset: every process).
 * With FAULT_EPOLL_SMALLBUF=1 it also caps SO_SNDBUF/SO_RCVBUF at 64 KiB,
 * so that any large send fills its socket and waits for EPOLLOUT (the
 * case under test) instead of only some, by chance.
 * The point of the test: a send that waits for EPOLLOUT and loses it fails
 * at once with an error naming epoll_ctl and the peer, instead of sitting
 * until RCOLL_TIMEOUT. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

static int (*real_ctl)(int, int, int, struct epoll_event *);
static long from = -1, calls;

static int armed(void)
{
    const char *r = getenv("FAULT_EPOLL_RANKS"), *me = getenv("RCOLL_RANK");
    if (!r)
        return 1;
    if (!me)
        return 0;
    size_t n = strlen(me);
    for (const char *p = r; *p;) {
        if (!strncmp(p, me, n) && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    return 0;
}

__attribute__((visibility("default"))) int epoll_ctl(int epfd, int op, int fd,
                                                    struct epoll_event *ev)
{
    if (!real_ctl) {
        real_ctl = (int (*)(int, int, int, struct epoll_event *))dlsym(
            RTLD_NEXT, "epoll_ctl");
        const char *e = getenv("FAULT_EPOLL_MOD_FAIL");
        from = armed() ? (e ? atol(e) : 1) : 0;
    }
    if (op == EPOLL_CTL_MOD && from > 0 && ++calls >= from) {
        errno = ENOMEM;
        return -1;
    }
    return real_ctl(epfd, op, fd, ev);
}

static int (*real_setsockopt)(int, int, int, const void *, socklen_t);

__attribute__((visibility("default"))) int setsockopt(int fd, int level,
                                                     int name, const void *v,
                                                     socklen_t len)
{
    if (!real_setsockopt)
        real_setsockopt = (int (*)(int, int, int, const void *,
                                   socklen_t))dlsym(RTLD_NEXT, "setsockopt");
    const char *e = getenv("FAULT_EPOLL_SMALLBUF");
    if (e && atoi(e) && armed() && level == SOL_SOCKET &&
        (name == SO_SNDBUF || name == SO_RCVBUF) && len == sizeof(int)) {
        int small = 65536;
        return real_setsockopt(fd, level, name, &small, sizeof(small));
    }
    return real_setsockopt(fd, level, name, v, len);
}
