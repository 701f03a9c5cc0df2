/* The registration cache. Entries cover page-aligned ranges (a later use
 * of a neighbouring part of the same pages hits); a hit needs the whole
 * range inside one entry. Before every lookup the cache takes in what the
 * memory monitor logged since it last looked (memmon.c): entries that
 * overlap a range the process unmapped or dropped are dead, deregistered
 * at once if unused, else at their last put. Unused entries stay
 * registered up to max_pinned bytes, the least recently used evicted
 * first. Without a monitor every get registers and every put
 * deregisters: no stale registration is possible, nothing is saved.
 * The list is short (a bounded number of large buffers), so it is a list. */
#include "proto/rcache.h"
#include "proto/memmon.h"
#include "util/util.h"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define RCACHE_MAX_ENTRIES 256

struct rcoll_rcache_entry {
    uintptr_t lo, hi;
    void *handle;
    int refs;
    int dead;       /* invalidated, or never cached: dereg at last put */
    int cached;     /* in the list */
    uint64_t used;  /* the cache's clock at the last get */
    struct rcoll_rcache_entry *next;
};

struct rcoll_rcache {
    const rcoll_rcache_ops_t *ops;
    void *ctx;
    pthread_mutex_t lock;
    rcoll_rcache_entry_t *head;
    uint64_t seen;  /* memmon ranges taken in */
    uint64_t clock;
    rcoll_rcache_stats_t st;
};

rcoll_rcache_t *rcoll_rcache_create(const rcoll_rcache_ops_t *ops,
                                    void *ctx, size_t max_pinned)
{
    rcoll_rcache_t *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return NULL;
    rc->ops = ops;
    rc->ctx = ctx;
    pthread_mutex_init(&rc->lock, NULL);
    rc->st.max_pinned = max_pinned;
    rc->st.monitored = rcoll_memmon_available(NULL, 0);
    rc->seen = rcoll_memmon_sync();
    return rc;
}

/* Takes e out of the list (the lock held). */
static void unlink_entry(rcoll_rcache_t *rc, rcoll_rcache_entry_t *e)
{
    for (rcoll_rcache_entry_t **p = &rc->head; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    e->cached = 0;
    rc->st.entries--;
    rc->st.pinned -= e->hi - e->lo;
}

static void drop(rcoll_rcache_t *rc, rcoll_rcache_entry_t *e)
{
    if (e->cached)
        unlink_entry(rc, e);
    rc->ops->dereg(rc->ctx, e->handle);
    free(e);
}

/* memmon: [lo, hi) is gone; entries over it die (the lock held) */
static void invalidate_range(void *arg, uintptr_t lo, uintptr_t hi)
{
    rcoll_rcache_t *rc = arg;
    for (rcoll_rcache_entry_t *e = rc->head, *nx; e; e = nx) {
        nx = e->next;
        if (e->dead || e->hi <= lo || e->lo >= hi)
            continue;
        e->dead = 1;
        rc->st.invalidations++;
        if (!e->refs)
            drop(rc, e);
    }
}

/* Unused entries go, least recently used first, until `need` more bytes
 * fit (the lock held). 1 if they fit. */
static int make_room(rcoll_rcache_t *rc, size_t need)
{
    while (rc->st.pinned + need > rc->st.max_pinned ||
           rc->st.entries >= RCACHE_MAX_ENTRIES) {
        rcoll_rcache_entry_t *old = NULL;
        for (rcoll_rcache_entry_t *e = rc->head; e; e = e->next)
            if (!e->refs && (!old || e->used < old->used))
                old = e;
        if (!old)
            return 0;
        rc->st.evictions++;
        drop(rc, old);
    }
    return 1;
}

rcoll_rcache_entry_t *rcoll_rcache_get(rcoll_rcache_t *rc, void *addr,
                                       size_t len, void **handle)
{
    uintptr_t a = (uintptr_t)addr;
    pthread_mutex_lock(&rc->lock);
    rc->clock++;
    if (rc->st.monitored) {
        uint64_t gen = rcoll_memmon_sync();
        if (gen != rc->seen)
            rc->seen = rcoll_memmon_changes(rc->seen, invalidate_range, rc);
        for (rcoll_rcache_entry_t *e = rc->head; e; e = e->next)
            if (!e->dead && e->lo <= a && a + len <= e->hi) {
                e->refs++;
                e->used = rc->clock;
                rc->st.hits++;
                *handle = e->handle;
                pthread_mutex_unlock(&rc->lock);
                return e;
            }
    }
    rc->st.misses++;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t lo = a & ~(uintptr_t)(pg - 1);
    uintptr_t hi = (a + len + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    rcoll_rcache_entry_t *e = calloc(1, sizeof(*e));
    if (!e) {
        pthread_mutex_unlock(&rc->lock);
        rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rcache: no memory");
        return NULL;
    }
    /* cached only if watched, and within the bounds */
    int cache = rc->st.monitored && make_room(rc, hi - lo) &&
                rcoll_memmon_watch((void *)lo, hi - lo) == 0;
    e->handle = rc->ops->reg(rc->ctx, (void *)lo, hi - lo);
    if (!e->handle && rc->head) {
        /* (the locked-memory limit, say): unused ones go, once more */
        make_room(rc, rc->st.max_pinned);
        e->handle = rc->ops->reg(rc->ctx, (void *)lo, hi - lo);
    }
    if (!e->handle) {
        free(e);
        pthread_mutex_unlock(&rc->lock);
        return NULL;
    }
    e->lo = lo;
    e->hi = hi;
    e->refs = 1;
    e->used = rc->clock;
    if (cache) {
        e->cached = 1;
        e->next = rc->head;
        rc->head = e;
        rc->st.entries++;
        rc->st.pinned += hi - lo;
        if (rc->st.pinned > rc->st.pinned_peak)
            rc->st.pinned_peak = rc->st.pinned;
    } else {
        e->dead = 1;
        rc->st.uncached++;
    }
    *handle = e->handle;
    pthread_mutex_unlock(&rc->lock);
    return e;
}

void rcoll_rcache_put(rcoll_rcache_t *rc, rcoll_rcache_entry_t *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&rc->lock);
    if (--e->refs == 0 && e->dead)
        drop(rc, e);
    pthread_mutex_unlock(&rc->lock);
}

void rcoll_rcache_invalidate(rcoll_rcache_t *rc, rcoll_rcache_entry_t *e)
{
    pthread_mutex_lock(&rc->lock);
    if (!e->dead)
        rc->st.invalidations++;
    e->dead = 1;
    pthread_mutex_unlock(&rc->lock);
}

void rcoll_rcache_stats(rcoll_rcache_t *rc, rcoll_rcache_stats_t *st)
{
    pthread_mutex_lock(&rc->lock);
    *st = rc->st;
    pthread_mutex_unlock(&rc->lock);
}

void rcoll_rcache_destroy(rcoll_rcache_t *rc)
{
    if (!rc)
        return;
    while (rc->head)
        drop(rc, rc->head); /* (in use ones too: the owner is going) */
    pthread_mutex_destroy(&rc->lock);
    free(rc);
}
