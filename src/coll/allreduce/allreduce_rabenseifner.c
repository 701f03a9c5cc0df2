/* Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an
 * all-gather by recursive doubling; each rank moves about 2 * bytes like
 * the ring, in 2 log2(p) steps instead of 2(n - 1). With p the largest
 * power of two <= n, the "extra" ranks r >= p first hand their data to
 * r - p (which reduces it in) and get the result back at the end.
 *
 * The halving steps may take the bits in any order (r and r ^ 2^k agree
 * on every bit handled before, so they split the same range); the
 * doubling undoes them backwards. Across hosts the order puts the steps
 * whose partners share a host first (coll_rabenseifner_order): the first
 * halves, the largest, stay inside the host, and only 1/L of the data per
 * rank (L ranks a host, host-contiguous) crosses the network, as in the
 * hierarchical algorithm, in log2 steps instead of H - 1.
 *
 * Everything happens in recvbuf (after copying the input in): halving round
 * k sends the half this rank gives up and reduces the partner's copy of
 * the half it keeps, and the two halves are disjoint; doubling rounds
 * receive only blocks this rank has not sent. So no receive writes what a
 * pending send reads. Every block is combined in the same order on every
 * rank, so all ranks get identical results. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

/* The first element of block b of p (b = p: the end). */
static size_t blk_off(size_t count, int p, int b)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p;
    size_t ub = (size_t)b;
    return ub * base + (ub < rem ? ub : rem);
}

/* The halving steps' bits (2^k < p), the steps with the fewest ranks of
 * a host talking across hosts first (coll_env_t.loc), so that the large
 * early halves stay inside a host; ties (one host, or unknown) take the
 * higher bit first. The doubling runs them backwards. Every rank computes
 * the same order. Returns how many. */
int coll_rabenseifner_order(const coll_env_t *e, int p, int *bit)
{
    int nb = 0;
    for (int k = COLL_LOC_BITS - 2; k >= 0; k--)
        if ((1 << k) < p)
            bit[nb++] = k;
    for (int i = 1; i < nb; i++) { /* insertion sort: stable */
        int b = bit[i], j = i;
        int q = e->loc.valid ? e->loc.xq[b] : 0;
        while (j > 0 && (e->loc.valid ? e->loc.xq[bit[j - 1]] : 0) > q) {
            bit[j] = bit[j - 1];
            j--;
        }
        bit[j] = b;
    }
    return nb;
}

int coll_halving_pos(int v, const int *bit, int nb)
{
    int pos = 0;
    for (int i = 0; i < nb; i++)
        pos = pos << 1 | (v >> bit[i] & 1);
    return pos;
}

size_t *coll_halving_po(const coll_sched_t *s, size_t total)
{
    return (size_t *)(void *)(s->scratch + ((total + 15) & ~(size_t)15));
}

size_t *coll_halving_scratch(coll_sched_t *s, size_t total, int n, int p,
                             const int *bit, int nb)
{
    size_t lay = ((total + 15) & ~(size_t)15) + (size_t)(p + 1) * sizeof(size_t);
    if (!(s->scratch = malloc(lay))) {
        rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory for %zu "
                         "scratch bytes", coll_kind_name(s->kind), lay);
        return NULL;
    }
    size_t *po = coll_halving_po(s, total);
    coll_halving_layout(n, p, bit, nb, po);
    return po;
}

void coll_halving_layout(int n, int p, const int *bit, int nb, size_t *po)
{
    for (int j = 0; j <= p; j++)
        po[j] = 0;
    for (int v = 0; v < p; v++) /* sizes by position, then offsets */
        po[coll_halving_pos(v, bit, nb) + 1] = v + p < n ? 2 : 1;
    for (int j = 0; j < p; j++)
        po[j + 1] += po[j];
}

/* An extra rank (r >= p): hands its data to r - p, gets the result back */
static rcoll_status_t rab_extra(coll_sched_t *s, int peer, char *out,
                                size_t bytes)
{
    coll_step_t t;
    rcoll_status_t st;
    coll_sched_step_init(&t);
    t.send_peer = peer;
    t.send_buf = out;
    t.send_bytes = bytes;
    if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
        return st;
    coll_sched_step_init(&t);
    t.recv_peer = peer;
    t.recv_dst = out;
    t.recv_bytes = bytes;
    t.recv_mode = RECV_COPY;
    return coll_sched_add(s, &t);
}

/* The halving and doubling steps of one of the first p ranks (p a power
 * of two), each waiting for the whole step before it; *lastp: the step
 * the first waits for (-1: none), then the last step added. */
static rcoll_status_t rab_halve_double(coll_sched_t *s, const coll_env_t *e,
                                       int p, int *lastp)
{
    size_t dts = rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    int r = e->rank, last = *lastp;
    coll_step_t t;
    rcoll_status_t st;
    /* block b of p: elements [OFF(b), OFF(b + 1)) */
#define OFF(b) blk_off(s->count, p, b)
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(e, p, bit);
    int sib_lo[COLL_LOC_BITS], sib_hi[COLL_LOC_BITS];
    int lo = 0, hi = p;
    for (int i = 0; i < nb; i++) {
        /* r and r ^ m agree on every bit handled so far, so they hold the
         * same range: the one with bit m clear keeps its lower half */
        int m = 1 << bit[i], peer = r ^ m, mid = lo + (hi - lo) / 2;
        int klo = (r & m) ? mid : lo, khi = (r & m) ? hi : mid;
        int glo = (r & m) ? lo : mid, ghi = (r & m) ? mid : hi;
        size_t ko = OFF(klo), kb = OFF(khi) - ko;
        size_t go = OFF(glo), gb = OFF(ghi) - go;
        coll_sched_step_init(&t);
        t.send_peer = peer;
        t.send_buf = out + go * dts;
        t.send_bytes = gb * dts;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.recv_peer = peer;
        t.recv_dst = out + ko * dts;
        t.recv_local = out + ko * dts;
        t.recv_bytes = kb * dts;
        t.recv_mode = (i == nb - 1 && s->op == RCOLL_AVG) ? RECV_REDUCE_AVG
                                                          : RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
        sib_lo[i] = glo;
        sib_hi[i] = ghi;
        lo = klo;
        hi = khi;
    }
    /* now [lo, hi) (one block) is final here; double the range back up in
     * the reverse order: the partner holds the half given away there */
    for (int i = nb - 1; i >= 0; i--) {
        int peer = r ^ (1 << bit[i]);
        size_t mo = OFF(lo), mb = OFF(hi) - mo;
        size_t po = OFF(sib_lo[i]), pb = OFF(sib_hi[i]) - po;
        coll_sched_step_init(&t);
        t.send_peer = peer;
        t.send_buf = out + mo * dts;
        t.send_bytes = mb * dts;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.send_copy = 1;
        t.recv_peer = peer;
        t.recv_dst = out + po * dts;
        t.recv_bytes = pb * dts;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
        if (sib_lo[i] < lo)
            lo = sib_lo[i];
        else
            hi = sib_hi[i];
    }
#undef OFF
    *lastp = last;
    return RCOLL_OK;
}

rcoll_status_t coll_allreduce_rabenseifner(coll_sched_t *s,
                                           const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, p = 1;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    coll_step_t t;
    rcoll_status_t st;

    coll_copy_in(s);
    if (n == 1)
        return RCOLL_OK;
    while (p * 2 <= n)
        p *= 2;
    if (r >= p)
        return rab_extra(s, r - p, out, bytes);
    int last = -1; /* the latest step with a receive */
    if (r + p < n) { /* our extra rank's data, reduced in */
        coll_sched_step_init(&t);
        t.recv_peer = r + p;
        t.recv_dst = out;
        t.recv_local = out;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        last = s->nsteps - 1;
    }
    if ((st = rab_halve_double(s, e, p, &last)) != RCOLL_OK)
        return st;
    if (r + p < n) { /* the result to our extra rank */
        coll_sched_step_init(&t);
        t.send_peer = r + p;
        t.send_buf = out;
        t.send_bytes = bytes;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.send_copy = 1;
        return coll_sched_add(s, &t);
    }
    return RCOLL_OK;
}

/* Each halving and doubling step waits for the whole previous one */
double coll_allreduce_rabenseifner_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    coll_tune_model_t x = coll_tune_at(m, m->loc->xq[m->Lp]);
    double t = m->extra * (coll_tune_step(&x, m->S, *c, 1) +
                           coll_tune_step(&x, m->S, *c, 0));
    int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(e, m->p, bit);
    double h = m->S / 2;
    for (int i = 0; i < nb; i++, h /= 2) {
        x = coll_tune_at(m, m->loc->xq[bit[i]]);
        t += coll_tune_step(&x, h, *c, 1) + coll_tune_step(&x, h, *c, 0);
    }
    return t;
}
