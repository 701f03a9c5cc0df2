/* The memory monitor (memmon.c): address ranges the process unmapped or
 * whose pages it dropped, for the registration caches. */
#ifndef RCOLL_MEMMON_H
#define RCOLL_MEMMON_H

#include <stddef.h>
#include <stdint.h>

/* 1 if ranges can be watched in this process; else why (may be NULL). */
int rcoll_memmon_available(char *why, size_t len);
/* Watches the pages of [addr, addr + len): 0, or -1 if they cannot be
 * (then a cache must not keep a registration of them). */
int rcoll_memmon_watch(const void *addr, size_t len);
/* Takes in what the kernel has queued; returns the count of ranges logged
 * so far. */
uint64_t rcoll_memmon_sync(void);
/* Calls fn for each range logged after the first `since` (all memory when
 * too many came meanwhile); returns the new count. */
uint64_t rcoll_memmon_changes(uint64_t since,
                              void (*fn)(void *arg, uintptr_t lo,
                                         uintptr_t hi),
                              void *arg);

#endif
