/* The floor of a one-way stream over loopback TCP on this machine, with
 * no library: a sender writes N messages of SIZE bytes (one send each,
 * TCP_NODELAY), a forked receiver reads them as fast as it can, waiting
 * in epoll_wait(0) and sched_yield between reads as rcoll's engine does
 * while it polls. Prints the sender's time per message: what a 2-rank
 * broadcast of SIZE bytes over TCP cannot beat (docs/performance.md, "Small messages in long runs").
 * Not built by make: cc -O2 -o tcp_floor benchmarks/tcp_floor.c
 * usage: tcp_floor SIZE N */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tcp_floor SIZE N\n");
        return 2;
    }
    size_t sz = (size_t)atol(argv[1]);
    long n = atol(argv[2]), warm = 1000;
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (sz == 0 || n <= warm || l < 0 ||
        bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0) {
        perror("tcp_floor: set-up");
        return 1;
    }
    pid_t p = fork();
    if (p == 0) { /* the receiver */
        int s = accept(l, NULL, NULL), ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN}, e;
        static char buf[16384];
        long long got = 0, want = (long long)sz * n;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
        epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
        while (got < want) {
            if (epoll_wait(ep, &e, 1, 0) <= 0) {
                sched_yield();
                continue;
            }
            ssize_t r = recv(s, buf, sizeof(buf), 0);
            if (r == 0)
                _exit(1);
            if (r > 0)
                got += r;
        }
        _exit(0);
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    char *m = calloc(1, sz);
    if (c < 0 || !m || connect(c, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("tcp_floor: connect");
        return 1;
    }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    double t0 = 0;
    for (long i = 0; i < n; i++) {
        if (i == warm)
            t0 = now();
        for (size_t off = 0; off < sz;) {
            ssize_t w = send(c, m + off, sz - off, 0);
            if (w <= 0) {
                perror("tcp_floor: send");
                return 1;
            }
            off += (size_t)w;
        }
    }
    double t = now() - t0;
    int st;
    waitpid(p, &st, 0);
    printf("%zu %.2f\n", sz, t * 1e6 / (double)(n - warm));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
