/* The environment/configuration parsers: every RCOLL_* variable's value
 * (the first byte picks the variable), host:port addresses, sizes, and the
 * name lists of RCOLL_TRANSPORTS / RCOLL_SOCKET_IFNAME / RCOLL_IB_HCA. A
 * value either parses or is rejected; nothing else may happen. */
#include "util/params.h"
#include "util/sock.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *v = malloc(size);
    memcpy(v, data + 1, size - 1);
    v[size - 1] = '\0';
    int n = rcoll_config_nparams();
    const rcoll_param_info_t *p = rcoll_config_param(data[0] % n);
    rcoll_status_t st = rcoll_config_parse_value(p->name, v);
    FUZZ_ASSERT(st == RCOLL_OK || st == RCOLL_ERR_INVALID_ARGUMENT);
    size_t sz;
    (void)rcoll_parse_size(v, &sz);
    rcoll_sockaddr_t a;
    if (rcoll_sock_parse_addr(v, &a) == RCOLL_OK) {
        char buf[128];
        FUZZ_ASSERT(rcoll_sock_addr_str(&a, buf, sizeof(buf)) != NULL);
    }
    (void)rcoll_config_name_allowed(v, "tcp");
    (void)rcoll_config_name_allowed(v, "");
    free(v);
    return 0;
}
