/* The tuner's cost model (coll/tuner.c builds it per call; each algorithm
 * file has the cost function of its algorithm, named in coll_algos).
 *
 * The model is the usual latency-bandwidth one: a message of c bytes costs
 * alpha + c / beta on the communicator's slowest link (RCOLL_TUNE_SHM or
 * RCOLL_TUNE_TCP, measured by benchmarks/fit_tuner), reducing c bytes costs
 * c / gamma (RCOLL_TUNE_REDUCE_GBPS, one core's dst = a + b bandwidth from
 * benchmarks/membw.c). Steps of an algorithm that follow each other add up;
 * a pipeline of depth d over k chunks costs (d + k - 1) chunk times. When
 * more ranks share a host than it has cores, every step may wait for a
 * peer to be scheduled: alpha is scaled by ranks per core, which is what
 * pushes oversubscribed runs toward the algorithms with fewer dependent
 * rounds (a flat exchange posts n - 1 messages but waits only once).
 *
 * Chunk size: for pipelines (chain, tree) the time (d - 1 + S / C) *
 * (alpha + C / beta) is smallest at C = sqrt(S * alpha * beta / (d - 1)),
 * kept between 4 KiB and the transport's slot size; rings and exchanges
 * use whole slots.
 *
 * Several hosts: b is the host's network (a rail's rate times the rails,
 * coll_env_t.paths: one message is striped over all of them), shared by
 * the ranks of the host that talk across hosts in the same step. The
 * log-step algorithms (recursive doubling and halving, Bruck), the flat
 * exchanges and the rings charge each step by coll_env_t.loc: how many
 * ranks of a host have their partner elsewhere; steps whose partners are
 * all on the same host run on the local link. Trees and chains are
 * charged as one flow (few of a host's ranks send in one round).
 *
 * The hierarchical algorithms have two links: the one between ranks of a
 * host (RCOLL_TUNE_SHM when they use shared memory) for their host
 * phases, and the network for their network phase, where the host's L
 * rings share the host's network bandwidth. They cost infinity when the
 * ranks are not several hosts of equal size. */
#ifndef RCOLL_TUNE_H
#define RCOLL_TUNE_H

#include "sched.h"
#include <math.h>

struct coll_tune_model {
    double a;      /* seconds per message (per dependent round) */
    double a_raw;  /* the same before the oversubscription scaling */
    double b;      /* bytes per second on a link */
    double g;      /* bytes per second of reduction */
    double slot;   /* largest chunk */
    double S;      /* the call's bytes: its buffer, or one rank's block
                      (all-gather, reduce-scatter, all-to-all, gather,
                      scatter) */
    size_t dts;    /* the datatype's size */
    int n, p, L, Lp, extra; /* ranks, the largest power of two <= n,
                      ceil(log2 n), log2 p, n != p */
    double al, al_raw, bl; /* the link between ranks of one host */
    const coll_locality_t *loc; /* partners across hosts per kind of step */
};

/* The model of a step in which q ranks of a host talk across hosts at
 * once (coll_locality_t): they share the host's network (b / q); with
 * q = 0 every partner is on the same host (the local link). Where the
 * locality is unknown, the step is one flow over the network. */
static inline coll_tune_model_t coll_tune_at(const coll_tune_model_t *m,
                                             int q)
{
    coll_tune_model_t x = *m;
    if (!m->loc || !m->loc->valid)
        return x;
    if (q == 0) {
        x.a = m->al;
        x.a_raw = m->al_raw;
        x.b = m->bl;
    } else if (q > 1) {
        x.b = m->b / q;
    }
    return x;
}


static inline double coll_tune_nch(const coll_tune_model_t *m, double bytes,
                                   double c)
{
    (void)m;
    return bytes <= 0 ? 0 : ceil(bytes / c);
}

/* One step that moves `bytes` in chunks of c (and reduces them if red). */
static inline double coll_tune_step(const coll_tune_model_t *m, double bytes,
                                    double c, int red)
{
    double k = coll_tune_nch(m, bytes, c);
    if (k < 1)
        k = 1;
    return k * m->a + bytes / m->b + (red ? bytes / m->g : 0);
}

/* A step whose chunks stream: moving chunk i + 1 overlaps reducing chunk
 * i, so the slower of the two counts (rings, chains). */
static inline double coll_tune_step_ovl(const coll_tune_model_t *m,
                                        double bytes, double c, int red)
{
    double k = coll_tune_nch(m, bytes, c);
    if (k < 1)
        k = 1;
    double mv = bytes / m->b, rd = red ? bytes / m->g : 0;
    return k * m->a + (mv > rd ? mv : rd) + (red ? (c < bytes ? c : bytes)
                                                       / m->g : 0);
}

/* A pipeline of depth d over S bytes in chunks of c. */
static inline double coll_tune_pipe(const coll_tune_model_t *m, double S,
                                    double c, int d, int red)
{
    double k = coll_tune_nch(m, S, c);
    if (k < 1)
        k = 1;
    return (d + k - 1) * (m->a + c / m->b + (red ? c / m->g : 0));
}

/* The pipeline's best chunk (the sqrt law), a multiple of the type size
 * between 4 KiB and a slot. */
static inline double coll_tune_best_chunk(const coll_tune_model_t *m,
                                          double S, int d)
{
    double c = m->slot;
    if (d > 1)
        c = sqrt(S * m->a * m->b / (d - 1));
    if (c > m->slot)
        c = m->slot;
    if (c < 4096)
        c = 4096 < m->slot ? 4096 : m->slot;
    size_t ci = ((size_t)c / m->dts) * m->dts;
    return (double)(ci ? ci : m->dts);
}

/* The hierarchical algorithms: 0 unless the ranks are several hosts of
 * equal size (>= 2 each); else *H, *L and the model of the link between
 * ranks of one host (same oversubscription scaling as the network's). */
static inline int coll_tune_hier(const coll_tune_model_t *m,
                                 const coll_env_t *e, coll_tune_model_t *ml,
                                 int *H, int *L)
{
    *H = e->nhosts;
    *L = e->host_size;
    if (*H < 2 || *L < 2 || *H * *L != e->nranks)
        return 0;
    *ml = *m;
    ml->a = e->link_local.alpha_us * 1e-6;
    if (e->local_size > e->ncores)
        ml->a *= (double)e->local_size / e->ncores;
    ml->b = e->link_local.gbps * 1e9;
    return 1;
}

#endif
