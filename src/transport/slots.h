/* The slot/credit protocol every transport speaks (transport.h), written
 * once: a link's receiver owns n slots, filled in arrival order and
 * released in the same order; its sender holds one credit per slot it may
 * fill; a released slot is owed back as a credit, which rides on the next
 * message the other way, or goes alone once half the slots are owed (or
 * when the engine idles, the transport's idle hook, if the sender may
 * have no credit left: rcoll_slots_full), so that a sender never waits
 * for credits its receiver sits on.
 *
 * TCP keeps one of these per socket, ib one per queue pair. Shared memory
 * keeps the same ring in the shared segment as two counters (head written
 * by the sender, tail by the receiver): there the free slots are the
 * credits and no message carries them, so it has no use for this. */
#ifndef RCOLL_SLOTS_H
#define RCOLL_SLOTS_H

#include <stdint.h>

typedef struct {
    int n;        /* slots */
    int head;     /* the oldest message not released */
    int count;    /* messages arrived, not released */
    int owed;     /* slots released, not yet told to the sender */
    int credits;  /* send side: slots free at the peer */
} rcoll_slots_t;

static inline void rcoll_slots_init(rcoll_slots_t *s, int n)
{
    s->n = n;
    s->head = s->count = s->owed = 0;
    s->credits = n;
}

/* The slot the next arrival fills; -1 if every slot is full (the sender
 * wrote past its credits: a protocol error). */
static inline int rcoll_slots_next(const rcoll_slots_t *s)
{
    return s->count < s->n ? (s->head + s->count) % s->n : -1;
}

static inline void rcoll_slots_arrived(rcoll_slots_t *s)
{
    s->count++;
}

/* The i-th message not yet released (0: the oldest). */
static inline int rcoll_slots_at(const rcoll_slots_t *s, int i)
{
    return (s->head + i) % s->n;
}

/* 1 if `owed` credits are enough to send them alone (half the slots). */
static inline int rcoll_slots_half(int owed, int n)
{
    return 2 * owed >= n;
}

/* 1 if every slot has arrived or is owed: the sender may have no credit
 * left, so an idle receiver must hand the owed ones back now. */
static inline int rcoll_slots_full(const rcoll_slots_t *s)
{
    return s->owed > 0 && s->owed + s->count >= s->n;
}

/* 1 if every slot is taken or owed and some message is unreleased: the
 * sender may be stuck until one of them is released. */
static inline int rcoll_slots_held(const rcoll_slots_t *s)
{
    return s->count > 0 && s->owed + s->count >= s->n;
}

/* Releases the oldest message; 1 if the credits owed should go now. */
static inline int rcoll_slots_release(rcoll_slots_t *s)
{
    s->head = (s->head + 1) % s->n;
    s->count--;
    s->owed++;
    return rcoll_slots_half(s->owed, s->n);
}

/* Hands back up to `max` of the credits owed: how many. */
static inline int rcoll_slots_take_owed(rcoll_slots_t *s, int max)
{
    int c = s->owed < max ? s->owed : max;
    s->owed -= c;
    return c;
}

/* Credits the peer handed back; -1 (nothing taken) if it returned more
 * than it could owe: a protocol error. */
static inline int rcoll_slots_credit(rcoll_slots_t *s, uint32_t c)
{
    if (c > (uint32_t)(s->n - s->credits))
        return -1;
    s->credits += (int)c;
    return 0;
}

/* Send side: a slot at the peer may be filled now (then call sent). */
static inline int rcoll_slots_can_send(const rcoll_slots_t *s)
{
    return s->credits > 0;
}

static inline void rcoll_slots_sent(rcoll_slots_t *s)
{
    s->credits--;
}

#endif
