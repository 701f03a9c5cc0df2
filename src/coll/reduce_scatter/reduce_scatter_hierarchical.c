/* Hierarchical reduce-scatter for H hosts of L ranks each (positions from
 * the ring order; host h's ranks are positions h L ... h L + L - 1), the
 * hierarchical all-gather run backwards:
 *   1. inside each host, a ring reduce-scatter of "super-blocks": local
 *      position q's is the H blocks of the ranks (j, q), j = every host.
 *      Those blocks are not contiguous in sendbuf (blocks sit at their
 *      owner's rank), so each ring step is H schedule steps of one block;
 *      partial sums go through scratch. Position p ends with, for every
 *      host j, block (j, p) summed over its own host's L ranks;
 *   2. across hosts, the ranks at local position p run a ring
 *      reduce-scatter of those H partial blocks (one ring per p, all over
 *      the network at once); each ends with its own block summed over
 *      every rank. AVG divides in phase 2's last reduction.
 * Each host sends (H - 1) / H x the input across the network, against
 * (n - 1) / n for the flat ring in host order. Phase 2's first send waits
 * for every receive of phase 1 (send_dep_all = 2). Without several hosts
 * of equal size (or with one rank per host) it is the flat ring. */
#include "coll/tune.h"
#include "util/util.h"
#include <stdlib.h>

rcoll_status_t coll_reduce_scatter_hier(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, L = e->host_size, H = e->nhosts;
    size_t bytes = s->count * rcoll_datatype_size(s->dt); /* one block */
    const char *in = s->sendbuf;
    rcoll_status_t st;

    if (H < 2 || L < 2 || H * L != n)
        return coll_reduce_scatter_ring(s, e);
    int me = coll_ring_pos(e, e->rank), h = me / L, p = me % L;
#define AT(host, pos) coll_ring_rank(e, ((host) % H + H) % H * L + ((pos) % L + L) % L)
#define BLK(rank) (in + (size_t)(rank) * bytes)
    /* scratch: phase 1's (L - 1) H partial blocks, then phase 2's H - 2 */
    size_t nblk = (size_t)(L - 1) * (size_t)H + (size_t)(H - 2);
    if (bytes && !(s->scratch = malloc(bytes * nblk)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "reduce_scatter: no "
                                "memory for %zu scratch bytes", bytes * nblk);
    char *p1 = s->scratch, *p2 = s->scratch ? s->scratch + bytes * (size_t)(L - 1) * H : NULL;
    /* phase 1: the host ring of super-blocks */
    for (int k = 0; k < L - 1; k++)
        for (int j = 0; j < H; j++) {
            coll_step_t t;
            coll_sched_step_init(&t);
            t.send_peer = AT(h, p + 1);
            t.send_buf = k == 0 ? BLK(AT(j, p - 1))
                                : p1 + ((size_t)(k - 1) * H + j) * bytes;
            t.send_bytes = bytes;
            t.send_dep = k == 0 ? -1 : (k - 1) * H + j;
            t.recv_peer = AT(h, p - 1);
            t.recv_dst = p1 + ((size_t)k * H + j) * bytes;
            t.recv_local = BLK(AT(j, p - k - 2));
            t.recv_bytes = bytes;
            t.recv_mode = RECV_REDUCE;
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
        }
    int last1 = s->nsteps - 1;
    /* host j's block at position p, summed over this host */
    const char *part = p1 + (size_t)(L - 2) * H * bytes;
    /* phase 2: the network ring of local position p over the H hosts */
    for (int k = 0; k < H - 1; k++) {
        coll_step_t t;
        int sb = ((h - k - 1) % H + H) % H, rb = ((h - k - 2) % H + H) % H;
        coll_sched_step_init(&t);
        t.send_peer = AT(h + 1, p);
        t.send_buf = k == 0 ? part + (size_t)sb * bytes
                            : p2 + (size_t)(k - 1) * bytes;
        t.send_bytes = bytes;
        if (k == 0) {
            t.send_dep = last1;
            t.send_dep_all = 2;
        } else {
            t.send_dep = s->nsteps - 1;
        }
        t.recv_peer = AT(h - 1, p);
        t.recv_local = part + (size_t)rb * bytes;
        t.recv_bytes = bytes;
        if (k == H - 2) {
            t.recv_dst = s->recvbuf;
            t.recv_mode = s->op == RCOLL_AVG ? RECV_REDUCE_AVG : RECV_REDUCE;
        } else {
            t.recv_dst = p2 + (size_t)k * bytes;
            t.recv_mode = RECV_REDUCE;
        }
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
#undef AT
#undef BLK
    rcoll_debug(RCOLL_SUBSYS_COLL, "reduce_scatter #%llu hierarchical: rank "
                "%d is host %d position %d of %d: %d host-ring steps of %d "
                "blocks, then a network ring over %d hosts",
                (unsigned long long)s->seq, e->rank, h, p, L, L - 1, H, H);
    return RCOLL_OK;
}

/* (L - 1) H one-block reducing steps inside the host, then H - 1 network
 * steps, the host's L rings sharing it */
double coll_reduce_scatter_hier_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    int H, L;
    coll_tune_model_t ml;
    if (!coll_tune_hier(m, e, &ml, &H, &L))
        return HUGE_VAL;
    double k = coll_tune_nch(m, m->S, *c) < 1 ? 1 : coll_tune_nch(m, m->S, *c);
    double mv = L * m->S / m->b, rd = m->S / m->g;
    return (L - 1) * H * coll_tune_step_ovl(&ml, m->S, *c, 1) +
           (H - 1) * (k * m->a + (mv > rd ? mv : rd));
}
