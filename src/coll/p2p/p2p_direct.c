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
rcoll_status_t coll_recv_steps(coll_sched_t *s, int rdv, size_t bytes,
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

/* Until a message matches, the receive expects one of its own count;
 * the first message it matches rebuilds it (coll/sched.c: recv_matched):
 * the sender alone decides eager or rendezvous, and its count may be
 * smaller than the receive's, or larger (truncated). */
rcoll_status_t coll_recv_direct(coll_sched_t *s, const coll_env_t *e)
{
    return coll_recv_steps(s, rendezvous(s, e),
                           s->count * rcoll_datatype_size(s->dt), 0);
}
