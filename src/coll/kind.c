/* The names of the collective kinds (messages, dumps, rcoll-info). */
#include "sched.h"

const char *coll_kind_name(coll_kind_t k)
{
    switch (k) {
    case COLL_ALLREDUCE:      return "allreduce";
    case COLL_ALLGATHER:      return "allgather";
    case COLL_BROADCAST:      return "broadcast";
    case COLL_REDUCE_SCATTER: return "reduce_scatter";
    case COLL_REDUCE:         return "reduce";
    case COLL_BARRIER:        return "barrier";
    case COLL_SEND:           return "send";
    case COLL_RECV:           return "recv";
    case COLL_ALLTOALL:       return "alltoall";
    case COLL_ALLTOALLV:      return "alltoallv";
    case COLL_GATHER:         return "gather";
    case COLL_SCATTER:        return "scatter";
    }
    return "unknown";
}
