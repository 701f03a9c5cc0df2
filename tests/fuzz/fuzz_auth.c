/* The connection handshake every listening socket runs first (bootstrap
 * root, bootstrap ring, TCP transport): whatever a stranger sends (random
 * bytes, a truncated or replayed hello) must end in RCOLL_ERR_AUTH or a
 * closed-connection error, with the hello left unused. */
#include "util/sock.h"
#include "util/util.h"
#include "fuzz_common.h"
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    uint8_t secret[16] = "fuzz-job-secret";
    uint8_t hello[32];
    if (size > 4096 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 0;
    if (size && write(sv[1], data, size) != (ssize_t)size) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    shutdown(sv[1], SHUT_WR);
    rcoll_status_t st = rcoll_sock_auth_accept(sv[0], secret, hello,
                                               sizeof(hello),
                                               rcoll_time_sec() + 1.0);
    /* random bytes cannot carry a valid MAC of the nonce we chose */
    FUZZ_ASSERT(st != RCOLL_OK);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
