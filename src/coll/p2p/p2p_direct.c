/* Point-to-point send and receive.
 *
 * Eager (up to RCOLL_P2P_EAGER bytes): the data goes at once, chunked
 * through the receiver's slots; if its receive is not posted yet and
 * another operation waits behind it, the receiver sets it aside.
 * Rendezvous (larger): the sender announces the message (RTS, no data),
 * the receiver answers once its receive has matched it (CTS), and only
 * then does the data move, so a large message never waits in the
 * receiver's memory for a receive that has not been posted. Both sides
 * decide from the byte count, which must match anyway. Every message
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

rcoll_status_t coll_recv_direct(coll_sched_t *s, const coll_env_t *e)
{
    coll_step_t t;
    rcoll_status_t st;
    int rdv = rendezvous(s, e);
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
    t.recv_dst = s->recvbuf;
    t.recv_bytes = s->count * rcoll_datatype_size(s->dt);
    t.recv_class = COLL_MSG_P2P;
    t.recv_always = 1;
    t.recv_mode = RECV_COPY;
    t.recv_place = 1; /* the user's buffer, only this message's */
    return coll_sched_add(s, &t);
}
