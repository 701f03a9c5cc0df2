/* Point-to-point send and receive: one step, chunked through the slots. */
#include "coll/sched.h"

rcoll_status_t coll_send_direct(coll_sched_t *s, const coll_env_t *e)
{
    coll_step_t t;
    (void)e;
    coll_sched_step_init(&t);
    t.send_peer = s->root;
    t.send_buf = s->sendbuf;
    t.send_bytes = s->count * rcoll_datatype_size(s->dt);
    return coll_sched_add(s, &t);
}

rcoll_status_t coll_recv_direct(coll_sched_t *s, const coll_env_t *e)
{
    coll_step_t t;
    (void)e;
    coll_sched_step_init(&t);
    t.recv_peer = s->root;
    t.recv_dst = s->recvbuf;
    t.recv_bytes = s->count * rcoll_datatype_size(s->dt);
    t.recv_mode = RECV_COPY;
    return coll_sched_add(s, &t);
}
