/* Point-to-point send and receive.
 *
 * Eager (up to RCOLL_P2P_EAGER bytes): the data goes at once, chunked
 * through the receiver's slots; if its receive is not posted yet and
 * another operation waits behind it, the receiver sets it aside.
 * Rendezvous (larger): the sender announces the message (RTS, no data),
 * the receiver answers once its receive has matched it (CTS), and only
 * then does the data move, so a large message never waits in the
 * receiver's memory for a receive that has not been posted. The sender
 * decides from its byte count; the receive learns which from the first
 * message it matches, and the message's count with it (at most the
 * receive's: a longer message is dropped and only that receive fails,
 * RCOLL_ERR_TRUNCATED, as MPI_ERR_TRUNCATE). Every message
 * carries the sender's message number (seq) and the tag; a zero-byte send
 * is still one (empty) message, so it is matched like any other. */
#include "coll/sched.h"

static int rendezvous(const coll_sched_t *s, const coll_env_t *e)
{
    return s->count * rcoll_datatype_size(s->dt) > e->p2p_eager;
}

rcoll_status_t coll_send_direct(coll_sched_t *s, const coll_env_t *e)
{
    coll_step_t t;
    rcoll_status_t st;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    int rdv = rendezvous(s, e);
    if (rdv) {
        coll_sched_step_init(&t); /* 0: announce */
        t.send_peer = s->root;
        t.send_class = COLL_MSG_RTS;
        t.send_always = 1;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        coll_sched_step_init(&t); /* 1: the receiver's go-ahead */
        t.recv_peer = s->root;
        t.recv_class = COLL_MSG_CTS;
        t.recv_always = 1;
        t.recv_mode = RECV_DISCARD;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    coll_sched_step_init(&t); /* the data */
    t.send_peer = s->root;
    t.send_buf = s->sendbuf;
    t.send_bytes = bytes;
    t.send_class = COLL_MSG_P2P;
    t.send_always = 1;
    if (rdv) {
        t.send_dep = 1;
        t.send_dep_all = 1;
    }
    return coll_sched_add(s, &t);
}

/* The receive's steps for a message of `bytes` sent eagerly or announced
 * (rdv); discard: the message is longer than the receive's buffer, so its
 * chunks are consumed and dropped (the receive then fails alone with
 * RCOLL_ERR_TRUNCATED: coll/sched.c). */
static rcoll_status_t recv_steps(coll_sched_t *s, int rdv, size_t bytes,
                                int discard)
{
    coll_step_t t;
    rcoll_status_t st;
    if (rdv) {
        coll_sched_step_init(&t); /* 0: the announcement (matches) */
        t.recv_peer = s->root;
        t.recv_class = COLL_MSG_RTS;
        t.recv_always = 1;
        t.recv_mode = RECV_DISCARD;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        coll_sched_step_init(&t); /* 1: go ahead */
        t.send_peer = s->root;
        t.send_class = COLL_MSG_CTS;
        t.send_always = 1;
        t.send_dep = 0;
        t.send_dep_all = 1;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    coll_sched_step_init(&t); /* the data */
    t.recv_peer = s->root;
    t.recv_dst = discard ? NULL : s->recvbuf;
    t.recv_bytes = bytes;
    t.recv_class = COLL_MSG_P2P;
    t.recv_always = 1;
    t.recv_mode = discard ? RECV_DISCARD : RECV_COPY;
    t.recv_place = !discard; /* the user's buffer, only this message's */
    return coll_sched_add(s, &t);
}

/* The first message of a send matched receive s: the rest of it is
 * rebuilt for what that send carries. The sender alone decided eager or
 * rendezvous (from its count), and its count may be smaller than the
 * receive's, or larger (then truncated: recv_steps). A message of another
 * datatype is left to the executor's header check (a mismatch of the
 * ranks' calls). */
static rcoll_status_t recv_matched(coll_sched_t *s, const coll_env_t *e,
                                   const rcoll_msg_hdr_t *h)
{
    size_t dts = rcoll_datatype_size(s->dt);
    uint32_t kind = (uint32_t)COLL_SEND | (uint32_t)s->dt << 8 |
                    (uint32_t)s->op << 16;
    if ((h->kind & 0x00ffffffu) != kind || h->total > SIZE_MAX / dts)
        return RCOLL_OK;
    s->p2p_cap = s->count;
    s->p2p_trunc = h->total > s->count;
    s->count = (size_t)h->total;
    s->nsteps = 0;
    rcoll_status_t st = recv_steps(s, COLL_MSG_CLASS(h->kind) == COLL_MSG_RTS,
                                   s->count * dts, s->p2p_trunc);
    return st != RCOLL_OK ? st : coll_sched_restart(s, e);
}

/* Until a message matches, the receive expects one of its own count; the
 * first message it matches rebuilds it (recv_matched). */
rcoll_status_t coll_recv_direct(coll_sched_t *s, const coll_env_t *e)
{
    s->matched = recv_matched;
    return recv_steps(s, rendezvous(s, e),
                      s->count * rcoll_datatype_size(s->dt), 0);
}
