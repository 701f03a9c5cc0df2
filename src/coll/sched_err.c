/* The errors a schedule reports (sched.h): each names the call (its kind,
 * number, count, type, op, root or tag and algorithm), the peer with its
 * host and pid, and the cause. */
#include "sched.h"
#include <stdio.h>

/* "KIND #N (count, type, op, root, algorithm)", or a point-to-point's */
static void describe(const coll_sched_t *s, char *buf, size_t len)
{
    unsigned ch = (unsigned)(s->seq >> COLL_SEQ_CHAN_SHIFT);
    int p2p = s->kind == COLL_SEND || s->kind == COLL_RECV;
    if (!p2p && ch)
        snprintf(buf, len, "%s #%llu channel %u (count %zu, %s, %s, root "
                 "%d, %s)", coll_kind_name(s->kind),
                 coll_seq_num(s->seq),
                 ch - 1, s->count, rcoll_datatype_name(s->dt),
                 rcoll_op_name(s->op), s->root, s->algo ? s->algo : "-");
    else if (p2p)
        snprintf(buf, len, "%s (count %zu, %s, peer %d, tag %d)",
                 coll_kind_name(s->kind), s->count,
                 rcoll_datatype_name(s->dt), s->root, s->tag);
    else
        snprintf(buf, len, "%s #%llu (count %zu, %s, %s, root %d, %s)",
                 coll_kind_name(s->kind), (unsigned long long)s->seq,
                 s->count, rcoll_datatype_name(s->dt), rcoll_op_name(s->op),
                 s->root, s->algo ? s->algo : "-");
}

static const char *class_name(unsigned c)
{
    switch (c) {
    case COLL_MSG_COLL: return "collective";
    case COLL_MSG_P2P:  return "send";
    case COLL_MSG_RTS:  return "large send's announcement";
    case COLL_MSG_CTS:  return "receiver's go-ahead";
    }
    return "unknown";
}

rcoll_status_t coll_sched_mismatch(const coll_sched_t *s,
                                   const coll_env_t *e, int peer,
                                   const rcoll_msg_hdr_t *h,
                                   size_t expect_len)
{
    char mine[256];
    unsigned k = h->kind & 0xff, dt = (h->kind >> 8) & 0xff,
             op = (h->kind >> 16) & 0xff, cls = COLL_MSG_CLASS(h->kind);
    describe(s, mine, sizeof(mine));
    return rcoll__set_error(
        RCOLL_ERR_MISMATCH,
        "rank %d in %s received from rank %d a message (%s) of %s #%llu "
        "(count %llu, %s, %s, root/tag %u, transfer %u chunk %u, %u bytes; "
        "expected %zu bytes): the ranks called different operations or "
        "counts",
        e->rank, mine, peer, class_name(cls),
        coll_kind_name((coll_kind_t)k), (unsigned long long)h->seq,
        (unsigned long long)h->total,
        rcoll_datatype_name((rcoll_datatype_t)dt),
        rcoll_op_name((rcoll_op_t)op), h->tag, h->step, h->chunk, h->len,
        expect_len);
}

rcoll_status_t coll_sched_corrupt(const coll_sched_t *s, const coll_env_t *e,
                                  int peer, const rcoll_msg_hdr_t *h,
                                  uint32_t got)
{
    char mine[256];
    describe(s, mine, sizeof(mine));
    return rcoll__set_error(
        RCOLL_ERR_CORRUPT,
        "rank %d in %s: the chunk %u (%u bytes) of step %d from rank %d (%s "
        "pid %d) failed its checksum (CRC32C %08x, sent %08x): the data was "
        "corrupted between the two processes (RCOLL_CHECKSUM)",
        e->rank, mine, h->chunk, h->len, s->r_step, peer,
        e->peers[peer].hostname, e->peers[peer].pid, got, h->csum);
}

rcoll_status_t coll_sched_peer_error(const coll_sched_t *s,
                                     const coll_env_t *e, rcoll_status_t st,
                                     int peer, const char *dir)
{
    char mine[256], cause[512];
    describe(s, mine, sizeof(mine));
    snprintf(cause, sizeof(cause), "%s", rcoll_last_error());
    return rcoll__set_error(st, "rank %d in %s: %s rank %d (%s pid %d) "
                            "failed: %s", e->rank, mine, dir, peer,
                            e->peers[peer].hostname, e->peers[peer].pid,
                            cause[0] ? cause : rcoll_status_string(st));
}

/* A receive whose message was longer than its buffer, once all of it was
 * consumed: it fails alone; the communicator goes on (the engine does not
 * fail it for this status). */
rcoll_status_t coll_sched_truncated(const coll_sched_t *s,
                                    const coll_env_t *e)
{
    size_t dts = rcoll_datatype_size(s->dt);
    return rcoll__set_error(
        RCOLL_ERR_TRUNCATED,
        "rank %d: recv from rank %d (%s pid %d), tag %d: the message is %zu "
        "%s (%zu bytes), the receive's buffer holds %zu (%zu bytes): "
        "truncated; the message was dropped",
        e->rank, s->root, e->peers[s->root].hostname, e->peers[s->root].pid,
        s->tag, s->count, rcoll_datatype_name(s->dt), s->count * dts,
        s->p2p_cap, s->p2p_cap * dts);
}

