/* The process's communicators: their references, the list of live ones
 * (every API call checks its handle against it, so a destroyed or foreign
 * handle is an error, not a crash) and freeing one. */
#include "core.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the process's communicators, for rcoll_comm_dump / SIGUSR1 ---- */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcoll_comm *live_head;
/* Every change to the list bumps live_gen (under live_lock). A thread that
 * found c in the list at generation g knows it is still there as long as
 * live_gen reads g, so its next calls on c skip the lock and the walk:
 * each atomic operation drains the store buffer, whose stores to the
 * shared area wait for their cache lines, and a small blocking call would
 * otherwise make about ten of them (docs/design.md). */
static uint64_t live_gen = 1; /* a thread's cache starts at 0: no match */
static __thread struct rcoll_comm *live_seen;
static __thread uint64_t live_seen_gen;
/* The memory of destroyed communicators, reused by the next ones and
 * never freed: a lookup that trusted its cache may still touch one that
 * another thread destroyed meanwhile (a program that destroys a
 * communicator while using it, which is erroneous but must not crash);
 * it then sees live_gen move and looks again. */
static struct rcoll_comm *live_spare;

void rcoll__live_add(struct rcoll_comm *c)
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
struct rcoll_comm *rcoll__live_alloc(void)
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
     * (rcoll__comm_free removes it first) */
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

/* ---- lifetime ---- */

void rcoll__comm_free(struct rcoll_comm *c)
{
    live_remove(c);
    rcoll__diag_fini(c);
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->evfd >= 0)
        close(c->evfd);
    coll_match_destroy(c->match);
    if (c->env.md && c->env.md->ctx_destroy)
        c->env.md->ctx_destroy(c->env.md_ctx);
    coll_area_destroy(c->env.area);
    free(c->snap);
    free(c->p2p_tx);
    free(c->eps);
    free(c->peer_tl);
    free(c->ring);
    free(c->ring_pos);
    free(c->chan_rings);
    rcoll_bootstrap_finalize(&c->bs);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->engine);
    pthread_cond_destroy(&c->idle_cond);
    live_park(c);
}

void rcoll__comm_release(struct rcoll_comm *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        rcoll__comm_free(c);
}

int rcoll__live_foreach(void (*fn)(struct rcoll_comm *c, void *arg),
                        void *arg)
{
    int n = 0;
    pthread_mutex_lock(&live_lock);
    for (struct rcoll_comm *c = live_head; c; c = c->next_live, n++)
        fn(c, arg);
    pthread_mutex_unlock(&live_lock);
    return n;
}
