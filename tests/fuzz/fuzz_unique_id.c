/* rcoll_comm_init_rank's unique id: 128 bytes that travel through the
 * application (MPI_Bcast, a file, a store). Garbage must be rejected with
 * RCOLL_ERR_INVALID_ARGUMENT; a valid one must unpack to what was packed. */
#include "bootstrap/bootstrap.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rcoll_unique_id_t id, id2;
    rcoll_sockaddr_t a, a2;
    uint8_t secret[16], s2[16];
    memset(&id, 0, sizeof(id));
    memcpy(&id, data, size < sizeof(id) ? size : sizeof(id));
    rcoll_status_t st = rcoll_boot_id_unpack(&id, &a, secret);
    FUZZ_ASSERT(st == RCOLL_OK || st == RCOLL_ERR_INVALID_ARGUMENT);
    if (st == RCOLL_OK) { /* round trip */
        rcoll_boot_id_pack(&a, secret, &id2);
        FUZZ_ASSERT(rcoll_boot_id_unpack(&id2, &a2, s2) == RCOLL_OK);
        FUZZ_ASSERT(memcmp(secret, s2, 16) == 0);
        FUZZ_ASSERT(a.sa.sa_family == a2.sa.sa_family);
    }
    return 0;
}
