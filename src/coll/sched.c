/* The schedule executor: streams chunks through the transport. */
#include "sched.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *coll_kind_name(coll_kind_t k)
{
    switch (k) {
    case COLL_ALLREDUCE:      return "allreduce";
    case COLL_ALLGATHER:      return "allgather";
    case COLL_BROADCAST:      return "broadcast";
    case COLL_REDUCE_SCATTER: return "reduce_scatter";
    case COLL_REDUCE:         return "reduce";
    case COLL_BARRIER:        return "barrier";
    case COLL_SEND:           return "send";
    case COLL_RECV:           return "recv";
    }
    return "unknown";
}

void coll_sched_step_init(coll_step_t *st)
{
    memset(st, 0, sizeof(*st));
    st->send_peer = st->recv_peer = st->send_dep = -1;
}

rcoll_status_t coll_sched_add(coll_sched_t *s, const coll_step_t *step)
{
    if (s->nsteps == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        coll_step_t *n = realloc(s->steps, (size_t)cap * sizeof(*n));
        if (!n)
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                    "%s: no memory for the schedule",
                                    coll_kind_name(s->kind));
        s->steps = n;
        s->cap = cap;
    }
    s->steps[s->nsteps++] = *step;
    return RCOLL_OK;
}

void coll_sched_free(coll_sched_t *s)
{
    free(s->steps);
    free(s->recv_done);
    free(s->scratch);
    free(s->bounce);
    s->bounce = NULL;
    s->steps = NULL;
    s->recv_done = NULL;
    s->scratch = NULL;
}

void coll_sched_send_done(coll_sched_t *s)
{
    s->sends_inflight--;
}

static int nchunks(const coll_sched_t *s, size_t bytes)
{
    if (bytes == 0)
        return s->kind == COLL_BARRIER ? 1 : 0;
    return (int)((bytes + s->chunk - 1) / s->chunk);
}

static uint32_t sched_kind_word(const coll_sched_t *s)
{
    coll_kind_t k = s->kind == COLL_RECV ? COLL_SEND : s->kind;
    return (uint32_t)k | (uint32_t)s->dt << 8 | (uint32_t)s->op << 16;
}

static void describe(const coll_sched_t *s, char *buf, size_t len)
{
    snprintf(buf, len, "%s #%llu (count %zu, %s, %s, root/peer %d, %s)",
             coll_kind_name(s->kind), (unsigned long long)s->seq, s->count,
             rcoll_datatype_name(s->dt), rcoll_op_name(s->op), s->root,
             s->algo ? s->algo : "-");
}

static rcoll_status_t mismatch(const coll_sched_t *s, const coll_env_t *e,
                               int peer, const rcoll_msg_hdr_t *h,
                               size_t expect_len)
{
    char mine[256];
    unsigned k = h->kind & 0xff, dt = (h->kind >> 8) & 0xff,
             op = (h->kind >> 16) & 0xff;
    describe(s, mine, sizeof(mine));
    return rcoll__set_error(
        RCOLL_ERR_MISMATCH,
        "rank %d in %s received from rank %d a message of %s #%llu (count "
        "%llu, %s, %s, root/peer %d, %u bytes, expected %zu): the ranks "
        "called different operations or counts",
        e->rank, mine, peer, coll_kind_name((coll_kind_t)k),
        (unsigned long long)h->seq, (unsigned long long)h->total,
        rcoll_datatype_name((rcoll_datatype_t)dt),
        rcoll_op_name((rcoll_op_t)op), (int)h->step, h->len, expect_len);
}

static uint32_t msg_csum(const rcoll_msg_hdr_t *h, const void *payload)
{
    rcoll_msg_hdr_t c = *h;
    c.csum = 0;
    uint32_t v = rcoll_crc32c(0, &c, sizeof(c));
    return h->len ? rcoll_crc32c(v, payload, h->len) : v;
}

static rcoll_status_t corrupt(const coll_sched_t *s, const coll_env_t *e,
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

static rcoll_status_t peer_error(const coll_sched_t *s, const coll_env_t *e,
                                 rcoll_status_t st, int peer, const char *dir)
{
    char mine[256], cause[512];
    describe(s, mine, sizeof(mine));
    snprintf(cause, sizeof(cause), "%s", rcoll_last_error());
    return rcoll__set_error(st, "rank %d in %s: %s rank %d (%s pid %d) "
                            "failed: %s", e->rank, mine, dir, peer,
                            e->peers[peer].hostname, e->peers[peer].pid,
                            cause[0] ? cause : rcoll_status_string(st));
}

rcoll_status_t coll_sched_progress(coll_sched_t *s, const coll_env_t *e,
                                   int *progressed)
{
    rcoll_status_t st;
    size_t dts = rcoll_datatype_size(s->dt);
    if (!s->recv_done) {
        s->recv_done = calloc((size_t)(s->nsteps ? s->nsteps : 1), sizeof(int));
        if (!s->recv_done)
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d in %s: no "
                                    "memory for the schedule's state",
                                    e->rank, coll_kind_name(s->kind));
    }
    for (;;) {
        int moved = 0;
        /* receives */
        while (s->r_step < s->nsteps) {
            coll_step_t *t = &s->steps[s->r_step];
            int nch = t->recv_peer >= 0 ? nchunks(s, t->recv_bytes) : 0;
            if (s->r_chunk >= nch) {
                s->r_step++;
                s->r_chunk = 0;
                continue;
            }
            const rcoll_msg_hdr_t *h;
            const void *payload;
            st = e->tls[t->recv_peer]->recv_peek(e->eps[t->recv_peer], &h, &payload);
            if (st == RCOLL_INPROGRESS) {
                s->waiting_peer = t->recv_peer;
                s->waiting_for = "data from";
                break;
            }
            if (st != RCOLL_OK)
                return peer_error(s, e, st, t->recv_peer, "receiving from");
            size_t off = (size_t)s->r_chunk * s->chunk;
            size_t len = RCOLL_MIN(s->chunk, t->recv_bytes - off);
            if ((h->kind & ~RCOLL_HDR_CSUM) != sched_kind_word(s) ||
                h->total != s->count ||
                h->len != len ||
                (s->kind != COLL_RECV && h->seq != s->seq) ||
                (s->kind != COLL_RECV && h->step != (uint32_t)s->root))
                return mismatch(s, e, t->recv_peer, h, len);
            const rcoll_tl_ops_t *tl = e->tls[t->recv_peer];
            int check = (h->kind & RCOLL_HDR_CSUM) != 0;
            if (!payload && len &&
                ((t->recv_mode != RECV_COPY && t->recv_mode != RECV_DISCARD) ||
                 check)) {
                /* still in the sender's memory: fetch it to reduce it */
                if (!s->bounce && !(s->bounce = malloc(s->chunk)))
                    return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                            "rank %d in %s: no memory for "
                                            "a %zu-byte bounce buffer",
                                            e->rank, coll_kind_name(s->kind),
                                            s->chunk);
                st = tl->recv_copy(e->eps[t->recv_peer], s->bounce);
                if (st != RCOLL_OK)
                    return peer_error(s, e, st, t->recv_peer,
                                      "receiving from");
                payload = s->bounce;
            }
            if (check) {
                uint32_t got = msg_csum(h, payload);
                if (got != h->csum)
                    return corrupt(s, e, t->recv_peer, h, got);
            }
            switch (t->recv_mode) {
            case RECV_COPY:
                if (len && !payload && tl->recv_copy) {
                    st = tl->recv_copy(e->eps[t->recv_peer], t->recv_dst + off);
                    if (st != RCOLL_OK)
                        return peer_error(s, e, st, t->recv_peer,
                                          "receiving from");
                } else if (len) {
                    memcpy(t->recv_dst + off, payload, len);
                }
                break;
            case RECV_REDUCE:
                s->reduce(t->recv_dst + off, t->recv_local + off, payload,
                          len / dts);
                break;
            case RECV_REDUCE_AVG:
                rcoll_reduce_avg_final(s->dt, t->recv_dst + off,
                                       t->recv_local + off, payload,
                                       len / dts, e->nranks);
                break;
            case RECV_DISCARD:
                break;
            }
            e->tls[t->recv_peer]->recv_release(e->eps[t->recv_peer]);
            s->recv_done[s->r_step]++;
            s->r_chunk++;
            moved = 1;
        }
        /* sends */
        while (s->s_step < s->nsteps) {
            coll_step_t *t = &s->steps[s->s_step];
            int nch = t->send_peer >= 0 ? nchunks(s, t->send_bytes) : 0;
            if (s->s_chunk >= nch) {
                s->s_step++;
                s->s_chunk = 0;
                continue;
            }
            if (t->send_dep >= 0 && t->send_dep_all == 2) {
                if (s->r_step <= t->send_dep)
                    break; /* an earlier phase is still arriving */
            } else if (t->send_dep >= 0) {
                const coll_step_t *d = &s->steps[t->send_dep];
                int need = t->send_dep_all
                               ? nchunks(s, d->recv_peer >= 0 ? d->recv_bytes
                                                              : 0)
                               : s->s_chunk + 1;
                if (s->recv_done[t->send_dep] < need)
                    break; /* waits for our own receive */
            }
            size_t off = (size_t)s->s_chunk * s->chunk;
            rcoll_msg_hdr_t h = {
                .seq = s->kind == COLL_SEND ? 0 : s->seq,
                .kind = sched_kind_word(s),
                .step = (uint32_t)s->root,
                .chunk = (uint32_t)s->s_chunk,
                .len = (uint32_t)RCOLL_MIN(s->chunk, t->send_bytes - off),
                .total = s->count};
            if (rcoll_config.checksum) {
                h.kind |= RCOLL_HDR_CSUM;
                h.csum = msg_csum(&h, t->send_buf + off);
            }
            int copies = t->send_copy || s->kind == COLL_ALLGATHER ||
                         s->kind == COLL_BROADCAST || s->kind == COLL_SEND;
            s->sends_inflight++;
            st = e->tls[t->send_peer]->send(e->eps[t->send_peer], &h,
                                            t->send_buf + off, s,
                                            copies ? RCOLL_TL_PEER_COPIES : 0);
            if (st == RCOLL_INPROGRESS) {
                s->sends_inflight--;
                s->waiting_peer = t->send_peer;
                s->waiting_for = "credits (free receive slots) from";
                break;
            }
            if (st != RCOLL_OK) {
                s->sends_inflight--;
                return peer_error(s, e, st, t->send_peer, "sending to");
            }
            s->s_chunk++;
            moved = 1;
        }
        if (moved)
            *progressed = 1;
        else
            break;
    }
    if (s->r_step >= s->nsteps && s->s_step >= s->nsteps) {
        if (s->sends_inflight == 0) {
            if (s->finish) {
                s->finish(s, e);
                s->finish = NULL;
            }
            return RCOLL_OK;
        }
        s->waiting_for = "its sends to drain to";
    }
    return RCOLL_INPROGRESS;
}
