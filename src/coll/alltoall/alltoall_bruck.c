/* Bruck all-to-all (small blocks: ceil(log2 n) messages per rank instead
 * of n - 1, each of about n / 2 blocks).
 *   1. tmp[i] = our block for rank (r + i) mod n (a local rotation);
 *   2. for d = 1, 2, 4, ... < n: the blocks at indices i with bit d set
 *      are packed, sent to rank r + d, and replaced by those received
 *      from rank r - d (packed the same way);
 *   3. tmp[i] is then the block from rank r - i: recvbuf[(r - i) mod n].
 * Step k's pack (a pre_send hook, run once its receive of step k - 1 is
 * complete) first unpacks step k - 1's receive, which only then may
 * overwrite blocks: every pack and receive buffer is its own, so a send
 * still in flight never sees its blocks change. The last unpack and the
 * rotation run when everything is done. */
#include "coll/tune.h"
#include <stdlib.h>

/* scratch: tmp (n blocks), then per step a pack and a receive buffer of
 * `half` blocks each */
static size_t half_of(int n)
{
    return (size_t)(n + 1) / 2;
}

static char *area(coll_sched_t *s, const coll_env_t *e, int k, int recv)
{
    size_t b = s->count * rcoll_datatype_size(s->dt);
    size_t half = half_of(e->nranks) * b;
    return s->scratch + (size_t)e->nranks * b + (size_t)(2 * k + recv) * half;
}

/* moves the blocks with bit d (step k) between tmp and a packed buffer */
static void shuffle(coll_sched_t *s, const coll_env_t *e, int k, int pack)
{
    size_t b = s->count * rcoll_datatype_size(s->dt);
    int d = 1 << k;
    char *buf = area(s, e, k, !pack), *tmp = s->scratch;
    size_t j = 0;
    for (int i = 0; i < e->nranks; i++)
        if (i & d) {
            if (pack)
                s->md->copy(buf + j * b, tmp + (size_t)i * b, b);
            else
                s->md->copy(tmp + (size_t)i * b, buf + j * b, b);
            j++;
        }
}

static void bruck_pre_send(coll_sched_t *s, const coll_env_t *e, int k)
{
    if (k > 0)
        shuffle(s, e, k - 1, 0); /* the previous step's blocks into tmp */
    shuffle(s, e, k, 1);
}

static void bruck_finish(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    int last = s->nsteps - 1;
    if (last >= 0)
        shuffle(s, e, last, 0);
    char *out = s->recvbuf;
    for (int i = 0; i < n; i++)
        s->md->copy(out + (size_t)((r - i + n) % n) * b,
                    s->scratch + (size_t)i * b, b);
}

rcoll_status_t coll_alltoall_bruck(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    rcoll_status_t st;
    if (!b)
        return RCOLL_OK;
    int steps = 0;
    for (int d = 1; d < n; d <<= 1)
        steps++;
    size_t bytes = (size_t)n * b + (size_t)(2 * steps) * half_of(n) * b;
    if (!(s->scratch = malloc(bytes ? bytes : 1)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "alltoall: no memory "
                                "for %zu scratch bytes", bytes);
    const char *in = s->sendbuf;
    for (int i = 0; i < n; i++) /* reads all of the input: in place works */
        s->md->copy(s->scratch + (size_t)i * b,
                    in + (size_t)((r + i) % n) * b, b);
    for (int k = 0, d = 1; d < n; k++, d <<= 1) {
        size_t cnt = 0;
        for (int i = 0; i < n; i++)
            cnt += (i & d) != 0;
        coll_step_t t;
        coll_sched_step_init(&t);
        t.send_peer = (r + d) % n;
        t.send_buf = area(s, e, k, 0);
        t.send_bytes = cnt * b;
        t.send_dep = k - 1;
        t.send_dep_all = k > 0;
        t.pre_send = bruck_pre_send;
        t.recv_peer = (r - d + n) % n;
        t.recv_dst = area(s, e, k, 1);
        t.recv_bytes = cnt * b;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    s->finish = bruck_finish;
    return RCOLL_OK;
}

/* ceil(log2 n) dependent rounds of about n / 2 blocks, each packed and
 * unpacked, plus the two rotations */
double coll_alltoall_bruck_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    int n = m->n;
    double h = (n + 1) / 2 * m->S, t = 2 * n * m->S / m->g;
    for (int k = 0; k < m->L; k++) {
        coll_tune_model_t x = coll_tune_at(m, m->loc->sq[k]);
        t += coll_tune_step(&x, h, *c, 0) + 2 * h / m->g;
    }
    return t;
}
