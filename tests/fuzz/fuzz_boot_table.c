/* The rendezvous table the bootstrap root sends every rank (one record per
 * rank: address, host hash, pid, rank, hostname), as a rank checks it
 * before use: either RCOLL_ERR_PROTOCOL, or a table whose entries are in
 * rank order with printable (terminated) hostnames and a real address
 * family. */
#include "bootstrap/bootstrap.h"
#include "fuzz_common.h"
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int n = (int)(size / sizeof(rcoll_boot_peer_t));
    if (n < 1 || n > 64)
        return 0;
    rcoll_boot_peer_t *t = malloc((size_t)n * sizeof(*t));
    memcpy(t, data, (size_t)n * sizeof(*t));
    rcoll_status_t st = rcoll_boot_table_check(t, n);
    FUZZ_ASSERT(st == RCOLL_OK || st == RCOLL_ERR_PROTOCOL);
    if (st == RCOLL_OK)
        for (int i = 0; i < n; i++) {
            FUZZ_ASSERT(t[i].rank == i);
            FUZZ_ASSERT(strlen(t[i].hostname) < sizeof(t[i].hostname));
            FUZZ_ASSERT(t[i].boot_addr.sa.sa_family == AF_INET ||
                        t[i].boot_addr.sa.sa_family == AF_INET6);
        }
    free(t);
    return 0;
}
