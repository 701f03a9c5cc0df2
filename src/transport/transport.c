/* The one place transports are registered. */
#include "transport.h"

const rcoll_tl_ops_t *const rcoll_transports[] = {
    &rcoll_tl_tcp_ops,
    NULL,
};
