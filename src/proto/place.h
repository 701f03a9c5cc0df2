/* Receives in place (transport op recv_place), written once for the
 * transports that land payloads there (tcp reads them into place, ib's
 * peer RDMA-writes them there): a peer's table of posted receives, and
 * which of them a message belongs to. A transport may keep more per entry
 * in arrays of its own, indexed alike (rcoll_places_remove says which
 * entry moved). */
#ifndef RCOLL_PLACE_H
#define RCOLL_PLACE_H

#include "transport/transport.h"
#include "util/util.h"

#define RCOLL_NPLACE 8 /* receives in place per peer at a time */

typedef struct {
    rcoll_tl_place_t pl;
    size_t landed;    /* payload bytes taken that landed in pl.dst */
} rcoll_place_t;

typedef struct {
    rcoll_place_t e[RCOLL_NPLACE];
    int n;
} rcoll_places_t;

/* 1 if message h is one of the receive's (its seq, kind, step, tag and
 * total), whether or not it fits. */
static inline int rcoll_place_is(const rcoll_tl_place_t *pl,
                                 const rcoll_msg_hdr_t *h)
{
    return pl->seq == h->seq && pl->step == h->step &&
           pl->kind == (h->kind & ~RCOLL_HDR_CSUM) && pl->tag == h->tag &&
           pl->total == h->total;
}

/* 1 if a message of `len` bytes with chunk index `chunk` lies inside a
 * receive of `bytes` cut into `csize`-byte chunks (*off: where). */
static inline int rcoll_place_fits(uint64_t csize, uint64_t bytes,
                                   uint32_t chunk, uint32_t len,
                                   uint64_t *off)
{
    if (!csize || chunk >= (bytes + csize - 1) / csize)
        return 0;
    *off = (uint64_t)chunk * csize;
    return len <= bytes - *off;
}

/* Posts a receive in place: its index, or -1 if the table is full or the
 * receive cannot take messages (no chunk or no bytes). */
static inline int rcoll_places_add(rcoll_places_t *t,
                                   const rcoll_tl_place_t *pl)
{
    if (t->n == RCOLL_NPLACE || !pl->chunk || !pl->bytes)
        return -1;
    t->e[t->n].pl = *pl;
    t->e[t->n].landed = 0;
    return t->n++;
}

/* The receive message h belongs to and fits (*off: its payload's offset
 * in dst), or -1. A message that fits no receive it names is not their
 * data: the receiver's checks see it where the transport puts it. */
static inline int rcoll_places_find(const rcoll_places_t *t,
                                    const rcoll_msg_hdr_t *h, size_t *off)
{
    for (int i = 0; i < t->n; i++) {
        uint64_t o;
        if (rcoll_place_is(&t->e[i].pl, h) &&
            rcoll_place_fits(t->e[i].pl.chunk, t->e[i].pl.bytes, h->chunk,
                             h->len, &o)) {
            *off = (size_t)o;
            return i;
        }
    }
    return -1;
}

/* The entry of a receive posted as pl (recv_unplace: the same seq, step
 * and dst), or -1. */
static inline int rcoll_places_posted(const rcoll_places_t *t,
                                      const rcoll_tl_place_t *pl)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].pl.seq == pl->seq && t->e[i].pl.step == pl->step &&
            t->e[i].pl.dst == pl->dst)
            return i;
    return -1;
}

/* Removes entry i (the last takes its index); returns the last's old
 * index, for a caller's arrays kept alike. Logs what landed (`tl`: the
 * transport's name, for the debug line). */
static inline int rcoll_places_remove(rcoll_places_t *t, int i,
                                      const char *tl, int peer)
{
    const rcoll_place_t *e = &t->e[i];
    rcoll_debug(RCOLL_SUBSYS_NET, "%s: %zu of %zu bytes from rank %d "
                "(message %llu, transfer %u) landed in place",
                tl, e->landed, e->pl.bytes, peer,
                (unsigned long long)e->pl.seq, e->pl.step);
    int last = --t->n;
    t->e[i] = t->e[last];
    return last;
}

#endif
