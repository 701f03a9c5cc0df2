/* Hierarchical all-reduce for ranks spread over several hosts with the
 * same number L of ranks each (H hosts):
 *   1. inside each host, a ring reduce-scatter over its L ranks (shared
 *      memory): local position p ends with block (p + 1) mod L of L,
 *      reduced over the host;
 *   2. across hosts, the L ranks with the same local position run L
 *      independent ring all-reduces of their block (one ring per local
 *      position, H ranks each, over the network);
 *   3. inside each host, a ring all-gather of the L blocks.
 * Each host sends 2 (H - 1) / H x the buffer across the network in all
 * (L rings of 2 (H - 1) / H x one L-th), against 2 (n - 1) / n x the buffer
 * for a flat ring in host order, and the network phase has 2 (H - 1) steps
 * instead of 2 (n - 1). Positions come from the ring order (host h's ranks
 * are positions h L ... h L + L - 1). The phases are one schedule: phase
 * 2's first send waits for every receive of phase 1 (send_dep_all = 2),
 * phase 3's for every receive of phase 2; inside a phase, chunks pipeline
 * as in the flat ring. The full sum of a block exists only after phase 2's
 * last reduction, which is where AVG divides. Without several hosts of
 * equal size (or with one rank per host) it is the flat ring. */
#include "coll/tune.h"
#include "util/util.h"

rcoll_status_t coll_allreduce_hier(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, L = e->host_size, H = e->nhosts;
    size_t dts = rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    const char *in = s->sendbuf;
    rcoll_status_t st;

    if (H < 2 || L < 2 || H * L != n) {
        rcoll_debug(RCOLL_SUBSYS_COLL, "allreduce #%llu: hierarchical needs "
                    "several hosts with the same number (>= 2) of ranks "
                    "(%d hosts, %d ranks each): flat ring",
                    (unsigned long long)s->seq, H, L);
        return coll_allreduce_ring(s, e);
    }
    int me = coll_ring_pos(e, e->rank), h = me / L, p = me % L;
#define AT(host, pos) coll_ring_rank(e, ((host) + H) % H * L + ((pos) + L) % L)
    /* phase 1: reduce-scatter over the host's L ranks */
    for (int k = 0; k < L - 1; k++) {
        coll_step_t t;
        size_t soff, slen, roff, rlen;
        coll_block(s->count, L, ((p - k) % L + L) % L, &soff, &slen);
        coll_block(s->count, L, ((p - k - 1) % L + L) % L, &roff, &rlen);
        coll_sched_step_init(&t);
        t.send_peer = AT(h, p + 1);
        t.send_buf = (k == 0 ? in : out) + soff * dts;
        t.send_bytes = slen * dts;
        t.send_dep = k - 1;
        t.recv_peer = AT(h, p - 1);
        t.recv_dst = out + roff * dts;
        t.recv_local = in + roff * dts;
        t.recv_bytes = rlen * dts;
        t.recv_mode = RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    int last1 = s->nsteps - 1;
    /* phase 2: all-reduce of block (p + 1) mod L over the H hosts, a ring
     * of the ranks at local position p; sub-blocks by host position */
    size_t boff, blen;
    coll_block(s->count, L, (p + 1) % L, &boff, &blen);
    char *blk = out + boff * dts;
    for (int k = 0; k < 2 * (H - 1); k++) {
        coll_step_t t;
        size_t soff, slen, roff, rlen;
        coll_block(blen, H, ((h - k) % H + H) % H, &soff, &slen);
        coll_block(blen, H, ((h - k - 1) % H + H) % H, &roff, &rlen);
        coll_sched_step_init(&t);
        t.send_peer = AT(h + 1, p);
        t.send_buf = blk + soff * dts;
        t.send_bytes = slen * dts;
        t.send_dep = k == 0 ? last1 : s->nsteps - 1;
        t.send_dep_all = k == 0 ? 2 : 0;
        t.send_copy = k >= H - 1;
        t.recv_peer = AT(h - 1, p);
        t.recv_dst = blk + roff * dts;
        t.recv_local = blk + roff * dts;
        t.recv_bytes = rlen * dts;
        if (k < H - 2)
            t.recv_mode = RECV_REDUCE;
        else if (k == H - 2)
            t.recv_mode = s->op == RCOLL_AVG ? RECV_REDUCE_AVG : RECV_REDUCE;
        else
            t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    int last2 = s->nsteps - 1;
    /* phase 3: all-gather of the L blocks inside the host */
    for (int k = 0; k < L - 1; k++) {
        coll_step_t t;
        size_t soff, slen, roff, rlen;
        coll_block(s->count, L, ((p + 1 - k) % L + L) % L, &soff, &slen);
        coll_block(s->count, L, ((p - k) % L + L) % L, &roff, &rlen);
        coll_sched_step_init(&t);
        t.send_peer = AT(h, p + 1);
        t.send_buf = out + soff * dts;
        t.send_bytes = slen * dts;
        t.send_dep = k == 0 ? last2 : s->nsteps - 1;
        t.send_dep_all = k == 0 ? 2 : 0;
        t.send_copy = 1;
        t.recv_peer = AT(h, p - 1);
        t.recv_dst = out + roff * dts;
        t.recv_bytes = rlen * dts;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
#undef AT
    rcoll_debug(RCOLL_SUBSYS_COLL, "allreduce #%llu hierarchical: rank %d is "
                "host %d position %d of %d: host ring %d -> %d -> %d, network "
                "ring of position %d over %d hosts (%d -> %d -> %d)",
                (unsigned long long)s->seq, e->rank, h, p, L,
                coll_ring_rank(e, h * L + (p + L - 1) % L), e->rank,
                coll_ring_rank(e, h * L + (p + 1) % L), p, H,
                coll_ring_rank(e, (h + H - 1) % H * L + p), e->rank,
                coll_ring_rank(e, (h + 1) % H * L + p));
    return RCOLL_OK;
}

/* L - 1 streaming steps of a block (S / L) inside the host each way, and
 * H - 1 network steps each way of 1/H of the buffer per host, reduced */
double coll_allreduce_hier_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    int H, L;
    coll_tune_model_t ml;
    if (!coll_tune_hier(m, e, &ml, &H, &L))
        return HUGE_VAL;
    double blk = m->S / L;
    double sub = blk / H, k = coll_tune_nch(m, sub, *c) < 1
                                  ? 1
                                  : coll_tune_nch(m, sub, *c);
    return (L - 1) * (coll_tune_step_ovl(&ml, blk, *c, 1) +
                      coll_tune_step(&ml, blk, *c, 0)) +
           (H - 1) * 2 * (k * m->a + m->S / H / m->b) + (H - 1) * sub / m->g;
}
