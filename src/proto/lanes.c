/* Lane counters (lanes.h): summing and printing for the dump. */
#include "proto/lanes.h"
#include <inttypes.h>

void rcoll_lanes_sum(rcoll_lane_stats_t *sum, const rcoll_lane_stats_t *s)
{
    sum->tx_msgs += __atomic_load_n(&s->tx_msgs, __ATOMIC_RELAXED);
    sum->tx_bytes += __atomic_load_n(&s->tx_bytes, __ATOMIC_RELAXED);
    sum->rx_msgs += __atomic_load_n(&s->rx_msgs, __ATOMIC_RELAXED);
    sum->rx_bytes += __atomic_load_n(&s->rx_bytes, __ATOMIC_RELAXED);
    sum->tx_waits += __atomic_load_n(&s->tx_waits, __ATOMIC_RELAXED);
}

void rcoll_lanes_print(FILE *f, const char *what, int n,
                       const rcoll_lane_stats_t *per_lane)
{
    for (int k = 0; k < n; k++) {
        const rcoll_lane_stats_t *s = &per_lane[k];
        fprintf(f, "rcoll:     lane %d (%s): sent %" PRIu64 " messages, %"
                PRIu64 " bytes; received %" PRIu64 " messages, %" PRIu64
                " bytes; %" PRIu64 " sends waited for credit\n", k, what,
                s->tx_msgs, s->tx_bytes, s->rx_msgs, s->rx_bytes,
                s->tx_waits);
    }
}
