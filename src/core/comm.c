/* Communicator lifetime and the progress engine.
 *
 * Callers post requests to a FIFO (the order every rank agrees on). The
 * "engine" - the transport's sockets and the head request's schedule - is
 * driven by whoever holds c->engine: a caller blocked in rcoll_wait (every
 * blocking collective), or else the communicator's progress thread, which
 * only drives requests nobody waits for and otherwise sleeps. Waiting polls
 * briefly while yielding the CPU, then blocks in epoll_wait, so idle ranks
 * that share cores cost nothing. The engine enforces RCOLL_TIMEOUT (no
 * progress for that long fails the communicator, naming the rank waited
 * for) and turns a broken link into an error of every queued request.
 * Why a thread at all: non-blocking collectives must advance while the
 * caller computes (PyTorch DDP overlaps all-reduce with backward), dead
 * peers must be noticed without the caller polling, and deadlines must hold
 * even if the caller never calls rcoll_test. Why callers drive: a thread
 * hand-off per message costs more than a small collective (docs/design.md).
 */
#include "core.h"
#include "topo/topo.h"
#include "util/params.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* an inline call's spin budget (spin_adapt) */
#define SPIN_MAX 2048
#define SPIN_MIN 16
#define SPIN_BUSY_S 2e-6

/* ---- errors ---- */

/* Records the communicator's first error (caller holds the lock). */
static void comm_set_error_locked(struct rcoll_comm *c, rcoll_status_t st,
                                  const char *msg)
{
    if (c->error != RCOLL_OK)
        return;
    snprintf(c->errmsg, sizeof(c->errmsg), "%s", msg);
    /* atomic: a blocking call run inline reads it without the lock */
    __atomic_store_n(&c->error, st, __ATOMIC_RELEASE);
    rcoll_warn("rank %d: communicator failed: %s", c->rank, msg);
}

void rcoll__req_put(struct rcoll_request *r)
{
    if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(r);
}

/* A transport is done with a send's buffer. The cookie is the schedule
 * inside its request; the request does not complete before every send of
 * it is done or withdrawn (req_release_tl), so it is alive here. */
static void tl_send_done(void *arg, void *cookie)
{
    (void)arg;
    coll_sched_send_done(cookie);
}

static void tl_peer_failed(void *arg, int peer, rcoll_status_t st,
                           const char *msg)
{
    struct rcoll_comm *c = arg;
    char buf[1024];
    (void)peer; /* msg names it */
    snprintf(buf, sizeof(buf), "rank %d: peer %s", c->rank, msg);
    pthread_mutex_lock(&c->lock);
    comm_set_error_locked(c, st, buf);
    pthread_mutex_unlock(&c->lock);
}

static void wakeup_event(rcoll_ev_handler_t *h, uint32_t events)
{
    (void)events;
    struct rcoll_comm *c =
        (struct rcoll_comm *)((char *)h - offsetof(struct rcoll_comm,
                                                   ev_wakeup));
    uint64_t v;
    while (read(c->evfd, &v, sizeof(v)) > 0)
        ;
}

/* Makes the progress thread leave epoll_wait (or a transport's wait).
 * c->lock held: the transports are taken out under it before they are
 * destroyed (close_transports), so a kick from a thread that posts while
 * another closes never reaches a destroyed context. */
static void comm_kick_locked(struct rcoll_comm *c)
{
    uint64_t one = 1;
    if (c->wait_tl >= 0 && c->tls[c->wait_tl]->kick)
        c->tls[c->wait_tl]->kick(c->tl_ctxs[c->wait_tl]);
    if (write(c->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        rcoll_warn("eventfd write: %s", strerror(errno));
}

static void comm_kick(struct rcoll_comm *c)
{
    pthread_mutex_lock(&c->lock);
    comm_kick_locked(c);
    pthread_mutex_unlock(&c->lock);
}

/* Makes the progress thread look at the queue, wherever it waits. */
static void comm_wake(struct rcoll_comm *c)
{
    pthread_mutex_lock(&c->lock);
    pthread_cond_signal(&c->idle_cond);
    comm_kick_locked(c);
    pthread_mutex_unlock(&c->lock);
}

/* ---- the progress thread ---- */

/* Before a request completes: no transport may write into its buffers any
 * more (receives in place end) nor read from them (sends not done yet are
 * withdrawn: send_revoke), so that they are the caller's again when
 * rcoll_wait or rcoll_test reports the result, and its memory may be
 * freed. The engine's holder, without c->lock: a transport may report a
 * failure from here, which takes the lock (tl_peer_failed). */
static void req_release_tl(struct rcoll_comm *c, struct rcoll_request *r)
{
    coll_sched_t *s = &r->sched;
    r->released = 1;
    if (!r->started || (s->nplaced == 0 && s->sends_inflight == 0))
        return;
    coll_sched_unplace(s, &c->env);
    for (int i = 0; s->sends_inflight > 0 && i < c->ntls; i++)
        c->tls[i]->send_revoke(c->tl_ctxs[i], s);
    if (s->sends_inflight > 0) /* a transport broke its contract */
        rcoll_warn("rank %d: %s #%llu: %d sends still held by a transport "
                   "after send_revoke", c->rank, coll_kind_name(s->kind),
                   (unsigned long long)s->seq, s->sends_inflight);
}

/* Takes r out of the queue and completes it (the engine's holder, with
 * c->lock, after req_release_tl). */
static void req_finish_locked(struct rcoll_comm *c, struct rcoll_request *r,
                              rcoll_status_t st, const char *msg)
{
    r->status = st;
    if (st != RCOLL_OK)
        snprintf(r->errmsg, sizeof(r->errmsg), "%s", msg);
    if (r->prev)
        r->prev->next = r->next;
    else
        __atomic_store_n(&c->qhead, r->next, __ATOMIC_RELEASE);
    if (r->next)
        r->next->prev = r->prev;
    else
        c->qtail = r->prev;
    r->next = r->prev = NULL;
    coll_sched_free(&r->sched); /* its buffers are no longer needed */
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
}

struct rcoll_request *rcoll__comm_stalled_req(struct rcoll_comm *c)
{
    struct rcoll_request *first = NULL;
    for (struct rcoll_request *r = c->qhead; r; r = r->next) {
        if (!r->started)
            break; /* started in posting order */
        if (r->sched.waiting_peer >= 0)
            return r;
        if (!first)
            first = r;
    }
    return first;
}

/* Completes every queued request with status st (the engine's holder,
 * without c->lock); msg NULL: with the communicator's error. */
static void fail_all(struct rcoll_comm *c, rcoll_status_t st, const char *msg)
{
    pthread_mutex_lock(&c->lock);
    while (c->qhead) {
        struct rcoll_request *r = c->qhead;
        if (!r->released) {
            /* only the engine's holder (us) completes requests: r stays
             * the head while the lock is dropped */
            pthread_mutex_unlock(&c->lock);
            req_release_tl(c, r);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        req_finish_locked(c, r, msg ? st : c->error, msg ? msg : c->errmsg);
    }
    pthread_mutex_unlock(&c->lock);
}

/* No operation in flight has moved for RCOLL_TIMEOUT: the communicator
 * fails, naming the peer the first stalled operation waits for. (An
 * operation may wait long while others move - a receive posted early -
 * so the clock is the communicator's, not each operation's.) */
static void timeout_check(struct rcoll_comm *c, double now)
{
    if (now - c->last_progress < c->timeout) {
        if (rcoll_unlikely(c->diag_walking))
            rcoll__diag_cancel(c);
        return;
    }
    pthread_mutex_lock(&c->lock);
    struct rcoll_request *r = rcoll__comm_stalled_req(c);
    pthread_mutex_unlock(&c->lock);
    if (!r)
        return;
    coll_sched_t *s = &r->sched;
    char msg[1024], cause[768];
    int p = s->waiting_peer;
    /* before failing, find out whom the rank we wait for waits for, and so
     * on down the chain, to name the root cause (core/diag.c) */
    if (!rcoll__diag_walk(c, p, cause, sizeof(cause)))
        return;
    snprintf(msg, sizeof(msg), "rank %d: %s #%llu (count %zu, %s) made no "
             "progress for %g s (RCOLL_TIMEOUT): waiting for %s rank %d "
             "(%s pid %d) at step %d, chunk %d%s%s",
             c->rank, coll_kind_name(s->kind), (unsigned long long)s->seq,
             s->count, rcoll_datatype_name(s->dt), c->timeout,
             s->waiting_for ? s->waiting_for : "?", p,
             p >= 0 ? c->bs.peers[p].hostname : "?",
             p >= 0 ? c->bs.peers[p].pid : -1,
             s->r_step < s->nsteps ? s->r_step : s->s_step,
             s->r_step < s->nsteps ? s->r_chunk : s->s_chunk,
             cause[0] ? "; " : "", cause);
    pthread_mutex_lock(&c->lock);
    comm_set_error_locked(c, RCOLL_ERR_TIMEOUT, msg);
    pthread_mutex_unlock(&c->lock);
}

/* One turn of the engine; the caller holds c->engine. Runs the head
 * request's schedule, then waits for I/O: while an operation runs and
 * things moved within RCOLL_SPIN_US, it looks again without blocking but
 * yields the CPU in between (ranks often outnumber cores: a peer on this
 * core must get to run); past that it blocks in epoll, bounded so that
 * deadlines are checked. With no request it blocks for up to idle_ms;
 * it never blocks longer than max_ms.
 * Returns 1 if the communicator is stopping and has nothing left to do. */
static int engine_turn(struct rcoll_comm *c, double *spin_until, int idle_ms,
                       int max_ms)
{
    struct epoll_event evs[64];
    struct rcoll_request *r;
    int progressed = 0;

    pthread_mutex_lock(&c->lock);
    /* After a failure, requests already running get one more look: what
     * they need may have arrived before the peer went away. Everything
     * else fails with the communicator's error. */
    int failed = c->error != RCOLL_OK;
    if (failed)
        for (struct rcoll_request *q = c->qhead, *nx; q; q = nx) {
            nx = q->next;
            if (!q->started) { /* nothing of it in a transport */
                q->released = 1;
                req_finish_locked(c, q, c->error, c->errmsg);
            }
        }
    r = c->qhead;
    if (!r && c->stop) {
        pthread_mutex_unlock(&c->lock);
        return 1;
    }
    /* what is in flight now, in posting order (collectives are built in
     * that order on every rank): a snapshot, so that one lock serves the
     * turn; only the engine's holder (us) finishes and so frees requests,
     * and what is posted meanwhile waits for the next turn */
    int ns = 0;
    for (struct rcoll_request *q = r; q; q = q->next) {
        if (ns == c->snap_cap) {
            int cap = c->snap_cap ? 2 * c->snap_cap : 32;
            void *p = realloc(c->snap, (size_t)cap * sizeof(*c->snap));
            if (!p)
                break; /* the rest next turn (the first ones move) */
            c->snap = p;
            c->snap_cap = cap;
        }
        c->snap[ns++] = q;
    }
    struct rcoll_request **snap = c->snap;
    pthread_mutex_unlock(&c->lock);

    double now = r ? rcoll_time_sec() : 0;
    /* a blocking call run inline (rcoll__comm_run_inline) is one more
     * operation in flight: poll, then sleep as for a request */
    int any = r != NULL || c->inline_s != NULL, finished = 0;
    for (int k = 0; k < ns; k++) {
        r = snap[k];
        rcoll_status_t st;
        int moved = 0;
        if (!r->started) {
            r->started = 1;
            r->last_progress = now;
            c->last_progress = now; /* a new operation restarts the clock */
            st = coll_sched_build(&r->sched, &c->env);
            if (st == RCOLL_OK)
                st = coll_sched_progress(&r->sched, &c->env, &moved);
        } else {
            st = coll_sched_progress(&r->sched, &c->env, &moved);
        }
        if (moved) {
            r->last_progress = now;
            c->last_progress = now;
            progressed = 1;
        }
        if (st == RCOLL_INPROGRESS)
            continue;
        char msg[1024];
        msg[0] = '\0';
        if (st != RCOLL_OK) /* not on the fast path */
            snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
        req_release_tl(c, r);
        pthread_mutex_lock(&c->lock);
        /* a broken link or a mismatch poisons the communicator: the ranks
         * no longer agree on what comes next. A truncated receive does
         * not: it consumed its whole message, and only it failed. */
        if (st != RCOLL_OK && st != RCOLL_ERR_TRUNCATED)
            comm_set_error_locked(c, st, msg);
        req_finish_locked(c, r, st, msg);
        finished = 1;
        pthread_mutex_unlock(&c->lock);
    }
    if (failed) {
        fail_all(c, RCOLL_OK, NULL);
        return 0;
    }
    if (finished) { /* back to the caller at once (latency) */
        *spin_until = 0;
        return 0;
    }
    if (ns && !progressed) /* (a call run inline checks its own) */
        timeout_check(c, now);
    int ms;
    if (progressed) {
        ms = 0;
        *spin_until = 0;
    } else if (any) {
        double t = rcoll_time_sec();
        if (*spin_until == 0)
            *spin_until = t + rcoll_config.spin_us * 1e-6;
        ms = t < *spin_until ? 0 : 100;
    } else {
        ms = idle_ms;
        *spin_until = 0;
    }
    if (ms > max_ms)
        ms = max_ms;
    if (!progressed) /* before any wait: nothing held back may block a peer */
        coll_area_flush(c->env.area);
    /* Stalled for 100 ms (a quarter of RCOLL_TIMEOUT if less): no peer
     * may wait on slots that messages nobody asks for hold. (Not sooner:
     * with ranks oversubscribed, waits of a few ms are common while a
     * peer's early chunks fill our slots, and setting them aside then
     * only costs a copy and fresh pages: 16 MiB all-gather, 4 ranks on 2
     * cores, 10x the page faults and 15% slower at RCOLL_SPIN_US.) */
    if (!progressed && ms > 0 && any &&
        rcoll_time_sec() - c->last_progress >=
            RCOLL_MIN(0.1, c->timeout / 4) &&
        coll_match_unblock(&c->env) > 0) {
        ms = 0;
        progressed = 1;
    }
    if (!progressed)
        for (int i = 0; i < c->ntls; i++)
            if (c->tls[i]->idle && c->tls[i]->idle(c->tl_ctxs[i]) > 0) {
                ms = 0; /* it found work while arming its events */
                progressed = 1;
            }
    int slept = 0;
    if (ms > 0 && c->wait_tl >= 0) {
        /* a transport without fds (shared memory) waits on its own futex;
         * with sockets as well, in short slices between looks at them */
        int w = c->ntls > 1 ? 1 : ms;
        c->tls[c->wait_tl]->wait(c->tl_ctxs[c->wait_tl], w);
        ms = 0;
        slept = 1;
        progressed = 1; /* no yield below: we just slept */
    }
    /* With shared memory only, the fds (pidfds, the wake-up eventfd) say
     * nothing urgent: while polling, look at them every 64th turn only, a
     * system call saved per turn; but after every sleep, or a death seen
     * by a pidfd waited for 64 sleeps (6.4 s), and on every idle look (a
     * timeout diagnosis question may wait on the bootstrap listener) */
    int n = 0;
    if (ms > 0 || slept || !any || c->wait_tl < 0 || c->ntls > 1 ||
        (++c->spin_turns & 63) == 0)
        n = epoll_wait(c->epfd, evs, 64, ms);
    /* give the core away between looks: a peer, ours or not, may need it
     * (spinning with pause instead made an 8-byte all-reduce of 2 ranks
     * on a loaded 2-core machine wait out the whole spin, ~200 us) */
    if (n == 0 && ms == 0 && !progressed) {
        double y0 = rcoll_time_sec();
        sched_yield();
        c->yield_s = rcoll_time_sec() - y0;
    }
    for (int i = 0; i < n; i++) {
        rcoll_ev_handler_t *h = evs[i].data.ptr;
        h->cb(h, evs[i].events);
    }
    for (int i = 0; i < c->ntls; i++)
        if (c->tls[i]->progress)
            c->tls[i]->progress(c->tl_ctxs[i]);
    return 0;
}

/* The progress thread drives the engine while requests are queued and no
 * caller drives it. A caller blocked in rcoll_wait takes the engine over
 * (c->waiters > 0) and polls the sockets itself, which saves two thread
 * hand-offs per operation. With nothing queued the thread sleeps on
 * idle_cond, waking once a second for a non-blocking look at the sockets so
 * that a peer's death becomes the communicator's error even while the
 * application is busy elsewhere. */
static void *progress_thread(void *arg)
{
    struct rcoll_comm *c = arg;
    double spin_until = 0;

    rcoll__log_rank = c->rank;
    pthread_mutex_lock(&c->engine);
    for (;;) {
        pthread_mutex_lock(&c->lock);
        int idle = c->waiters > 0 || (!c->qhead && !c->stop);
        if (idle) {
            pthread_mutex_unlock(&c->engine);
            struct timespec ts;
            /* idle_cond runs on CLOCK_MONOTONIC (comm init): a step of
             * the wall clock must not stretch or cut this look */
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += 1;
            int rc = pthread_cond_timedwait(&c->idle_cond, &c->lock, &ts);
            int look = rc == ETIMEDOUT && c->waiters == 0;
            pthread_mutex_unlock(&c->lock);
            pthread_mutex_lock(&c->engine);
            if (look) {
                double never = 1;
                engine_turn(c, &never, 0, 0);
            }
            continue;
        }
        pthread_mutex_unlock(&c->lock);
        /* Dekker-style handshake with rcoll_wait: announce a possible epoll
         * wait, then look for callers; a caller announces itself, then
         * kicks us out of epoll if we announced */
        __atomic_store_n(&c->in_epoll, 1, __ATOMIC_SEQ_CST);
        int max_ms = __atomic_load_n(&c->waiters, __ATOMIC_SEQ_CST) > 0 ? 0
                                                                        : 1000;
        int done = engine_turn(c, &spin_until, 1000, max_ms);
        __atomic_store_n(&c->in_epoll, 0, __ATOMIC_SEQ_CST);
        if (done)
            break;
    }
    pthread_mutex_unlock(&c->engine);
    return NULL;
}

/* ---- the process's communicators, for rcoll_comm_dump / SIGUSR1 ---- */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcoll_comm *live_head;
/* Every change to the list bumps live_gen (under live_lock). A thread that
 * found c in the list at generation g knows it is still there as long as
 * live_gen reads g, so its next calls on c skip the lock and the walk: a
 * small blocking call made ten atomic operations, and each drains the
 * store buffer, whose stores to the shared area wait for their cache
 * lines (2 ranks, 32-byte shm broadcast: 0.18 -> 0.15 us with this and
 * the inline path's lock-free start, docs/design.md). */
static uint64_t live_gen = 1; /* a thread's cache starts at 0: no match */
static __thread struct rcoll_comm *live_seen;
static __thread uint64_t live_seen_gen;
/* The memory of destroyed communicators, reused by the next ones and
 * never freed: a lookup that trusted its cache may still touch one that
 * another thread destroyed meanwhile (a program that destroys a
 * communicator while using it, which is erroneous but must not crash);
 * it then sees live_gen move and looks again. */
static struct rcoll_comm *live_spare;

static void live_add(struct rcoll_comm *c)
{
    pthread_mutex_lock(&live_lock);
    c->next_live = live_head;
    live_head = c;
    __atomic_store_n(&live_gen, live_gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(struct rcoll_comm *c)
{
    pthread_mutex_lock(&live_lock);
    for (struct rcoll_comm **p = &live_head; *p; p = &(*p)->next_live)
        if (*p == c) {
            *p = c->next_live;
            break;
        }
    __atomic_store_n(&live_gen, live_gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&live_lock);
}

/* A zeroed communicator: a spare one, else a new one. */
static struct rcoll_comm *live_alloc(void)
{
    pthread_mutex_lock(&live_lock);
    struct rcoll_comm *c = live_spare;
    if (c)
        live_spare = c->next_live;
    pthread_mutex_unlock(&live_lock);
    if (!c)
        return calloc(1, sizeof(*c));
    memset(c, 0, sizeof(*c));
    return c;
}

static void live_park(struct rcoll_comm *c)
{
    pthread_mutex_lock(&live_lock);
    c->next_live = live_spare;
    live_spare = c;
    pthread_mutex_unlock(&live_lock);
}

/* A reference, taken only while some other is still held: one that
 * dropped to 0 is being freed. */
static int refs_take(struct rcoll_comm *c)
{
    int v = __atomic_load_n(&c->refs, __ATOMIC_RELAXED);
    do {
        if (v == 0)
            return 0;
    } while (!__atomic_compare_exchange_n(&c->refs, &v, v + 1, 0,
                                          __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    return 1;
}

/* (lock order: live_lock, then a communicator's lock) */
static int live_lookup(struct rcoll_comm *c, int take)
{
    int found = 0;
    uint64_t g = __atomic_load_n(&live_gen, __ATOMIC_ACQUIRE);
    if (c == live_seen && g == live_seen_gen) {
        /* still in the list at g; its memory is a communicator's even if
         * it has been destroyed since (live_park) */
        found = !__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE);
        if (found && take)
            found = refs_take(c);
        /* unchanged after the reference: it was live when we took it */
        if (__atomic_load_n(&live_gen, __ATOMIC_ACQUIRE) == g)
            return found;
        if (found && take)
            rcoll__comm_release(c);
        found = 0;
    }
    pthread_mutex_lock(&live_lock);
    for (struct rcoll_comm *x = live_head; x && !found; x = x->next_live)
        found = x == c;
    if (found) {
        live_seen = c;
        live_seen_gen = live_gen;
    }
    /* without c->lock (two lock pairs less per blocking call): a
     * communicator in the list is not freed while we hold live_lock
     * (comm_free removes it first) */
    if (found)
        found = !__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE);
    if (found && take)
        found = refs_take(c);
    pthread_mutex_unlock(&live_lock);
    return found;
}

int rcoll__comm_live(const struct rcoll_comm *c)
{
    return live_lookup((struct rcoll_comm *)c, 0);
}

int rcoll__comm_get(struct rcoll_comm *c)
{
    return c && live_lookup(c, 1);
}

void rcoll__comm_ref(struct rcoll_comm *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
}

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
    for (int i = 0; i < c->ntls; i++) {
        int peers = 0;
        for (int p = 0; p < c->nranks; p++)
            peers += c->peer_tl && c->peer_tl[p] == c->tls[i];
        fprintf(f, "rcoll:   transport %s: %d peers\n", c->tls[i]->name,
                peers);
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
        pthread_mutex_lock(&live_lock);
        int n = 0;
        for (struct rcoll_comm *c = live_head; c; c = c->next_live, n++)
            comm_dump_one(c, stderr);
        if (!n)
            fprintf(stderr, "rcoll: pid %d has no communicator\n",
                    (int)getpid());
        pthread_mutex_unlock(&live_lock);
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
        rcoll_comm_dump(NULL);
    }
}

static void dump_signal_once(void)
{
    const char *v = rcoll_config.dump_signal;
    int sig = 0;
    if (!v || !*v || !strcmp(v, "0") || !strcasecmp(v, "none"))
        return;
    if (!strcasecmp(v, "USR1") || !strcasecmp(v, "SIGUSR1"))
        sig = SIGUSR1;
    else if (!strcasecmp(v, "USR2") || !strcasecmp(v, "SIGUSR2"))
        sig = SIGUSR2;
    else {
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

/* ---- lifetime ---- */

static void comm_free(struct rcoll_comm *c)
{
    live_remove(c);
    rcoll__diag_fini(c);
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->evfd >= 0)
        close(c->evfd);
    coll_match_destroy(c->match);
    coll_area_destroy(c->env.area);
    free(c->snap);
    free(c->p2p_tx);
    free(c->eps);
    free(c->peer_tl);
    free(c->ring);
    free(c->ring_pos);
    rcoll_bootstrap_finalize(&c->bs);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->engine);
    pthread_cond_destroy(&c->idle_cond);
    live_park(c);
}

void rcoll__comm_release(struct rcoll_comm *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        comm_free(c);
}

/* The transports this rank may use: allowed by RCOLL_TRANSPORTS and
 * usable here, as a bit mask over rcoll_transports[]. */
static uint32_t usable_transports(void)
{
    char why[256];
    uint32_t mask = 0;
    for (int i = 0; rcoll_transports[i] && i < RCOLL_MAX_TLS; i++) {
        const rcoll_tl_ops_t *t = rcoll_transports[i];
        if (!rcoll_config_name_allowed(rcoll_config.transports, t->name))
            continue;
        why[0] = '\0';
        if (!t->usable(why, sizeof(why))) {
            rcoll_info(RCOLL_SUBSYS_INIT, "transport %s not usable: %s",
                       t->name, why);
            continue;
        }
        mask |= 1u << i;
    }
    return mask;
}

/* Chooses a transport for every pair of ranks (the first both can use that
 * reaches: shared memory needs the same host) and opens each transport
 * some pair needs, in the same order on every rank (setup is collective).
 * Every rank computes the same answer from the same all-gathered masks. */
static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Every rank must have the same value of each setting that shapes
 * schedules or the wire (rcoll_config_is_shared): one all-gather of a
 * hash over all of them; only when they differ, one of the per-setting
 * hashes (which setting, which rank) and one of the values (to name
 * both). Every rank sees the same gathered data, so all fail alike. */
#define AGREE_MAX 32
#define AGREE_VAL 120
static rcoll_status_t config_agree(struct rcoll_comm *c)
{
    int n = c->nranks, me = c->rank, np = rcoll_config_nparams(), ns = 0;
    int idx[AGREE_MAX];
    uint64_t mine[AGREE_MAX], all = 0xcbf29ce484222325ull;
    char v[AGREE_VAL];
    for (int i = 0; i < np && ns < AGREE_MAX; i++) {
        if (!rcoll_config_is_shared(i))
            continue;
        rcoll_config_value_string(i, v, sizeof(v));
        idx[ns] = i;
        mine[ns] = fnv1a(fnv1a(0xcbf29ce484222325ull,
                               rcoll_config_param(i)->name), v);
        all = fnv1a(fnv1a(all, rcoll_config_param(i)->name), v);
        all = fnv1a(all, "\n");
        ns++;
    }
    if (n == 1)
        return RCOLL_OK;
    rcoll_status_t st;
    uint64_t *h = calloc((size_t)n, sizeof(uint64_t) * AGREE_MAX);
    char *vals = NULL;
    if (!h)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    h[me] = all;
    if ((st = rcoll_bootstrap_allgather(&c->bs, h, sizeof(uint64_t))) !=
        RCOLL_OK)
        goto out;
    int same = 1;
    for (int a = 1; a < n; a++)
        same &= h[a] == h[0];
    if (same)
        goto out;
    memcpy(h + (size_t)me * AGREE_MAX, mine, sizeof(mine));
    if ((st = rcoll_bootstrap_allgather(&c->bs, h,
                                        sizeof(uint64_t) * AGREE_MAX)) !=
        RCOLL_OK)
        goto out;
    int var = -1, who = -1;
    for (int k = 0; k < ns && var < 0; k++)
        for (int a = 1; a < n; a++)
            if (h[(size_t)a * AGREE_MAX + k] != h[k]) {
                var = k;
                who = a;
                break;
            }
    if (var < 0) { /* the sets differ: different builds of rcoll */
        st = rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                              "the ranks' settings differ "
                              "in a way this build cannot name (different "
                              "rcoll versions on the ranks?)");
        goto out;
    }
    if (!(vals = calloc((size_t)n, AGREE_VAL))) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
        goto out;
    }
    rcoll_config_value_string(idx[var], vals + (size_t)me * AGREE_VAL,
                              AGREE_VAL);
    if ((st = rcoll_bootstrap_allgather(&c->bs, vals, AGREE_VAL)) !=
        RCOLL_OK)
        goto out;
    vals[AGREE_VAL - 1] = vals[(size_t)who * AGREE_VAL + AGREE_VAL - 1] = 0;
    st = rcoll__set_error(
        RCOLL_ERR_INVALID_ARGUMENT,
        "%s differs between ranks: rank 0 (%s pid %d) has "
        "\"%s\", rank %d (%s pid %d) has \"%s\"; it shapes schedules or "
        "messages, so set it the same on every rank",
        rcoll_config_param(idx[var])->name, c->bs.peers[0].hostname,
        c->bs.peers[0].pid, vals, who, c->bs.peers[who].hostname,
        c->bs.peers[who].pid, vals + (size_t)who * AGREE_VAL);
out:
    free(h);
    free(vals);
    return st;
}

static rcoll_status_t open_transports(struct rcoll_comm *c,
                                      const uint8_t secret[16])
{
    int n = c->nranks, me = c->rank;
    struct {
        uint32_t mask;
        int32_t ncores;
        int32_t ring_user; /* RCOLL_RING_ORDER=user: must agree */
    } *masks = calloc((size_t)n, sizeof(*masks));
    uint8_t *tl_of = calloc((size_t)n * (size_t)n, 1); /* index + 1 */
    uint8_t *pairs = calloc((size_t)n * (size_t)n, 1);
    rcoll_status_t st = RCOLL_OK;
    if (!masks || !tl_of || !pairs) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
        goto out;
    }
    masks[me].mask = usable_transports();
    masks[me].ncores = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    masks[me].ring_user = strcmp(rcoll_config.ring_order, "user") == 0;
    st = rcoll_bootstrap_allgather(&c->bs, masks, sizeof(*masks));
    if (st != RCOLL_OK)
        goto out;
    for (int a = 1; a < n; a++)
        if (masks[a].ring_user != masks[0].ring_user) {
            st = rcoll__set_error(
                RCOLL_ERR_INVALID_ARGUMENT,
                "rank 0 (%s) has RCOLL_RING_ORDER=%s and rank %d (%s) has "
                "%s: it must be the same on every rank",
                c->bs.peers[0].hostname, masks[0].ring_user ? "user" : "topo",
                a, c->bs.peers[a].hostname,
                masks[a].ring_user ? "user" : "topo");
            goto out;
        }
    /* The tuner's inputs, the same on every rank (every rank must pick the
     * same algorithm and chunk size): the slowest link any pair uses, the
     * most ranks on one host, the fewest cores of a host. */
    c->env.link = rcoll_config.tune_shm;
    c->env.link_local = rcoll_config.tune_shm;
    c->env.link_name = "shm";
    c->env.local_size = 1;
    c->env.ncores = masks[0].ncores > 0 ? masks[0].ncores : 1;
    for (int a = 0; a < n; a++) {
        int same = 0;
        for (int b = 0; b < n; b++)
            same += c->bs.peers[a].host_hash == c->bs.peers[b].host_hash;
        if (same > c->env.local_size)
            c->env.local_size = same;
        if (masks[a].ncores > 0 && masks[a].ncores < c->env.ncores)
            c->env.ncores = masks[a].ncores;
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            uint32_t both = masks[a].mask & masks[b].mask;
            int same_host = c->bs.peers[a].host_hash == c->bs.peers[b].host_hash;
            int t;
            for (t = 0; rcoll_transports[t] && t < RCOLL_MAX_TLS; t++)
                if ((both >> t & 1) &&
                    (!rcoll_transports[t]->local_only || same_host))
                    break;
            if (!rcoll_transports[t] || t == RCOLL_MAX_TLS) {
                st = rcoll__set_error(
                    RCOLL_ERR_NO_DEVICE,
                    "no transport connects rank %d (%s, transports 0x%x) and "
                    "rank %d (%s, transports 0x%x): check RCOLL_TRANSPORTS "
                    "on both", a, c->bs.peers[a].hostname, masks[a].mask, b,
                    c->bs.peers[b].hostname, masks[b].mask);
                goto out;
            }
            tl_of[a * n + b] = tl_of[b * n + a] = (uint8_t)(t + 1);
            if (same_host && !rcoll_transports[t]->local_only)
                c->env.link_local = rcoll_config.tune_tcp;
        }
    c->tl_events.arg = c;
    c->tl_events.send_done = tl_send_done;
    c->tl_events.peer_failed = tl_peer_failed;
    for (int t = 0; rcoll_transports[t] && t < RCOLL_MAX_TLS; t++) {
        int used = 0;
        for (int i = 0; i < n * n; i++) {
            pairs[i] = tl_of[i] == t + 1;
            used |= pairs[i];
        }
        if (!used)
            continue;
        const rcoll_tl_ops_t *ops = rcoll_transports[t];
        if (!ops->local_only) {
            c->env.link = rcoll_config.tune_tcp;
            c->env.link_name = ops->name;
        }
        rcoll_tl_ep_t **eps = calloc((size_t)n, sizeof(*eps));
        if (!eps) {
            st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
            goto out;
        }
        rcoll_tl_params_t tp = {
            .rank = me, .nranks = n, .secret = secret, .bs = &c->bs,
            .epfd = c->epfd, .chunk_size = rcoll_config.chunk_size,
            .nslots = rcoll_config.nslots, .ev = &c->tl_events,
            .pairs = pairs, .timeout = c->timeout};
        st = ops->ctx_create(&tp, &c->tl_ctxs[c->ntls], eps);
        if (st != RCOLL_OK) {
            free(eps);
            goto out;
        }
        c->tls[c->ntls] = ops;
        if (ops->wait && c->wait_tl < 0)
            c->wait_tl = c->ntls;
        c->ntls++;
        for (int p = 0; p < n; p++)
            if (pairs[me * n + p]) {
                c->eps[p] = eps[p];
                c->peer_tl[p] = ops;
            }
        free(eps);
        rcoll_debug(RCOLL_SUBSYS_INIT, "rank %d: transport %s opened", me,
                    ops->name);
    }
out:
    free(masks);
    free(tl_of);
    free(pairs);
    return st;
}

/* The ring order and the host structure (coll_env_t): hosts by their
 * lowest rank, each host's ranks contiguous and in rank order
 * (RCOLL_RING_ORDER=topo), or rank order (user). Every rank computes the
 * same answer from the same rendezvous table. */
/* RCOLL_TOPO_DUMP_FILE: rank 0 writes the topology in use, once per
 * process (a failure is a warning: the job does not depend on it). */
static pthread_once_t topo_dump_once = PTHREAD_ONCE_INIT;
static void topo_dump(void)
{
    rcoll_topo_t *t = NULL;
    const char *src = "";
    char err[512] = "";
    if (rcoll_topo_get(&t, &src, err, sizeof(err)) != RCOLL_OK) {
        rcoll_warn("RCOLL_TOPO_DUMP_FILE: %s", err);
        return;
    }
    rcoll_info(RCOLL_SUBSYS_INIT, "topology (%s): %d packages, %d GPUs, %d "
               "NICs, written to %s", src, rcoll_topo_npackages(t),
               rcoll_topo_ngpus(t), rcoll_topo_nnics(t),
               rcoll_config.topo_dump_file);
    rcoll_topo_free(t);
}

static rcoll_status_t placement_init(struct rcoll_comm *c)
{
    int n = c->nranks;
    int *host = malloc((size_t)n * sizeof(int)); /* rank -> host index */
    uint64_t *ids = malloc((size_t)n * sizeof(uint64_t));
    c->ring = malloc((size_t)n * sizeof(int));
    c->ring_pos = malloc((size_t)n * sizeof(int));
    if (!host || !ids || !c->ring || !c->ring_pos) {
        free(host);
        free(ids);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    }
    for (int r = 0; r < n; r++)
        ids[r] = c->bs.peers[r].host_hash;
    int topo = strcmp(rcoll_config.ring_order, "user") != 0;
    int nh = rcoll_topo_ring_order(n, ids, topo, c->ring, host,
                                   &c->env.host_size);
    for (int i = 0; i < n; i++)
        c->ring_pos[c->ring[i]] = i;
    c->env.ring = c->ring;
    c->env.ring_pos = c->ring_pos;
    c->env.nhosts = nh;
    if (c->rank == 0 && rcoll__log_level >= RCOLL_LOG_INFO) {
        char buf[512];
        size_t off = 0;
        for (int i = 0; i < n && off < sizeof(buf) - 16; i++)
            off += (size_t)snprintf(
                buf + off, sizeof(buf) - off, "%s%d",
                i == 0 ? "" : host[c->ring[i]] != host[c->ring[i - 1]] ? " | "
                                                                       : " ",
                c->ring[i]);
        if (off >= sizeof(buf) - 16)
            snprintf(buf + off, sizeof(buf) - off, " ...");
        rcoll_info(RCOLL_SUBSYS_INIT, "ring order (%s): %s (%d host%s, %s)",
                   topo ? "topo" : "user", buf, nh, nh == 1 ? "" : "s",
                   c->env.host_size ? "as many ranks on each"
                                    : "hosts of different sizes or "
                                      "interleaved");
    }
    free(host);
    free(ids);
    return RCOLL_OK;
}

static void mem_reg_free(struct rcoll_comm *c, struct rcoll_mem_reg *m)
{
    for (int i = 0; i < c->ntls; i++)
        if (m->tl[i] && c->tls[i]->mem_dereg)
            c->tls[i]->mem_dereg(c->tl_ctxs[i], m->tl[i]);
    free(m);
}

static void close_transports(struct rcoll_comm *c, int abort,
                             const char *reason)
{
    while (c->regs) {
        struct rcoll_mem_reg *m = c->regs;
        c->regs = m->next;
        mem_reg_free(c, m);
    }
    /* out of reach first (comm_kick_locked), then destroyed */
    pthread_mutex_lock(&c->lock);
    int n = c->ntls;
    c->ntls = 0;
    c->wait_tl = -1;
    pthread_mutex_unlock(&c->lock);
    for (int i = n - 1; i >= 0; i--)
        c->tls[i]->ctx_destroy(c->tl_ctxs[i], abort, reason);
}

RCOLL_API rcoll_status_t rcoll_comm_init_rank(rcoll_comm_t *comm, int nranks,
                                              const rcoll_unique_id_t *id,
                                              int rank)
{
    return rcoll_comm_init_rank_config(comm, nranks, id, rank, NULL);
}

/* A field of the caller's config, if its size covers it. */
#define CONFIG_HAS(cfg, field)                                               \
    ((cfg) && (cfg)->size >= offsetof(rcoll_comm_config_t, field) +          \
                                  sizeof((cfg)->field))

RCOLL_API rcoll_status_t rcoll_comm_init_rank_config(
    rcoll_comm_t *comm, int nranks, const rcoll_unique_id_t *id, int rank,
    const rcoll_comm_config_t *config)
{
    struct rcoll_comm *c;
    rcoll_sockaddr_t root;
    uint8_t secret[16];
    rcoll_status_t st;

    rcoll__clear_error();
    if ((st = rcoll_config_init()) != RCOLL_OK)
        return st;
    if ((st = coll_algo_check_config()) != RCOLL_OK)
        return st;
    if (strcmp(rcoll_config.ring_order, "topo") != 0 &&
        strcmp(rcoll_config.ring_order, "user") != 0)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "RCOLL_RING_ORDER=\"%s\": expected topo or "
                                "user", rcoll_config.ring_order);
    if (!comm || !id)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_init_rank: %s is NULL",
                                !comm ? "comm" : "id");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_init_rank: rank %d / nranks %d "
                                "out of range", rank, nranks);
    if ((st = rcoll_boot_id_unpack(id, &root, secret)) != RCOLL_OK)
        return rcoll__set_error(st, "rcoll_comm_init_rank: %s",
                                rcoll_last_error());
    c = live_alloc();
    if (!c)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                "rcoll_comm_init_rank: no memory");
    c->rank = rank;
    c->nranks = nranks;
    c->timeout = CONFIG_HAS(config, timeout) && config->timeout > 0
                     ? config->timeout
                     : rcoll_config.timeout;
    c->refs = 1;
    c->epfd = c->evfd = -1;
    c->wait_tl = -1;
    c->spin_budget = SPIN_MAX;
    c->yield_s = -1;
    c->bs.listen_fd = c->bs.next_fd = c->bs.prev_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->engine, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->idle_cond, &ca);
    pthread_condattr_destroy(&ca);
    rcoll__log_rank = rank;

    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->epfd < 0 || c->evfd < 0) {
        st = rcoll__set_error(RCOLL_ERR_SYSTEM, "rcoll_comm_init_rank: "
                              "epoll/eventfd: %s", strerror(errno));
        goto err;
    }
    c->ev_wakeup.cb = wakeup_event;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ev_wakeup};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->evfd, &ev) != 0) {
        st = rcoll__set_error(RCOLL_ERR_SYSTEM, "rcoll_comm_init_rank: "
                              "epoll_ctl(EPOLL_CTL_ADD) of the wake-up "
                              "eventfd: %s", strerror(errno));
        goto err;
    }

    if (usable_transports() == 0) {
        st = rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                              "no usable transport (RCOLL_TRANSPORTS=%s)",
                              rcoll_config.transports ? rcoll_config.transports
                                                      : "");
        goto err;
    }
    st = rcoll_bootstrap_init(&c->bs, &root, secret, rank, nranks,
                              c->timeout);
    if (st != RCOLL_OK)
        goto err;
    if ((st = config_agree(c)) != RCOLL_OK)
        goto err;
    c->eps = calloc((size_t)nranks, sizeof(*c->eps));
    c->peer_tl = calloc((size_t)nranks, sizeof(*c->peer_tl));
    c->p2p_tx = calloc((size_t)nranks, sizeof(*c->p2p_tx));
    c->match = coll_match_create(nranks, rcoll_config.unexpected_max);
    if (!c->eps || !c->peer_tl || !c->p2p_tx || !c->match) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
        goto err;
    }
    st = open_transports(c, secret);
    if (st != RCOLL_OK) {
        /* the peers already connected learn why (the root cause, when the
         * bootstrap named one), not merely that this rank aborted */
        char why[512];
        snprintf(why, sizeof(why), "%s", rcoll_last_error());
        close_transports(c, 1, why);
        rcoll__set_error(st, "%s", why);
        goto err;
    }
    if (rank == 0 && rcoll_config.topo_dump_file &&
        rcoll_config.topo_dump_file[0])
        pthread_once(&topo_dump_once, topo_dump);
    if ((st = placement_init(c)) != RCOLL_OK) {
        close_transports(c, 1, NULL);
        goto err;
    }
    c->env.rank = rank;
    c->env.nranks = nranks;
    c->env.chunk_size = rcoll_config.chunk_size;
    c->env.tls = c->peer_tl;
    c->env.eps = c->eps;
    c->env.tune_cache = c->tune_cache;
    c->env.md = &coll_md_host;
    c->env.match = c->match;
    c->env.p2p_eager = rcoll_config.p2p_eager;
    /* every peer over one transport with shared areas (shm: all ranks on
     * this host): small collectives go through them (coll/area.c). Every
     * rank comes to the same answer: a pair uses shm only if both can. */
    if (c->ntls == 1 && c->tls[0]->area) {
        int all = 1;
        for (int p = 0; p < nranks; p++)
            all &= p == rank || c->peer_tl[p] == c->tls[0];
        if (all)
            c->env.area = coll_area_create(rank, nranks, c->tls[0],
                                           c->tl_ctxs[0]);
        if (c->env.area) {
            size_t d = coll_area_data(c->env.area),
                   m = rcoll_config.shm_area_max;
            rcoll_info(RCOLL_SUBSYS_INIT, "rank %d: shared area in use: "
                       "collectives with up to %zu bytes of input per rank "
                       "run through it, broadcasts up to %zu "
                       "(RCOLL_SHM_AREA_MAX, RCOLL_SHM_AREA)",
                       rank, d < m ? d : m, d < 4 * m ? d : 4 * m);
        }
    }

    c->env.peers = c->bs.peers;

    if ((st = rcoll__diag_init(c)) != RCOLL_OK) {
        close_transports(c, 1, NULL);
        goto err;
    }
    int rc = pthread_create(&c->thread, NULL, progress_thread, c);
    if (rc != 0) {
        close_transports(c, 1, NULL);
        st = rcoll__set_error(RCOLL_ERR_SYSTEM, "pthread_create: %s",
                              strerror(rc));
        goto err;
    }
    c->thread_started = 1;
    /* named for top -H, perf and gdb */
    pthread_setname_np(c->thread, "rcoll-progress");
    c->created = rcoll_time_sec();
    live_add(c);
    pthread_once(&dump_once, dump_signal_once);
    {
        char names[128] = "";
        for (int i = 0; i < c->ntls; i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names),
                     "%s%s", i ? "," : "", c->tls[i]->name);
        rcoll_info(RCOLL_SUBSYS_INIT, "rank %d of %d ready: transports %s, "
                   "chunk %zu bytes, %d slots", rank, nranks,
                   c->ntls ? names : "none", rcoll_config.chunk_size,
                   rcoll_config.nslots);
    }
    *comm = c;
    return RCOLL_OK;
err:
    {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
        comm_free(c);
        return rcoll__set_error(st, "rcoll_comm_init_rank (rank %d of %d): "
                                "%s", rank, nranks, msg);
    }
}

RCOLL_API rcoll_status_t rcoll_get_unique_id(rcoll_unique_id_t *id)
{
    rcoll_sockaddr_t addr;
    uint8_t secret[16];
    char ifname[64];
    int fd;
    rcoll_status_t st;

    rcoll__clear_error();
    if ((st = rcoll_config_init()) != RCOLL_OK)
        return st;
    if (!id)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_get_unique_id: id is NULL");
    if ((st = rcoll_random_bytes(secret, sizeof(secret))) != RCOLL_OK)
        return rcoll__set_error(st, "rcoll_get_unique_id: no random bytes");
    st = rcoll_sock_pick_addr(NULL, &addr, ifname, sizeof(ifname));
    if (st != RCOLL_OK)
        return st;
    st = rcoll_sock_listen(&addr, 0, &fd);
    if (st != RCOLL_OK)
        return st;
    rcoll_boot_id_pack(&addr, secret, id);
    return rcoll_boot_root_start(fd, secret, rcoll_config.timeout);
}

/* Called with a reference from rcoll__comm_get; drops it and the user's
 * handle reference. Only the first destroy or abort closes: a second one
 * (another thread) finds it closing and is an argument error. */
static rcoll_status_t comm_close(struct rcoll_comm *c, int abort)
{
    rcoll_status_t st;
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        rcoll__comm_release(c);
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_%s: comm %p is being destroyed "
                                "or aborted by another call",
                                abort ? "abort" : "destroy", (void *)c);
    }
    __atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
    c->stop = 1;
    if (abort) {
        char msg[256];
        snprintf(msg, sizeof(msg), "rank %d: rcoll_comm_abort was called",
                 c->rank);
        comm_set_error_locked(c, RCOLL_ERR_ABORTED, msg);
    }
    pthread_mutex_unlock(&c->lock);
    comm_wake(c);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    c->thread_started = 0;
    /* No thread may drive the engine while the transports go: a caller of
     * rcoll_wait in another thread finishes its turn first (after an abort
     * its request fails in that turn), and what is still queued then (an
     * operation another thread posted meanwhile) fails here. */
    pthread_mutex_lock(&c->engine);
    pthread_mutex_lock(&c->lock);
    int failed = c->error != RCOLL_OK;
    pthread_mutex_unlock(&c->lock);
    if (failed) {
        fail_all(c, RCOLL_OK, NULL);
    } else {
        char msg[256];
        snprintf(msg, sizeof(msg), "rank %d: the communicator was "
                 "destroyed with this operation in flight", c->rank);
        fail_all(c, RCOLL_ERR_INVALID_ARGUMENT, msg);
    }
    pthread_mutex_lock(&c->lock);
    st = c->error;
    pthread_mutex_unlock(&c->lock);
    close_transports(c, abort || c->error != RCOLL_OK,
                     c->error != RCOLL_OK ? c->errmsg : NULL);
    pthread_mutex_unlock(&c->engine);
    if (st != RCOLL_OK && !abort)
        rcoll__set_error(st, "%s", c->errmsg);
    rcoll__comm_release(c); /* ours */
    rcoll__comm_release(c); /* the handle's */
    return abort ? RCOLL_OK : st;
}

/* The error of an API call given a handle that is not a live communicator
 * (never created, destroyed or aborted). */
static rcoll_status_t comm_not_live(const char *call, rcoll_comm_t comm)
{
    return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                            "%s: comm %p is not a live communicator "
                            "(destroyed or aborted already?)", call,
                            (void *)comm);
}

/* The body of an API entry that holds a reference on `comm` for the call
 * (see rcoll__comm_get: another thread may abort and free it meanwhile),
 * around its work in comm_do_<name>. */
#define COMM_HELD(call)                                                      \
    do {                                                                     \
        int held_ = comm && rcoll__comm_get(comm);                           \
        rcoll_status_t st_ = (call);                                         \
        if (held_)                                                           \
            rcoll__comm_release(comm);                                       \
        return st_;                                                          \
    } while (0)

RCOLL_API rcoll_status_t rcoll_comm_destroy(rcoll_comm_t comm)
{
    rcoll__clear_error();
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_destroy: comm is NULL");
    if (!rcoll__comm_get(comm))
        return comm_not_live("rcoll_comm_destroy", comm);
    return comm_close(comm, 0);
}

RCOLL_API rcoll_status_t rcoll_comm_abort(rcoll_comm_t comm)
{
    rcoll__clear_error();
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_abort: comm is NULL");
    if (!rcoll__comm_get(comm))
        return comm_not_live("rcoll_comm_abort", comm);
    return comm_close(comm, 1);
}

static rcoll_status_t comm_do_register(rcoll_comm_t comm, void *buf, size_t len, void **handle)
{
    rcoll__clear_error();
    if (!comm || !buf || len == 0 || !handle)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_register: %s is NULL or zero",
                                !comm ? "comm" : !buf ? "buf"
                                                      : !len ? "len" : "handle");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_register", comm);
    struct rcoll_mem_reg *m = calloc(1, sizeof(*m));
    if (!m)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rcoll_comm_register: "
                                "no memory");
    m->buf = buf;
    m->len = len;
    for (int i = 0; i < comm->ntls; i++) {
        if (!comm->tls[i]->mem_reg)
            continue;
        rcoll_status_t st = comm->tls[i]->mem_reg(comm->tl_ctxs[i], buf, len,
                                                  &m->tl[i]);
        if (st != RCOLL_OK) {
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
            mem_reg_free(comm, m);
            return rcoll__set_error(st, "rcoll_comm_register: rank %d: %s",
                                    comm->rank, msg);
        }
    }
    pthread_mutex_lock(&comm->lock);
    m->next = comm->regs;
    comm->regs = m;
    pthread_mutex_unlock(&comm->lock);
    *handle = m;
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_register(rcoll_comm_t comm, void *buf,
                                             size_t len, void **handle)
{
    COMM_HELD(comm_do_register(comm, buf, len, handle));
}

static rcoll_status_t comm_do_deregister(rcoll_comm_t comm, void *handle)
{
    rcoll__clear_error();
    if (!comm || !handle)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_deregister: %s is NULL",
                                !comm ? "comm" : "handle");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_deregister", comm);
    pthread_mutex_lock(&comm->lock);
    struct rcoll_mem_reg **pp = &comm->regs;
    while (*pp && *pp != handle)
        pp = &(*pp)->next;
    struct rcoll_mem_reg *m = *pp;
    if (m)
        *pp = m->next;
    pthread_mutex_unlock(&comm->lock);
    if (!m)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_deregister: rank %d: not a "
                                "registration of this communicator (already "
                                "deregistered?)", comm->rank);
    mem_reg_free(comm, m);
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_deregister(rcoll_comm_t comm,
                                               void *handle)
{
    COMM_HELD(comm_do_deregister(comm, handle));
}

static rcoll_status_t comm_do_rank(rcoll_comm_t comm, int *rank)
{
    if (!comm || !rank)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_rank: NULL argument");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_rank", comm);
    *rank = comm->rank;
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_rank(rcoll_comm_t comm, int *rank)
{
    COMM_HELD(comm_do_rank(comm, rank));
}

static rcoll_status_t comm_do_size(rcoll_comm_t comm, int *size)
{
    if (!comm || !size)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_size: NULL argument");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_size", comm);
    *size = comm->nranks;
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_size(rcoll_comm_t comm, int *size)
{
    COMM_HELD(comm_do_size(comm, size));
}

static rcoll_status_t comm_do_get_async_error(rcoll_comm_t comm,
                                              rcoll_status_t *err)
{
    if (!comm || !err)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_get_async_error: NULL argument");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_get_async_error", comm);
    pthread_mutex_lock(&comm->lock);
    *err = comm->error;
    if (comm->error != RCOLL_OK)
        rcoll__set_error_str(comm->errmsg);
    pthread_mutex_unlock(&comm->lock);
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_get_async_error(rcoll_comm_t comm,
                                                    rcoll_status_t *err)
{
    COMM_HELD(comm_do_get_async_error(comm, err));
}

/* ---- requests ---- */

/* The blocking call's own timeout (it has no request for timeout_check):
 * 1 once the communicator has failed with the diagnosis. */
static int inline_timeout(struct rcoll_comm *c, coll_sched_t *s, double now)
{
    /* requests posted meanwhile: timeout_check's clock */
    if (__atomic_load_n(&c->qhead, __ATOMIC_ACQUIRE))
        return 0;
    if (now - c->last_progress < c->timeout) {
        if (rcoll_unlikely(c->diag_walking))
            rcoll__diag_cancel(c);
        return 0;
    }
    char msg[1536], cause[768];
    int p = s->waiting_peer;
    if (!rcoll__diag_walk(c, p, cause, sizeof(cause)))
        return 0;
    snprintf(msg, sizeof(msg), "rank %d: %s #%llu (count %zu, %s) made no "
             "progress for %g s (RCOLL_TIMEOUT): waiting for %s rank %d "
             "(%s pid %d) at step %d of the shared area (1 publish, 2 read "
             "the inputs, 3 finish; its operation %llu)%s%s",
             c->rank, coll_kind_name(s->kind), (unsigned long long)s->seq,
             s->count, rcoll_datatype_name(s->dt), c->timeout,
             s->waiting_for ? s->waiting_for : "?", p,
             p >= 0 ? c->bs.peers[p].hostname : "?",
             p >= 0 ? c->bs.peers[p].pid : -1, s->aphase + 1,
             (unsigned long long)s->aseq, cause[0] ? "; " : "", cause);
    pthread_mutex_lock(&c->lock);
    comm_set_error_locked(c, RCOLL_ERR_TIMEOUT, msg);
    pthread_mutex_unlock(&c->lock);
    return 1;
}

/* How long an inline call spins (pause loops) before it turns the engine,
 * which yields the core between looks. Spinning pays while our peers run
 * on other cores; while one waits for our core (the scheduler put two
 * ranks on one core, a job bound to fewer cores than it has ranks on the
 * host, a container's CPU quota) each spin only delays it: 2 ranks on one
 * core spun 2048 pause loops, ~80 us, per 8-byte all-gather, for the ~50
 * ms after start-up in one run in 4 to 6 of rcoll-perf on these VMs
 * before the scheduler moved a rank. So the budget follows what the
 * engine's yields find: one that took over SPIN_BUSY_S gave the core to
 * someone (a quarter of the budget, down to SPIN_MIN), a quick one found
 * nobody waiting (twice the budget, up to SPIN_MAX). */
static void spin_adapt(struct rcoll_comm *c)
{
    if (c->yield_s > SPIN_BUSY_S)
        c->spin_budget = RCOLL_MAX(c->spin_budget / 4, SPIN_MIN);
    else
        c->spin_budget = RCOLL_MIN(c->spin_budget * 2, SPIN_MAX);
}

rcoll_status_t rcoll__comm_run_inline(struct rcoll_comm *c, coll_sched_t *s)
{
    if (!c->env.area || !coll_area_wants(s, &c->env))
        return RCOLL_INPROGRESS;
    /* the engine is free when nothing is queued (the progress thread holds
     * it only to run requests, or for its idle look once a second) */
    if (pthread_mutex_trylock(&c->engine) != 0)
        return RCOLL_INPROGRESS;
    /* No c->lock on the way of a call that completes while it spins (see
     * live_gen for why every atomic operation counts): the queue's head,
     * the error and `closed` are stored atomically, the count of
     * collectives is incremented so; c->inline_s (for dumps and the
     * diagnosis) is set under the lock once the call turns the engine. */
    if (__atomic_load_n(&c->qhead, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&c->closed, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) != RCOLL_OK) {
        pthread_mutex_unlock(&c->engine);
        return RCOLL_INPROGRESS; /* the queue, or the error, on the
                                    regular path */
    }
    s->seq = __atomic_add_fetch(&c->coll_seq, 1, __ATOMIC_RELAXED);
    s->waiting_peer = -1;

    char msg[1024];
    double spin_until = 0;
    int clock = 0; /* last_progress set: on the first slow turn */
    int shown = 0; /* c->inline_s set */
    rcoll_status_t st = coll_area_start(s, &c->env);
    /* polling without a system call first, while every rank of the host
     * may have a core of its own: a peer is about to write (spin_adapt) */
    int spin = c->env.local_size <= c->env.ncores, spins = 0;
    while (st == RCOLL_OK) {
        int moved = 0;
        st = coll_sched_progress(s, &c->env, &moved);
        if (st != RCOLL_INPROGRESS)
            break;
        st = RCOLL_OK;
        if (moved)
            spins = 0;
        if (spin && spins++ < c->spin_budget) {
            rcoll_cpu_relax();
            continue;
        }
        if (!shown) {
            pthread_mutex_lock(&c->lock);
            c->inline_s = s;
            pthread_mutex_unlock(&c->lock);
            shown = 1;
        }
        if (moved || !clock) {
            c->last_progress = rcoll_time_sec();
            clock = 1;
        }
        c->yield_s = -1;
        engine_turn(c, &spin_until, 100, 100);
        if (spin && c->yield_s >= 0)
            spin_adapt(c);
        if ((st = __atomic_load_n(&c->error, __ATOMIC_ACQUIRE)) != RCOLL_OK) {
            /* one more look, as the engine gives its running requests: a
             * peer that finished this call and then failed (a mismatch in
             * its next one) published its part before it said so */
            if (coll_sched_progress(s, &c->env, &moved) == RCOLL_OK)
                st = RCOLL_OK;
            break;
        }
        if (inline_timeout(c, s, rcoll_time_sec())) {
            st = RCOLL_ERR_TIMEOUT;
            break;
        }
    }
    if (shown || st != RCOLL_OK ||
        __atomic_load_n(&c->qhead, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&c->lock);
        c->inline_s = NULL;
        if (st != RCOLL_OK) {
            if (c->error == RCOLL_OK) { /* a mismatch: the ranks disagree */
                snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
                comm_set_error_locked(c, st, msg);
            }
            st = c->error;
            snprintf(msg, sizeof(msg), "%s", c->errmsg);
        }
        /* requests posted meanwhile by other threads: the progress
         * thread */
        if (c->qhead && c->waiters == 0)
            pthread_cond_signal(&c->idle_cond);
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&c->engine);
    if (st != RCOLL_OK)
        return rcoll__set_error(st, "%s", msg);
    return RCOLL_OK;
}

rcoll_status_t rcoll__comm_post(struct rcoll_comm *c, struct rcoll_request *r,
                                int will_wait)
{
    const char *what = coll_kind_name(r->sched.kind);
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_%s: the communicator was destroyed",
                                what);
    }
    if (c->error != RCOLL_OK) {
        rcoll_status_t st = c->error;
        rcoll__set_error(st, "rcoll_%s: %s", what, c->errmsg);
        pthread_mutex_unlock(&c->lock);
        return st;
    }
    r->comm = c;
    if (r->sched.kind == COLL_SEND)
        r->sched.seq = c->p2p_tx[r->sched.root]++;
    else if (r->sched.kind != COLL_RECV)
        r->sched.seq = __atomic_add_fetch(&c->coll_seq, 1,
                                          __ATOMIC_RELAXED);
    r->sched.waiting_peer = -1;
    r->refs = 1;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    r->next = NULL;
    r->prev = c->qtail;
    if (c->qtail)
        c->qtail->next = r;
    else
        __atomic_store_n(&c->qhead, r, __ATOMIC_RELEASE);
    c->qtail = r;
    pthread_mutex_unlock(&c->lock);
    /* a caller about to wait drives the engine itself */
    if (!will_wait)
        comm_wake(c);
    return RCOLL_OK;
}

/* No message, no sequence number, no lock when all is well: Open MPI's
 * MPI_Allreduce, MPI_Bcast and MPI_Allgather return at once for count 0,
 * and so does NCCL; ranks that disagree on the count (0 here, more
 * elsewhere) are caught by the next operation or the deadline instead. */
rcoll_status_t rcoll__comm_noop(struct rcoll_comm *c, coll_kind_t kind)
{
    if (!__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) == RCOLL_OK)
        return RCOLL_OK;
    const char *what = coll_kind_name(kind);
    rcoll_status_t st;
    pthread_mutex_lock(&c->lock);
    if (c->closed)
        st = rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                              "rcoll_%s: the communicator was destroyed",
                              what);
    else
        st = rcoll__set_error(c->error, "rcoll_%s: %s", what, c->errmsg);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* A request of a group not ended yet, or one whose group could not post
 * it (comm NULL): what rcoll_test and rcoll_wait say of it. */
static rcoll_status_t req_unposted(rcoll_request_t req, const char *fn)
{
    if (req->grouped)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: the request was posted inside "
                                "rcoll_group_start/end and the group has "
                                "not ended (it launches then)", fn);
    if (req->status != RCOLL_OK)
        rcoll__set_error_str(req->errmsg);
    return req->status;
}

/* What a finished request did, into the caller's struct as far as its
 * size says (rcoll_req_status_t). */
static void req_status_fill(const struct rcoll_request *r, rcoll_status_t st,
                            rcoll_req_status_t *out)
{
    if (!out || out->size <= sizeof(out->size))
        return;
    rcoll_req_status_t v = {sizeof(v), st, r->sched.count, -1, -1};
    if (r->sched.kind == COLL_RECV) {
        v.source = r->sched.root;
        v.tag = r->sched.tag;
    }
    size_t n = RCOLL_MIN(out->size, sizeof(v)) - sizeof(v.size);
    memcpy((char *)out + sizeof(v.size), (const char *)&v + sizeof(v.size),
           n);
}

RCOLL_API rcoll_status_t rcoll_test(rcoll_request_t req, int *done)
{
    return rcoll_test_status(req, done, NULL);
}

RCOLL_API rcoll_status_t rcoll_test_status(rcoll_request_t req, int *done,
                                           rcoll_req_status_t *status)
{
    if (!req || !done)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_test: NULL argument");
    if (req->grouped || !req->comm) {
        *done = !req->grouped;
        rcoll_status_t st = req_unposted(req, "rcoll_test");
        if (*done)
            req_status_fill(req, st, status);
        return st;
    }
    struct rcoll_comm *c = req->comm;
    rcoll_status_t st = RCOLL_OK;
    /* one non-blocking turn of the engine if nobody else drives it */
    if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE) &&
        pthread_mutex_trylock(&c->engine) == 0) {
        double spin_until = 1; /* already past: never block */
        engine_turn(c, &spin_until, 0, 0);
        pthread_mutex_unlock(&c->engine);
    }
    pthread_mutex_lock(&c->lock);
    *done = req->done;
    if (req->done) {
        st = req->status;
        if (st != RCOLL_OK)
            rcoll__set_error_str(req->errmsg);
        req_status_fill(req, st, status);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

RCOLL_API rcoll_status_t rcoll_wait(rcoll_request_t req)
{
    return rcoll_wait_status(req, NULL);
}

RCOLL_API rcoll_status_t rcoll_wait_status(rcoll_request_t req,
                                           rcoll_req_status_t *status)
{
    if (!req)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_wait: request is NULL");
    if (req->grouped || !req->comm) {
        rcoll_status_t st = req_unposted(req, "rcoll_wait");
        if (!req->grouped) {
            req_status_fill(req, st, status);
            coll_sched_free(&req->sched);
            free(req);
        }
        return st;
    }
    struct rcoll_comm *c = req->comm;
    rcoll_status_t st;
    double spin_until = 0;

    if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
        /* take the engine over from the progress thread */
        pthread_mutex_lock(&c->lock);
        /* atomic: the progress thread reads it without the lock (its half
         * of the handshake below; TSan saw the plain increment race) */
        __atomic_add_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&c->lock);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(&c->in_epoll, __ATOMIC_SEQ_CST))
            comm_kick(c);
        pthread_mutex_lock(&c->engine);
        while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
            engine_turn(c, &spin_until, 100, 100);
        pthread_mutex_unlock(&c->engine);
        pthread_mutex_lock(&c->lock);
        __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
        /* requests left for the thread to drive: wake it now */
        if (c->waiters == 0 && (c->qhead || c->stop))
            pthread_cond_signal(&c->idle_cond);
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_lock(&c->lock);
    st = req->status;
    if (st != RCOLL_OK)
        rcoll__set_error_str(req->errmsg);
    req_status_fill(req, st, status);
    pthread_mutex_unlock(&c->lock);
    rcoll__req_put(req);
    rcoll__comm_release(c);
    return st;
}
