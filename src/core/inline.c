/* The shared area's fast path: a blocking call that every rank of one
 * host runs through the shared area (coll/area.c) completes in its
 * caller's thread, without a request, a lock or a system call when its
 * peers are quick. */
#include "core.h"
#include "util/params.h"
#include <stdio.h>
#include <string.h>

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
    rcoll__comm_set_error_locked(c, RCOLL_ERR_TIMEOUT, msg);
    pthread_mutex_unlock(&c->lock);
    return 1;
}

/* How long an inline call spins (pause loops) before it turns the engine,
 * which yields the core between looks. Spinning pays while our peers run
 * on other cores; while one waits for our core (the scheduler put two
 * ranks on one core, a job bound to fewer cores than it has ranks on the
 * host, a container's CPU quota) each spin only delays it: the whole
 * budget, RCOLL_SPIN_MAX pause loops, is ~80 us per call. So the budget
 * follows what the engine's yields find: one that took over
 * RCOLL_SPIN_BUSY_S gave the core to someone (a quarter of the budget,
 * down to RCOLL_SPIN_MIN), a quick one found nobody waiting (twice the
 * budget, up to RCOLL_SPIN_MAX). */
static void spin_adapt(struct rcoll_comm *c)
{
    if (c->yield_s > RCOLL_SPIN_BUSY_S)
        c->spin_budget = RCOLL_MAX(c->spin_budget / 4, RCOLL_SPIN_MIN);
    else
        c->spin_budget = RCOLL_MIN(c->spin_budget * 2, RCOLL_SPIN_MAX);
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
        rcoll__engine_turn(c, &spin_until, 100, 100);
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
                rcoll__comm_set_error_locked(c, st, msg);
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
