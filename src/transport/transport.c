/* The one place transports are registered, in order of preference: each
 * pair of ranks uses the first transport both can use that reaches. */
#include "transport.h"

const rcoll_tl_ops_t *const rcoll_transports[] = {
    &rcoll_tl_shm_ops, /* first: preferred where it reaches */
#if HAVE_VERBS && HAVE_RDMACM
    &rcoll_tl_ib_ops,
#endif
    &rcoll_tl_tcp_ops,
    NULL,
};
