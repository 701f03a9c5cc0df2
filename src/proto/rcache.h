/* The registration cache (rcache.c): a buffer used again is not
 * registered again, and a freed or unmapped one is never used through its
 * old registration (memmon.h). One cache per memory domain and device
 * (a protection domain of ib, say); its owner supplies reg and dereg. */
#ifndef RCOLL_RCACHE_H
#define RCOLL_RCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* registers [addr, addr + len): a handle, or NULL (error set) */
    void *(*reg)(void *ctx, void *addr, size_t len);
    void (*dereg)(void *ctx, void *handle);
} rcoll_rcache_ops_t;

typedef struct rcoll_rcache rcoll_rcache_t;
typedef struct rcoll_rcache_entry rcoll_rcache_entry_t;

typedef struct {
    unsigned long hits, misses, evictions, invalidations, uncached;
    size_t pinned, pinned_peak, max_pinned;
    int entries;
    int monitored;  /* 0: no memory monitor here: every use registers */
} rcoll_rcache_stats_t;

/* max_pinned: the bytes the cache keeps registered while unused. */
rcoll_rcache_t *rcoll_rcache_create(const rcoll_rcache_ops_t *ops,
                                    void *ctx, size_t max_pinned);
void rcoll_rcache_destroy(rcoll_rcache_t *rc);
/* A registration covering [addr, addr + len), held until put: its
 * handle, or NULL (the owner's reg failed: error set). */
rcoll_rcache_entry_t *rcoll_rcache_get(rcoll_rcache_t *rc, void *addr,
                                       size_t len, void **handle);
void rcoll_rcache_put(rcoll_rcache_t *rc, rcoll_rcache_entry_t *e);
/* Never to be used again (a failed operation's receive in place: a late
 * remote write must fail rather than land): deregistered at its put. */
void rcoll_rcache_invalidate(rcoll_rcache_t *rc, rcoll_rcache_entry_t *e);
void rcoll_rcache_stats(rcoll_rcache_t *rc, rcoll_rcache_stats_t *st);

#endif
