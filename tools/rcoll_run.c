/* rcoll-run: start N local processes of one program with the environment
 * rcoll_comm_init_env reads (RCOLL_RANK, RCOLL_SIZE, RCOLL_ROOT,
 * RCOLL_SECRET, RCOLL_LOCAL_RANK, RCOLL_LOCAL_SIZE). If one process fails
 * (non-zero exit or a signal), the others get SIGTERM, then SIGKILL after a
 * grace period, and rcoll-run exits non-zero. For many nodes use mpirun,
 * srun or torchrun. Does not link librcoll.
 *
 * Start-up placement (--spread MS, default 200): rank r starts bound to
 * one of the k CPUs rcoll-run may use, and after MS milliseconds every
 * thread of its process group that is still bound so gets rcoll-run's
 * whole CPU set back. Without it the scheduler may leave both ranks of a
 * small job on one core for the whole of a short run, which then takes
 * several times as long. Unlike mpirun's default binding nothing stays
 * bound, so jobs that share a machine are not pinned onto the same cores
 * for good.
 * With k or fewer ranks, rank r takes the r-th CPU; with more, the CPUs
 * take blocks of consecutive ranks (rank r the (r k / N)-th), as hosts
 * do under host-contiguous placement: the trees whose subtrees are
 * blocks of ranks (binomial broadcast, reduce, gather, scatter) then have
 * their forwarding ranks (multiples of 2, 4, ...) on different CPUs,
 * where dealt out one by one (r mod k) they would crowd onto the same
 * ones. The price: an exchange between ranks r and r + N/2 (the first and
 * biggest of a shared-memory all-reduce) crosses CPUs instead of staying
 * in one core's cache (docs/performance.md). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rcoll-run -n N [-t] [-k] [--timeout SEC] [--spread MS] "
            "[--] program [args...]\n"
            "  -n N           number of processes (ranks 0..N-1)\n"
            "  -t, --tag      prefix every output line with [rank]\n"
            "  -k, --keep-going  do not kill the others when one fails\n"
            "  --timeout SEC  kill everything after SEC seconds (exit 124)\n"
            "  --spread MS    start each rank bound to one of the k CPUs "
            "rcoll-run may use\n"
            "                 (rank r: the r-th; more than k ranks: blocks of "
            "N/k ranks),\n"
            "                 unbound after MS ms (default 200; 0: off)\n"
            "  -h, --help     this text\n"
            "Sets RCOLL_RANK, RCOLL_SIZE, RCOLL_ROOT=127.0.0.1:PORT, a random "
            "RCOLL_SECRET,\nRCOLL_LOCAL_RANK and RCOLL_LOCAL_SIZE for each "
            "process.\n");
}

static volatile sig_atomic_t got_signal;
static void on_signal(int s) { got_signal = s; }
/* SIGUSR1/SIGUSR2 are passed on to every rank (rcoll dumps what is in
 * flight on USR1, RCOLL_DUMP_SIGNAL) and the job goes on; left at their
 * default they would end rcoll-run and orphan the ranks, each in its own
 * process group */
static volatile sig_atomic_t got_fwd;
static void on_fwd(int s) { got_fwd = s; }

/* A listening socket on a free loopback port, kept open and handed to
 * rank 0 (RCOLL_ROOT_FD): choosing a port, closing it and letting rank 0
 * bind it later left a window in which another connection took it. */
static int root_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(fd, 4096) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    pid_t pid;
    int out_fd, err_fd;     /* with -t */
    char obuf[4096], ebuf[4096];
    size_t olen, elen;
    int status, exited;
    int cpu;                /* bound to at start (--spread), or -1 */
} child_t;

/* The k-th CPU of s, or -1. */
static int nth_cpu(const cpu_set_t *s, int k)
{
    for (int c = 0, i = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, s) && i++ == k)
            return c;
    return -1;
}

/* The end of --spread: every thread of the ranks' process groups that is
 * still bound to its rank's start CPU alone gets `all` back (one that
 * bound itself elsewhere keeps its own choice). */
static void unspread(const child_t *ch, int n, const cpu_set_t *all)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        char path[288], buf[512];
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *rp = strrchr(buf, ')'); /* after the command's name */
        int pgrp;
        if (!rp || sscanf(rp + 1, " %*c %*d %d", &pgrp) != 1)
            continue;
        const child_t *c = NULL;
        for (int r = 0; r < n && !c; r++)
            if (ch[r].pid == pgrp && !ch[r].exited && ch[r].cpu >= 0)
                c = &ch[r];
        if (!c)
            continue;
        snprintf(path, sizeof(path), "/proc/%s/task", e->d_name);
        DIR *t = opendir(path);
        struct dirent *te;
        while (t && (te = readdir(t))) {
            pid_t tid = (pid_t)atoi(te->d_name);
            cpu_set_t cur;
            if (tid <= 0 || sched_getaffinity(tid, sizeof(cur), &cur))
                continue;
            if (CPU_COUNT(&cur) == 1 && CPU_ISSET(c->cpu, &cur))
                sched_setaffinity(tid, sizeof(*all), all);
        }
        if (t)
            closedir(t);
    }
    closedir(d);
}

/* Writes complete lines from buf with a [rank] prefix. */
static void flush_lines(int rank, char *buf, size_t *len, FILE *to, int all)
{
    size_t start = 0;
    for (size_t i = 0; i < *len; i++) {
        if (buf[i] == '\n') {
            fprintf(to, "[%d] %.*s\n", rank, (int)(i - start), buf + start);
            start = i + 1;
        }
    }
    if (all && start < *len) {
        fprintf(to, "[%d] %.*s\n", rank, (int)(*len - start), buf + start);
        start = *len;
    }
    memmove(buf, buf + start, *len - start);
    *len -= start;
    fflush(to);
}

static void pump(child_t *c, int rank, int fd_is_err)
{
    int *fd = fd_is_err ? &c->err_fd : &c->out_fd;
    char *buf = fd_is_err ? c->ebuf : c->obuf;
    size_t *len = fd_is_err ? &c->elen : &c->olen;
    FILE *to = fd_is_err ? stderr : stdout;
    ssize_t n = read(*fd, buf + *len, sizeof(c->obuf) - *len);
    if (n > 0) {
        *len += (size_t)n;
        flush_lines(rank, buf, len, to, *len == sizeof(c->obuf));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        flush_lines(rank, buf, len, to, 1);
        close(*fd);
        *fd = -1;
    }
}

int main(int argc, char **argv)
{
    int n = -1, tag = 0, keep = 0, i;
    double timeout = 0, spread_ms = 200;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "-np")) {
            if (++i >= argc)
                break;
            n = atoi(argv[i]);
        } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--tag")) {
            tag = 1;
        } else if (!strcmp(argv[i], "-k") || !strcmp(argv[i], "--keep-going")) {
            keep = 1;
        } else if (!strcmp(argv[i], "--timeout")) {
            if (++i >= argc)
                break;
            timeout = atof(argv[i]);
        } else if (!strcmp(argv[i], "--spread")) {
            if (++i >= argc)
                break;
            spread_ms = atof(argv[i]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "rcoll-run: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (n < 1 || i >= argc) {
        usage(stderr);
        return 2;
    }
    int port = 0, lfd = root_listener(&port);
    if (lfd < 0) {
        fprintf(stderr, "rcoll-run: cannot find a free port: %s\n",
                strerror(errno));
        return 1;
    }
    unsigned char sec[16];
    char secret[33];
    int rfd = open("/dev/urandom", O_RDONLY);
    if (rfd < 0 || read(rfd, sec, 16) != 16) {
        fprintf(stderr, "rcoll-run: /dev/urandom: %s\n", strerror(errno));
        return 1;
    }
    close(rfd);
    for (int k = 0; k < 16; k++)
        sprintf(secret + 2 * k, "%02x", sec[k]);

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct sigaction fa = {.sa_handler = on_fwd};
    sigaction(SIGUSR1, &fa, NULL);
    sigaction(SIGUSR2, &fa, NULL);

    child_t *ch = calloc((size_t)n, sizeof(*ch));
    if (!ch)
        return 1;
    /* --spread: the CPUs we may use */
    cpu_set_t all;
    int ncpu = 0;
    if (spread_ms > 0 && n > 1 && !sched_getaffinity(0, sizeof(all), &all))
        ncpu = CPU_COUNT(&all);
    char root[64], sz[16];
    snprintf(root, sizeof(root), "127.0.0.1:%d", port);
    snprintf(sz, sizeof(sz), "%d", n);
    for (int r = 0; r < n; r++) {
        int op[2] = {-1, -1}, ep[2] = {-1, -1};
        if (tag && (pipe2(op, O_CLOEXEC) || pipe2(ep, O_CLOEXEC))) {
            perror("rcoll-run: pipe");
            return 1;
        }
        ch[r].cpu = ncpu <= 0 ? -1
                    : nth_cpu(&all, n <= ncpu ? r : (int)((long)r * ncpu / n));
        pid_t pid = fork();
        if (pid < 0) {
            perror("rcoll-run: fork");
            return 1;
        }
        if (pid == 0) {
            char rs[16];
            setpgid(0, 0);
            if (ch[r].cpu >= 0) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(ch[r].cpu, &one);
                sched_setaffinity(0, sizeof(one), &one);
            }
            snprintf(rs, sizeof(rs), "%d", r);
            setenv("RCOLL_RANK", rs, 1);
            setenv("RCOLL_LOCAL_RANK", rs, 1);
            setenv("RCOLL_SIZE", sz, 1);
            setenv("RCOLL_LOCAL_SIZE", sz, 1);
            setenv("RCOLL_ROOT", root, 1);
            setenv("RCOLL_SECRET", secret, 1);
            if (r == 0) { /* the root's socket: a copy without CLOEXEC */
                char fs[16];
                int fd = fcntl(lfd, F_DUPFD, 3);
                snprintf(fs, sizeof(fs), "%d", fd);
                if (fd >= 0)
                    setenv("RCOLL_ROOT_FD", fs, 1);
            } else {
                unsetenv("RCOLL_ROOT_FD");
            }
            if (tag) {
                dup2(op[1], 1);
                dup2(ep[1], 2);
            }
            execvp(argv[i], argv + i);
            fprintf(stderr, "rcoll-run: cannot run %s: %s\n", argv[i],
                    strerror(errno));
            _exit(127);
        }
        setpgid(pid, pid);
        ch[r].pid = pid;
        ch[r].out_fd = ch[r].err_fd = -1;
        if (tag) {
            close(op[1]);
            close(ep[1]);
            ch[r].out_fd = op[0];
            ch[r].err_fd = ep[0];
        }
    }
    close(lfd); /* rank 0 has its copy */

    int alive = n, rc = 0, killing = 0, spread = ncpu > 0;
    double t0 = now(), kill_at = 0;
    struct pollfd *pfd = calloc((size_t)(2 * n), sizeof(*pfd));
    while (alive > 0 || (tag && pfd)) {
        /* output */
        int np = 0;
        if (tag) {
            for (int r = 0; r < n; r++) {
                pfd[np].fd = ch[r].out_fd;
                pfd[np++].events = POLLIN;
                pfd[np].fd = ch[r].err_fd;
                pfd[np++].events = POLLIN;
            }
            int open_fds = 0;
            for (int k = 0; k < np; k++)
                open_fds += pfd[k].fd >= 0;
            if (!open_fds && alive == 0)
                break;
            if (poll(pfd, (nfds_t)np, 50) > 0)
                for (int k = 0; k < np; k++)
                    if (pfd[k].fd >= 0 && pfd[k].revents)
                        pump(&ch[k / 2], k / 2, k % 2);
        } else {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        /* exits */
        for (;;) {
            int st;
            pid_t p = waitpid(-1, &st, WNOHANG);
            if (p <= 0)
                break;
            for (int r = 0; r < n; r++) {
                if (ch[r].pid != p || ch[r].exited)
                    continue;
                ch[r].exited = 1;
                ch[r].status = st;
                alive--;
                int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                if (bad) {
                    if (WIFSIGNALED(st))
                        fprintf(stderr, "rcoll-run: rank %d (pid %d) killed "
                                "by signal %d (%s)\n", r, (int)p,
                                WTERMSIG(st), strsignal(WTERMSIG(st)));
                    else
                        fprintf(stderr, "rcoll-run: rank %d (pid %d) exited "
                                "with status %d\n", r, (int)p,
                                WEXITSTATUS(st));
                    if (!rc)
                        rc = WIFEXITED(st) ? WEXITSTATUS(st)
                                           : 128 + WTERMSIG(st);
                    if (!keep && !killing) {
                        killing = 1;
                        kill_at = now() + 3.0;
                        for (int q = 0; q < n; q++)
                            if (!ch[q].exited)
                                kill(-ch[q].pid, SIGTERM);
                    }
                }
            }
        }
        if (spread && now() - t0 >= spread_ms * 1e-3) {
            unspread(ch, n, &all);
            spread = 0;
        }
        if (got_fwd) {
            int sig = got_fwd;
            got_fwd = 0;
            for (int q = 0; q < n; q++)
                if (!ch[q].exited)
                    kill(-ch[q].pid, sig);
        }
        if (got_signal && !killing) {
            killing = 1;
            kill_at = now() + 3.0;
            for (int q = 0; q < n; q++)
                if (!ch[q].exited)
                    kill(-ch[q].pid, SIGTERM);
            if (!rc)
                rc = 128 + got_signal;
        }
        if (timeout > 0 && !killing && now() - t0 > timeout) {
            fprintf(stderr, "rcoll-run: timeout after %g s; killing all "
                    "ranks\n", timeout);
            killing = 1;
            kill_at = now() + 3.0;
            rc = 124;
            for (int q = 0; q < n; q++)
                if (!ch[q].exited)
                    kill(-ch[q].pid, SIGTERM);
        }
        if (killing && kill_at && now() > kill_at) {
            for (int q = 0; q < n; q++)
                if (!ch[q].exited)
                    kill(-ch[q].pid, SIGKILL);
            kill_at = 0;
        }
    }
    free(pfd);
    free(ch);
    return rc;
}
