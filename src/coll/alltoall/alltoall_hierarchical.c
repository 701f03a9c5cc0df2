/* Hierarchical all-to-all for H hosts of L ranks each (positions from the
 * ring order: host h's ranks are positions h L ... h L + L - 1), rank
 * (h, p) at host h, local position p:
 *   1. inside each host, a pairwise exchange by local position: (h, p)
 *      sends (h, q) its blocks for every rank (j, q), j = 0 .. H - 1, one
 *      block per step, and gathers from (h, q) the blocks for (j, p) into
 *      a scratch of H x L blocks laid out by destination host (row j:
 *      what (j, p) gets from each rank of this host). Blocks for this host
 *      go straight to their place in recvbuf.
 *   2. across hosts, a pairwise exchange by host: (h, p) sends (h + k, p)
 *      row h + k, L blocks in one message, and receives from (h - k, p)
 *      the L blocks of host h - k's ranks for it.
 * So a host pair exchanges one network message per local position instead
 * of one per rank pair: (H - 1) x L messages per host instead of
 * (H - 1) x L x L, the same bytes. It pays while blocks are small (the
 * network's per-message cost dominates); phase 1 moves (L - 1)(H - 1)
 * blocks more through shared memory than the flat exchange, which is why
 * the tuner keeps the flat pairwise exchange for large blocks. In place,
 * the input is copied aside first. Without several hosts of equal size
 * (or with one rank per host) it is the flat pairwise exchange. */
#include "coll/tune.h"
#include "util/util.h"
#include <stdlib.h>
#include <string.h>

/* Phase 2's received rows land in scratch when a host's ranks are not
 * consecutive in recvbuf; this puts them in place. */
static void hier_finish(coll_sched_t *s, const coll_env_t *e)
{
    int H = e->nhosts, L = e->host_size, me = coll_ring_pos(e, e->rank);
    int h = me / L;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    char *rows = s->scratch + (size_t)H * L * b; /* after the gather area */
    for (int j = 0; j < H; j++) {
        if (j == h)
            continue;
        for (int q = 0; q < L; q++)
            s->md->copy((char *)s->recvbuf +
                            (size_t)coll_ring_rank(e, j * L + q) * b,
                        rows + ((size_t)j * L + q) * b, b);
    }
}

rcoll_status_t coll_alltoall_hier(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, L = e->host_size, H = e->nhosts;
    size_t b = s->count * rcoll_datatype_size(s->dt);
    rcoll_status_t st;

    if (H < 2 || L < 2 || H * L != n)
        return coll_alltoall_pairwise(s, e);
    if (!b)
        return RCOLL_OK;
    int me = coll_ring_pos(e, e->rank), h = me / L, p = me % L;
#define AT(host, pos) coll_ring_rank(e, ((host) % H + H) % H * L + ((pos) % L + L) % L)
    /* rows in recvbuf directly when every host's ranks are consecutive */
    int direct = 1;
    for (int j = 0; j < H && direct; j++)
        for (int q = 1; q < L; q++)
            if (AT(j, q) != AT(j, 0) + q) {
                direct = 0;
                break;
            }
    int inplace = s->sendbuf == s->recvbuf;
    size_t gather = (size_t)H * L * b, rows = direct ? 0 : gather,
           copy = inplace ? (size_t)n * b : 0;
    if (!(s->scratch = malloc(gather + rows + copy)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "alltoall: no memory "
                                "for %zu bytes of scratch",
                                gather + rows + copy);
    char *g = s->scratch, *rw = s->scratch + gather, *out = s->recvbuf;
    const char *in = s->sendbuf;
    if (inplace) {
        char *c = s->scratch + gather + rows;
        s->md->copy(c, in, (size_t)n * b);
        in = c;
    }
#define G(j, q) (g + ((size_t)(j) * L + (q)) * b) /* row j, from local q */
    /* our own blocks: for this host's ranks straight to recvbuf, for the
     * others into our column of the gather area */
    for (int j = 0; j < H; j++) {
        const char *src = in + (size_t)AT(j, p) * b;
        if (j == h) {
            if (src != out + (size_t)e->rank * b)
                s->md->copy(out + (size_t)e->rank * b, src, b);
        } else {
            s->md->copy(G(j, p), src, b);
        }
    }
    /* phase 1: local position p + k gets our blocks for its column, we
     * get p - k's for ours; one block (one destination host) per step */
    for (int k = 1; k < L; k++)
        for (int j = 0; j < H; j++) {
            coll_step_t t;
            coll_sched_step_init(&t);
            t.send_peer = AT(h, p + k);
            t.send_buf = in + (size_t)AT(j, p + k) * b;
            t.send_bytes = b;
            t.recv_peer = AT(h, p - k);
            t.recv_dst = j == h ? out + (size_t)AT(h, p - k) * b
                                : G(j, ((p - k) % L + L) % L);
            t.recv_bytes = b;
            t.recv_mode = RECV_COPY;
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
        }
    int last1 = s->nsteps - 1;
    /* phase 2: host h + k gets its row (once phase 1 filled it), we get
     * host h - k's ranks' blocks for us */
    for (int k = 1; k < H; k++) {
        int to = h + k, from = ((h - k) % H + H) % H;
        coll_step_t t;
        coll_sched_step_init(&t);
        t.send_peer = AT(to, p);
        t.send_buf = G(to % H, 0);
        t.send_bytes = (size_t)L * b;
        t.send_dep = last1;
        t.send_dep_all = 2;
        t.recv_peer = AT(from, p);
        t.recv_dst = direct ? out + (size_t)AT(from, 0) * b
                            : rw + (size_t)from * L * b;
        t.recv_bytes = (size_t)L * b;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
#undef G
#undef AT
    if (!direct)
        s->finish = hier_finish;
    rcoll_debug(RCOLL_SUBSYS_COLL, "alltoall #%llu hierarchical: rank %d is "
                "host %d position %d of %d: %d host steps of %d blocks, then "
                "%d network messages of %d blocks%s",
                (unsigned long long)s->seq, e->rank, h, p, L, L - 1, H,
                H - 1, L, direct ? "" : " (unpacked at the end)");
    return RCOLL_OK;
}

/* Its partners: the other L - 1 ranks of its host and one rank of each
 * other host (every rank when the ranks are not equal hosts: then it
 * does not run) */
int coll_alltoall_hier_peers(const coll_env_t *e)
{
    if (e->nhosts < 2 || e->host_size < 2 ||
        e->nhosts * e->host_size != e->nranks)
        return e->nranks - 1;
    return e->host_size - 1 + e->nhosts - 1;
}

/* A host exchange of (L - 1) H single blocks, then (H - 1) network
 * messages of L blocks, the second waiting for the first (the L ranks of
 * a host send theirs through its NICs at once); own blocks
 * copied in, rows unpacked out */
double coll_alltoall_hier_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    coll_tune_model_t ml;
    int H, L, n = m->n;
    if (!coll_tune_hier(m, e, &ml, &H, &L))
        return INFINITY;
    double k1 = coll_tune_nch(&ml, m->S, *c), k2 = coll_tune_nch(m, L * m->S, *c);
    return ml.a + ((L - 1) * H - 1) * ml.a_raw +
           (L - 1) * H * ((k1 > 1 ? k1 - 1 : 0) * ml.a + m->S / ml.b) + m->a +
           (H - 2) * m->a_raw +
           (H - 1) * ((k2 > 1 ? k2 - 1 : 0) * m->a + L * L * m->S / m->b) +
           2 * n * m->S / m->g;
}
