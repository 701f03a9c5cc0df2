/* The progress engine: the communicator's error, completing requests,
 * the deadline, one turn of the engine, and the progress thread.
 *
 * Callers post requests to a FIFO (the order every rank agrees on). The
 * "engine" - the transports' descriptors and every request's schedule -
 * is driven by whoever holds c->engine: a caller blocked in rcoll_wait
 * (every blocking collective), or else the communicator's progress
 * thread, which only drives requests nobody waits for and otherwise
 * sleeps. Waiting polls briefly while yielding the CPU, then blocks in
 * epoll_wait, so idle ranks that share cores cost nothing. The engine
 * enforces the communicator's timeout (no progress for that long fails
 * it, naming the rank waited for) and turns a broken link into an error
 * of every queued request. Why a thread at all: non-blocking collectives
 * must advance while the caller computes (PyTorch DDP overlaps all-reduce
 * with backward), dead peers must be noticed without the caller polling,
 * and deadlines must hold even if the caller never calls rcoll_test. Why
 * callers drive: a thread hand-off per message costs more than a small
 * collective (docs/design.md). */
#include "core.h"
#include "util/params.h"
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---- errors ---- */

/* Records the communicator's first error (caller holds the lock). */
void rcoll__comm_set_error_locked(struct rcoll_comm *c, rcoll_status_t st,
                                  const char *msg)
{
    if (c->error != RCOLL_OK)
        return;
    snprintf(c->errmsg, sizeof(c->errmsg), "%s", msg);
    /* atomic: a blocking call run inline reads it without the lock */
    __atomic_store_n(&c->error, st, __ATOMIC_RELEASE);
    rcoll_warn("rank %d: communicator failed: %s", c->rank, msg);
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
    rcoll__comm_set_error_locked(c, st, buf);
    pthread_mutex_unlock(&c->lock);
}

void rcoll__engine_wakeup(rcoll_ev_handler_t *h, uint32_t events)
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
 * destroyed (rcoll__close_transports), so a kick from a thread that posts while
 * another closes never reaches a destroyed context. */
static void comm_kick_locked(struct rcoll_comm *c)
{
    uint64_t one = 1;
    if (c->wait_tl >= 0 && c->tls[c->wait_tl]->kick)
        c->tls[c->wait_tl]->kick(c->tl_ctxs[c->wait_tl]);
    if (write(c->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        rcoll_warn("eventfd write: %s", strerror(errno));
}

void rcoll__comm_kick(struct rcoll_comm *c)
{
    pthread_mutex_lock(&c->lock);
    comm_kick_locked(c);
    pthread_mutex_unlock(&c->lock);
}

/* Makes the progress thread look at the queue, wherever it waits. */
void rcoll__comm_wake(struct rcoll_comm *c)
{
    pthread_mutex_lock(&c->lock);
    pthread_cond_signal(&c->idle_cond);
    comm_kick_locked(c);
    pthread_mutex_unlock(&c->lock);
}

/* The communicator failed: each transport tells its peers why, once,
 * before any failed request takes back what a peer may write into
 * (fail_notify). The engine's holder, without c->lock. */
static void comm_announce(struct rcoll_comm *c)
{
    char why[1024];
    if (c->announced ||
        __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) == RCOLL_OK)
        return;
    c->announced = 1;
    pthread_mutex_lock(&c->lock);
    snprintf(why, sizeof(why), "%s", c->errmsg);
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < c->ntls; i++)
        if (c->tls[i]->fail_notify)
            c->tls[i]->fail_notify(c->tl_ctxs[i], why);
}

/* ---- the progress thread ---- */

/* Before a request completes: no transport may write into its buffers any
 * more (receives in place end) nor read from them (sends not done yet are
 * withdrawn: send_revoke), so that they are the caller's again when
 * rcoll_wait or rcoll_test reports the result, and its memory may be
 * freed. The engine's holder, without c->lock: a transport may report a
 * failure from here, which takes the lock (tl_peer_failed). */
static void req_release_tl(struct rcoll_comm *c, struct rcoll_request *r,
                           const char *why)
{
    coll_sched_t *s = &r->sched;
    r->released = 1;
    if (!r->started || !coll_sched_busy(s))
        return;
    coll_sched_md_drain(s, &c->env);
    coll_sched_unplace(s, &c->env);
    /* each part (channel) is its sends' cookie */
    for (int k = 0; k < coll_sched_nparts(s); k++) {
        coll_sched_t *x = coll_sched_part(s, k);
        for (int i = 0; x->sends_inflight > 0 && i < c->ntls; i++)
            c->tls[i]->send_revoke(c->tl_ctxs[i], x, why);
        if (x->sends_inflight > 0) /* a transport broke its contract */
            rcoll_warn("rank %d: %s #%llu: %d sends still held by a "
                       "transport after send_revoke", c->rank,
                       coll_kind_name(s->kind), (unsigned long long)s->seq,
                       x->sends_inflight);
    }
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

/* Completes every queued request with status st (the engine's holder,
 * without c->lock); msg NULL: with the communicator's error. */
void rcoll__comm_fail_all(struct rcoll_comm *c, rcoll_status_t st, const char *msg)
{
    comm_announce(c);
    pthread_mutex_lock(&c->lock);
    while (c->qhead) {
        struct rcoll_request *r = c->qhead;
        if (!r->released) {
            /* only the engine's holder (us) completes requests: r stays
             * the head while the lock is dropped */
            char why[1024];
            snprintf(why, sizeof(why), "%s", msg ? msg : c->errmsg);
            pthread_mutex_unlock(&c->lock);
            req_release_tl(c, r, why);
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
    rcoll__comm_set_error_locked(c, RCOLL_ERR_TIMEOUT, msg);
    pthread_mutex_unlock(&c->lock);
}

/* The turn's view of the queue (c->lock): after a failure, requests not
 * started fail with the communicator's error (running ones get one more
 * look: what they need may have arrived before the peer went away); the
 * rest, in posting order (collectives are built in that order on every
 * rank), into c->snap, so that one lock serves the turn. Only the
 * engine's holder (us) finishes and so frees requests, and what is posted
 * meanwhile waits for the next turn. Returns how many; -1 when the
 * communicator stops and nothing is left. */
static int engine_snapshot(struct rcoll_comm *c, int *failed)
{
    pthread_mutex_lock(&c->lock);
    *failed = c->error != RCOLL_OK;
    if (*failed)
        for (struct rcoll_request *q = c->qhead, *nx; q; q = nx) {
            nx = q->next;
            if (!q->started) { /* nothing of it in a transport */
                q->released = 1;
                req_finish_locked(c, q, c->error, c->errmsg);
            }
        }
    if (!c->qhead && c->stop) {
        pthread_mutex_unlock(&c->lock);
        return -1;
    }
    int ns = 0;
    for (struct rcoll_request *q = c->qhead; q; q = q->next) {
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
    pthread_mutex_unlock(&c->lock);
    return ns;
}

/* Completes r with st (the engine's holder, without c->lock). A broken
 * link or a mismatch poisons the communicator: the ranks no longer agree
 * on what comes next. A truncated receive does not: it consumed its whole
 * message, and only it failed. */
static void engine_complete(struct rcoll_comm *c, struct rcoll_request *r,
                            rcoll_status_t st)
{
    char msg[1024];
    msg[0] = '\0';
    if (st != RCOLL_OK) /* not on the fast path */
        snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
    if (st != RCOLL_OK && st != RCOLL_ERR_TRUNCATED) {
        pthread_mutex_lock(&c->lock);
        rcoll__comm_set_error_locked(c, st, msg);
        pthread_mutex_unlock(&c->lock);
        comm_announce(c);
    }
    req_release_tl(c, r, msg);
    pthread_mutex_lock(&c->lock);
    req_finish_locked(c, r, st, msg);
    pthread_mutex_unlock(&c->lock);
}

/* Runs every request of the snapshot once: builds the ones not started,
 * progresses the rest, completes the finished. Sets *progressed if
 * anything moved, *md_busy if the memory domain still works on received
 * messages (no fd says when it is done: the turn polls again at once);
 * returns 1 if a request completed. */
static int engine_run(struct rcoll_comm *c, int ns, double now,
                      int *progressed, int *md_busy)
{
    int finished = 0;
    for (int k = 0; k < ns; k++) {
        struct rcoll_request *r = c->snap[k];
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
            *progressed = 1;
        }
        if (st == RCOLL_INPROGRESS) {
            *md_busy |= r->sched.md_npending > 0;
            continue;
        }
        engine_complete(c, r, st);
        finished = 1;
    }
    return finished;
}

/* How long the turn may block: not while things move; while an operation
 * runs and things moved within RCOLL_SPIN_US, not either (but the caller
 * yields the CPU between looks: ranks often outnumber cores, and a peer on
 * this core must get to run); past that 100 ms, so that deadlines are
 * checked; with nothing in flight idle_ms. Never longer than max_ms. */
static int engine_wait_ms(double *spin_until, int any, int progressed,
                          int idle_ms, int max_ms)
{
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
    return ms > max_ms ? max_ms : ms;
}

/* Before the engine may wait: nothing held back may block a peer. Wakes
 * peers asleep since a publish of the shared area; stalled for 100 ms (a
 * quarter of the timeout if less), sets aside what fills the slots of
 * peers that may be out of credits (not sooner: with ranks
 * oversubscribed, waits of a few ms are common while a peer's early
 * chunks fill our slots, and setting them aside then only costs a copy
 * and fresh pages, many times the page faults of a large all-gather);
 * lets each transport hand back credits and arm its events. Returns 1 if
 * that found work (no wait). */
static int engine_unstick(struct rcoll_comm *c, int ms, int any)
{
    int found = 0;
    coll_area_flush(c->env.area);
    int k;
    if (ms > 0 && any &&
        rcoll_time_sec() - c->last_progress >= RCOLL_MIN(0.1, c->timeout / 4) &&
        (k = coll_match_unblock(&c->env)) > 0) {
        found = 1;
        if (c->unblock_at != c->last_progress) { /* a new stall */
            c->unblock_at = c->last_progress;
            c->unblocks++;
            if (rcoll__log_level >= RCOLL_LOG_DEBUG) {
                pthread_mutex_lock(&c->lock);
                struct rcoll_request *r = rcoll__comm_stalled_req(c);
                rcoll_debug(RCOLL_SUBSYS_COLL, "rank %d: no progress for "
                            "%.0f ms (%s #%llu waits for rank %d): set "
                            "aside %d messages that held their senders' "
                            "credits", c->rank,
                            RCOLL_MIN(0.1, c->timeout / 4) * 1e3,
                            r ? coll_kind_name(r->sched.kind) : "-",
                            r ? (unsigned long long)r->sched.seq : 0,
                            r ? r->sched.waiting_peer : -1, k);
                pthread_mutex_unlock(&c->lock);
            }
        }
    }
    if (!found)
        for (int i = 0; i < c->ntls; i++)
            if (c->tls[i]->idle && c->tls[i]->idle(c->tl_ctxs[i]) > 0)
                found = 1; /* it found work while arming its events */
    return found;
}

/* Waits up to ms for I/O: a transport without fds (shared memory) on its
 * own futex (with sockets as well, in 1 ms slices between looks at them),
 * then epoll; yields the CPU when it found nothing and did not sleep;
 * dispatches the events and lets every transport progress. */
static void engine_io(struct rcoll_comm *c, int ms, int any, int progressed)
{
    struct epoll_event evs[64];
    int slept = 0;
    if (ms > 0 && c->wait_tl >= 0) {
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
     * (with a pause spin here, a peer on this core waits out the whole
     * RCOLL_SPIN_US, ~200 us, for an 8-byte all-reduce) */
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
}

/* One turn of the engine; the caller holds c->engine: every request in
 * flight runs once, then the turn waits for I/O (engine_wait_ms says how
 * long). Returns 1 if the communicator is stopping and has nothing left
 * to do. */
int rcoll__engine_turn(struct rcoll_comm *c, double *spin_until, int idle_ms,
                       int max_ms)
{
    int failed, progressed = 0, md_busy = 0;
    int ns = engine_snapshot(c, &failed);
    if (ns < 0)
        return 1;
    double now = ns ? rcoll_time_sec() : 0;
    /* a blocking call run inline (rcoll__comm_run_inline) is one more
     * operation in flight: poll, then sleep as for a request */
    int any = ns > 0 || c->inline_s != NULL;
    if (failed)
        comm_announce(c);
    int finished = engine_run(c, ns, now, &progressed, &md_busy);
    if (failed) {
        rcoll__comm_fail_all(c, RCOLL_OK, NULL);
        return 0;
    }
    if (finished) { /* back to the caller at once (latency) */
        *spin_until = 0;
        return 0;
    }
    if (ns && !progressed) /* (a call run inline checks its own) */
        timeout_check(c, now);
    int ms = md_busy ? 0 : engine_wait_ms(spin_until, any, progressed,
                                          idle_ms, max_ms);
    if (!progressed && engine_unstick(c, ms, any)) {
        ms = 0;
        progressed = 1;
    }
    engine_io(c, ms, any, progressed);
    return 0;
}

/* The progress thread drives the engine while requests are queued and no
 * caller drives it. A caller blocked in rcoll_wait takes the engine over
 * (c->waiters > 0) and polls the sockets itself, which saves two thread
 * hand-offs per operation. With nothing queued the thread sleeps on
 * idle_cond, waking once a second for a non-blocking look at the sockets so
 * that a peer's death becomes the communicator's error even while the
 * application is busy elsewhere. */
void *rcoll__progress_thread(void *arg)
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
                rcoll__engine_turn(c, &never, 0, 0);
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
        int done = rcoll__engine_turn(c, &spin_until, 1000, max_ms);
        __atomic_store_n(&c->in_epoll, 0, __ATOMIC_SEQ_CST);
        if (done)
            break;
    }
    pthread_mutex_unlock(&c->engine);
    return NULL;
}

/* The calls from the transports back into this engine. */
void rcoll__engine_tl_events(struct rcoll_comm *c)
{
    c->tl_events.arg = c;
    c->tl_events.send_done = tl_send_done;
    c->tl_events.peer_failed = tl_peer_failed;
}
