/* Hierarchical all-gather for H hosts of L ranks each (positions from the
 * ring order: host h's ranks are positions h L ... h L + L - 1):
 *   1. across hosts, the ranks at the same local position p run a ring
 *      all-gather of their own blocks (H - 1 steps, one ring per p, all
 *      over the network at once);
 *   2. inside each host, a ring all-gather of "super-blocks": position p's
 *      is the H blocks phase 1 gave it (ranks (h', p) for every host h').
 *      The blocks of a super-block are not contiguous in recvbuf (blocks
 *      sit at their owner's rank), so each ring step is H schedule steps,
 *      one block each; step (k, j) forwards what step (k - 1, j) received,
 *      chunk by chunk.
 * Each host sends (H - 1) / H x the gathered bytes across the network
 * (L rings, H - 1 blocks each), against (n - 1) / n for the flat ring in
 * host order. Phase 2's first sends wait for every receive of phase 1
 * (send_dep_all = 2). Without several hosts of equal size (or with one
 * rank per host) it is the flat ring. */
#include "coll/tune.h"
#include "util/util.h"
#include <string.h>

rcoll_status_t coll_allgather_hier(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, L = e->host_size, H = e->nhosts;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    rcoll_status_t st;

    if (H < 2 || L < 2 || H * L != n)
        return coll_allgather_ring(s, e);
    int me = coll_ring_pos(e, e->rank), h = me / L, p = me % L;
#define AT(host, pos) coll_ring_rank(e, ((host) % H + H) % H * L + ((pos) % L + L) % L)
    if (bytes && s->sendbuf != out + (size_t)e->rank * bytes)
        s->md->copy(out + (size_t)e->rank * bytes, s->sendbuf, bytes);
    /* phase 1: the network ring of local position p */
    for (int k = 0; k < H - 1; k++) {
        coll_step_t t;
        coll_sched_step_init(&t);
        t.send_peer = AT(h + 1, p);
        t.send_buf = out + (size_t)AT(h - k, p) * bytes;
        t.send_bytes = bytes;
        t.send_dep = k - 1;
        t.recv_peer = AT(h - 1, p);
        t.recv_dst = out + (size_t)AT(h - k - 1, p) * bytes;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    int last1 = s->nsteps - 1, first2 = s->nsteps;
    /* phase 2: the host ring of super-blocks, H steps per ring step */
    for (int k = 0; k < L - 1; k++)
        for (int j = 0; j < H; j++) {
            coll_step_t t;
            coll_sched_step_init(&t);
            t.send_peer = AT(h, p + 1);
            t.send_buf = out + (size_t)AT(j, p - k) * bytes;
            t.send_bytes = bytes;
            if (k == 0) {
                t.send_dep = last1;
                t.send_dep_all = 2;
            } else {
                t.send_dep = first2 + (k - 1) * H + j;
            }
            t.recv_peer = AT(h, p - 1);
            t.recv_dst = out + (size_t)AT(j, p - k - 1) * bytes;
            t.recv_bytes = bytes;
            t.recv_mode = RECV_COPY;
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
        }
#undef AT
    rcoll_debug(RCOLL_SUBSYS_COLL, "allgather #%llu hierarchical: rank %d is "
                "host %d position %d of %d: network ring over %d hosts, then "
                "%d host-ring steps of %d blocks", (unsigned long long)s->seq,
                e->rank, h, p, L, H, L - 1, H);
    return RCOLL_OK;
}

/* H - 1 network steps, the host's L rings sharing its network bandwidth;
 * (L - 1) H one-block steps inside the host */
double coll_allgather_hier_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    int H, L;
    coll_tune_model_t ml;
    if (!coll_tune_hier(m, e, &ml, &H, &L))
        return HUGE_VAL;
    double k = coll_tune_nch(m, m->S, *c) < 1 ? 1 : coll_tune_nch(m, m->S, *c);
    return (H - 1) * (k * m->a + L * m->S / m->b) +
           (L - 1) * H * coll_tune_step(&ml, m->S, *c, 0);
}
