/* rcoll_comm_dump and the dump signal (RCOLL_DUMP_SIGNAL): every
 * communicator's state and each operation in flight with what it waits
 * for. */
#include "core.h"
#include "util/params.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One communicator: its state and every posted operation with what it
 * waits for. Reads the schedules' counters without the engine lock (they
 * are plain ints; a dump is a snapshot for a human). */
static void comm_dump_one(struct rcoll_comm *c, FILE *f)
{
    double now = rcoll_time_sec();
    pthread_mutex_lock(&c->lock);
    fprintf(f, "rcoll: comm %p rank %d of %d (%s pid %d), up %.1f s, %llu "
            "operations posted, %s%s%s\n", (void *)c, c->rank, c->nranks,
            rcoll_hostname(), (int)getpid(), now - c->created,
            (unsigned long long)__atomic_load_n(&c->coll_seq,
                                                __ATOMIC_RELAXED),
            c->error == RCOLL_OK ? "healthy" : "FAILED: ",
            c->error == RCOLL_OK ? "" : rcoll_status_string(c->error),
            c->error == RCOLL_OK ? "" : "");
    if (c->error != RCOLL_OK)
        fprintf(f, "rcoll:   error: %s\n", c->errmsg);
    if (c->unblocks)
        fprintf(f, "rcoll:   stalls that set messages aside: %lu\n",
                c->unblocks);
    for (int i = 0; i < c->ntls; i++) {
        int peers = 0;
        for (int p = 0; p < c->nranks; p++)
            peers += c->peer_tl && c->peer_tl[p] == c->tls[i];
        fprintf(f, "rcoll:   transport %s: %d peers\n", c->tls[i]->name,
                peers);
        if (c->tls[i]->stats)
            c->tls[i]->stats(c->tl_ctxs[i], f);
    }
    int k = 0;
    for (struct rcoll_request *r = c->qhead; r; r = r->next, k++) {
        coll_sched_t *s = &r->sched;
        int p = s->waiting_peer;
        fprintf(f, "rcoll:   [%d] %s #%llu count %zu %s %s root/peer %d "
                "algo %s: %s; send step %d/%d chunk %d, receive step %d/%d "
                "chunk %d", k, coll_kind_name(s->kind),
                (unsigned long long)s->seq, s->count,
                rcoll_datatype_name(s->dt), rcoll_op_name(s->op), s->root,
                s->algo ? s->algo : "-", r->started ? "running" : "queued",
                s->s_step, s->nsteps, s->s_chunk, s->r_step, s->nsteps,
                s->r_chunk);
        if (r->started && p >= 0 && p < c->nranks)
            fprintf(f, "; waiting for %s rank %d (%s pid %d) for %.1f s",
                    s->waiting_for ? s->waiting_for : "?", p,
                    c->bs.peers[p].hostname, (int)c->bs.peers[p].pid,
                    now - r->last_progress);
        fputc('\n', f);
    }
    if (c->inline_s) {
        coll_sched_t *s = c->inline_s;
        int p = s->waiting_peer;
        fprintf(f, "rcoll:   [%d] %s #%llu count %zu %s %s root %d algo "
                "shared (blocking, run by its caller)", k++,
                coll_kind_name(s->kind), (unsigned long long)s->seq, s->count,
                rcoll_datatype_name(s->dt), rcoll_op_name(s->op), s->root);
        if (p >= 0 && p < c->nranks)
            fprintf(f, "; waiting for %s rank %d (%s pid %d) for %.1f s",
                    s->waiting_for ? s->waiting_for : "?", p,
                    c->bs.peers[p].hostname, (int)c->bs.peers[p].pid,
                    now - c->last_progress);
        fputc('\n', f);
    }
    if (!k)
        fprintf(f, "rcoll:   no operation in flight\n");
    pthread_mutex_unlock(&c->lock);
}

static void dump_each(struct rcoll_comm *c, void *arg)
{
    comm_dump_one(c, arg);
}

/* Every live communicator of this process to f. */
static void dump_all(FILE *f)
{
    int n = rcoll__live_foreach(dump_each, f);
    if (!n)
        fprintf(f, "rcoll: pid %d has no communicator\n", (int)getpid());
}

rcoll_status_t rcoll_comm_dump(rcoll_comm_t comm)
{
    if (comm && !rcoll__comm_get(comm))
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_dump: comm %p is not a live "
                                "communicator", (void *)comm);
    if (comm) {
        comm_dump_one(comm, stderr);
        rcoll__comm_release(comm);
    } else {
        dump_all(stderr);
    }
    fflush(stderr);
    return RCOLL_OK;
}

/* RCOLL_DUMP_SIGNAL: the handler only writes a byte to a pipe; a thread
 * that sleeps on the pipe does the dump (stdio and locks are not
 * async-signal-safe). Installed at the first communicator, and only over
 * the default disposition: an application's own handler wins. */
static int dump_pipe[2] = {-1, -1};

static void dump_handler(int sig)
{
    int e = errno;
    char b = (char)sig;
    if (write(dump_pipe[1], &b, 1) < 0) {
        /* nothing to do in a handler */
    }
    errno = e;
}

/* rcoll-info -p PID asks for the dump by creating RCOLL_DUMP_REPLY_FMT
 * (empty, ours, mode 0600) before it sends the signal: then the dump goes
 * there, ended by RCOLL_DUMP_END, and not to stderr. Opened without
 * following links or creating anything, and only if it is a regular empty
 * file of this user (the directory is shared). */
static FILE *dump_reply_open(void)
{
    char path[64];
    snprintf(path, sizeof(path), RCOLL_DUMP_REPLY_FMT, (int)getpid());
    int fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK |
                            O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    FILE *f = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_uid == geteuid() && st.st_size == 0)
        f = fdopen(fd, "a");
    if (!f)
        close(fd);
    return f;
}

static void *dump_thread(void *arg)
{
    (void)arg;
    for (;;) {
        char b;
        ssize_t n = read(dump_pipe[0], &b, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        FILE *f = dump_reply_open();
        if (f) {
            dump_all(f);
            fputs(RCOLL_DUMP_END "\n", f);
            fclose(f);
        } else {
            rcoll_comm_dump(NULL);
        }
    }
}

static void dump_signal_once(void)
{
    const char *v = rcoll_config.dump_signal;
    int sig = rcoll_dump_signal_number(v);
    if (sig == 0)
        return;
    if (sig < 0) {
        rcoll_warn("RCOLL_DUMP_SIGNAL=%s: not USR1, USR2 or none; no dump "
                   "signal", v);
        return;
    }
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO)) {
        rcoll_info(RCOLL_SUBSYS_INIT, "RCOLL_DUMP_SIGNAL: the application "
                   "handles SIG%s itself; rcoll leaves it alone", v);
        return;
    }
    if (pipe(dump_pipe) != 0)
        return;
    fcntl(dump_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(dump_pipe[1], F_SETFD, FD_CLOEXEC);
    fcntl(dump_pipe[1], F_SETFL, O_NONBLOCK);
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, prev;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the thread takes no signals: they go to the application's threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &prev);
    int rc = pthread_create(&t, &attr, dump_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return;
    pthread_setname_np(t, "rcoll-dump");
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = dump_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static pthread_once_t dump_once = PTHREAD_ONCE_INIT;

void rcoll__dump_signal_init(void)
{
    pthread_once(&dump_once, dump_signal_once);
}
