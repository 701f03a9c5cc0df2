/* The timeout diagnosis's message (core/diag.c): its MAC and the check of
 * one that arrived, which comes from the network and so is fuzzed
 * (tests/fuzz/fuzz_diag_msg.c). */
#include "core.h"
#include <string.h>

/* on the wire between ranks of one job: the size must not drift */
_Static_assert(sizeof(rcoll_diag_msg_t) == 504, "diagnosis message size");

uint64_t rcoll__diag_mac(const uint8_t secret[16], const rcoll_diag_msg_t *m)
{
    return rcoll_siphash(secret, m, offsetof(rcoll_diag_msg_t, mac));
}

int rcoll__diag_msg_check(const void *buf, size_t len,
                          const uint8_t secret[16], int nranks, int me,
                          rcoll_diag_msg_t *out)
{
    rcoll_diag_msg_t m;
    if (len != sizeof(m))
        return -1;
    memcpy(&m, buf, sizeof(m));
    if (m.magic != RCOLL_DIAG_MAGIC || m.mac != rcoll__diag_mac(secret, &m))
        return -1;
    if ((m.type != RCOLL_DIAG_QUERY && m.type != RCOLL_DIAG_ANSWER) ||
        m.from < 0 || m.from >= nranks || m.from == me || m.to != me)
        return -1;
    if (m.type == RCOLL_DIAG_ANSWER &&
        (m.state < RCOLL_DIAG_WAITING || m.state > RCOLL_DIAG_BUSY ||
         m.peer < -1 || m.peer >= nranks ||
         (m.state == RCOLL_DIAG_WAITING && m.peer < 0)))
        return -1;
    m.what[sizeof(m.what) - 1] = '\0';
    m.text[sizeof(m.text) - 1] = '\0';
    *out = m;
    return 0;
}
