/* A lane is one of the FIFOs a transport stripes a peer's messages over
 * (a TCP socket, an ib queue pair, the shared-memory ring). Each keeps
 * these counters, written by the engine thread alone and read, as a
 * snapshot, by rcoll_comm_dump and rcoll-info -p. */
#ifndef RCOLL_LANES_H
#define RCOLL_LANES_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint64_t tx_msgs, tx_bytes;  /* messages posted, their payload */
    uint64_t rx_msgs, rx_bytes;  /* messages received (released) */
    uint64_t tx_waits;           /* sends refused for want of credit */
} rcoll_lane_stats_t;

/* Adds to a counter of the lane's single writer; a relaxed store, so a
 * dump in another thread reads a whole value, and no locked add. */
static inline void rcoll_lane_add(uint64_t *c, uint64_t v)
{
    __atomic_store_n(c, *c + v, __ATOMIC_RELAXED);
}

static inline void rcoll_lane_sent(rcoll_lane_stats_t *s, uint64_t bytes)
{
    rcoll_lane_add(&s->tx_msgs, 1);
    rcoll_lane_add(&s->tx_bytes, bytes);
}

static inline void rcoll_lane_received(rcoll_lane_stats_t *s, uint64_t bytes)
{
    rcoll_lane_add(&s->rx_msgs, 1);
    rcoll_lane_add(&s->rx_bytes, bytes);
}

/* sum += one lane's counters (read relaxed) */
void rcoll_lanes_sum(rcoll_lane_stats_t *sum, const rcoll_lane_stats_t *s);
/* The lines of a dump: "rcoll:     lane k: ..." for each of the n sums
 * (lane k over every peer), prefixed by `what` (the lanes' kind). */
void rcoll_lanes_print(FILE *f, const char *what, int n,
                       const rcoll_lane_stats_t *per_lane);

#endif
