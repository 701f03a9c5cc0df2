/* The timeout diagnosis's question/answer (core/diag.c), read from a TCP
 * connection to a rank's bootstrap listener: anything may arrive there.
 * The first byte picks how the rest is used:
 *   even: raw bytes as they arrived (a stranger's or a corrupted message)
 *         must be rejected unless they carry the job's MAC;
 *   odd:  the bytes fill a message that is then MAC'd with the job's key
 *         (a peer of the job, or a bug in one): the check must accept it
 *         exactly when its fields are valid by the rules below, written
 *         here independently, and return its strings NUL-terminated. */
#include "core/core.h"
#include "fuzz_common.h"

static const uint8_t key[16] = {7, 1, 2, 3, 4, 5, 6, 7,
                                8, 9, 10, 11, 12, 13, 14, 15};

static int valid(const rcoll_diag_msg_t *m, int nranks, int me)
{
    if (m->magic != RCOLL_DIAG_MAGIC)
        return 0;
    if (m->from < 0 || m->from >= nranks || m->from == me || m->to != me)
        return 0;
    if (m->type == RCOLL_DIAG_QUERY)
        return 1;
    if (m->type != RCOLL_DIAG_ANSWER)
        return 0;
    switch (m->state) {
    case RCOLL_DIAG_WAITING:
        return m->peer >= 0 && m->peer < nranks;
    case RCOLL_DIAG_IDLE:
    case RCOLL_DIAG_FAILED:
    case RCOLL_DIAG_BUSY:
        return m->peer >= -1 && m->peer < nranks;
    default:
        return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rcoll_diag_msg_t m, out;
    if (size < 1)
        return 0;
    int mode = data[0] & 1, nranks = 1 + (data[0] >> 1) % 16,
        me = (data[0] >> 5) % nranks;
    data++, size--;
    if (!mode) {
        int rc = rcoll__diag_msg_check(data, size, key, nranks, me, &out);
        if (rc == 0) { /* only with the MAC: never by chance */
            FUZZ_ASSERT(size == sizeof(m));
            memcpy(&m, data, sizeof(m));
            FUZZ_ASSERT(m.mac == rcoll__diag_mac(key, &m));
        }
        return 0;
    }
    memset(&m, 0, sizeof(m));
    memcpy(&m, data, size < sizeof(m) ? size : sizeof(m));
    if (size < 4)
        m.magic = RCOLL_DIAG_MAGIC;
    m.mac = rcoll__diag_mac(key, &m);
    int rc = rcoll__diag_msg_check(&m, sizeof(m), key, nranks, me, &out);
    FUZZ_ASSERT((rc == 0) == valid(&m, nranks, me));
    if (rc == 0) {
        FUZZ_ASSERT(memchr(out.what, 0, sizeof(out.what)) != NULL);
        FUZZ_ASSERT(memchr(out.text, 0, sizeof(out.text)) != NULL);
        FUZZ_ASSERT(out.from == m.from && out.nonce == m.nonce);
    }
    /* one bit flipped anywhere before the MAC: rejected */
    size_t bit = (size ? data[size - 1] : 0) * 4u % (offsetof(rcoll_diag_msg_t, mac) * 8);
    ((uint8_t *)&m)[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    FUZZ_ASSERT(rcoll__diag_msg_check(&m, sizeof(m), key, nranks, me, &out) != 0);
    return 0;
}
