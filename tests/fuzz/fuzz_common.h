/* Shared bits of the libFuzzer targets (tests/fuzz/run.sh builds them with
 * clang -fsanitize=fuzzer,address,undefined). Each target feeds bytes that
 * another process could send to one parser, and asserts what the parser
 * promises: no crash, no sanitizer report, and an error (not a wrong
 * state) for anything malformed. */
#ifndef RCOLL_FUZZ_COMMON_H
#define RCOLL_FUZZ_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(c)                                                       \
    do {                                                                     \
        if (!(c)) {                                                          \
            fprintf(stderr, "fuzz assertion failed: %s (%s:%d)\n", #c,       \
                    __FILE__, __LINE__);                                     \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* the communicator hears of a failed peer: counted */
static int fuzz_failed;
static void fuzz_peer_failed(void *arg, int peer, rcoll_status_t st,
                             const char *msg)
{
    (void)arg; (void)peer; (void)st;
    FUZZ_ASSERT(msg && msg[0]);
    fuzz_failed++;
}
static void fuzz_send_done(void *arg, void *cookie)
{
    (void)arg; (void)cookie;
}
#endif
