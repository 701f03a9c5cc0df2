/* The tuner: for each call, the algorithm with the lowest estimated time
 * and the chunk size to pipeline it with.
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
 * The hierarchical all-reduce, all-gather and reduce-scatter have two
 * links: the one
 * between ranks of a host (RCOLL_TUNE_SHM when they use shared memory) for
 * their host phases, and the network for their network phase, where the
 * host's L rings share the host's network bandwidth (an all-reduce step
 * moves 1/H of the buffer per host, an all-gather step L blocks). They
 * cost infinity when the ranks are not several hosts of equal size. */
#include "sched.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    double a;      /* seconds per message (per dependent round) */
    double a_raw;  /* the same before the oversubscription scaling */
    double b;      /* bytes per second on a link */
    double g;      /* bytes per second of reduction */
    double slot;   /* largest chunk */
    int n, p, L, Lp, extra;
} model_t;

static double nch(const model_t *m, double bytes, double c)
{
    (void)m;
    return bytes <= 0 ? 0 : ceil(bytes / c);
}

/* One step that moves `bytes` in chunks of c (and reduces them if red). */
static double step(const model_t *m, double bytes, double c, int red)
{
    double k = nch(m, bytes, c);
    if (k < 1)
        k = 1;
    return k * m->a + bytes / m->b + (red ? bytes / m->g : 0);
}

/* A step whose chunks stream: moving chunk i + 1 overlaps reducing chunk
 * i, so the slower of the two counts (rings, chains). */
static double step_ovl(const model_t *m, double bytes, double c, int red)
{
    double k = nch(m, bytes, c);
    if (k < 1)
        k = 1;
    double mv = bytes / m->b, rd = red ? bytes / m->g : 0;
    return k * m->a + (mv > rd ? mv : rd) + (red ? (c < bytes ? c : bytes)
                                                       / m->g : 0);
}

/* A pipeline of depth d over S bytes in chunks of c. */
static double pipe_cost(const model_t *m, double S, double c, int d, int red)
{
    double k = nch(m, S, c);
    if (k < 1)
        k = 1;
    return (d + k - 1) * (m->a + c / m->b + (red ? c / m->g : 0));
}

static double best_chunk(const model_t *m, double S, int d, size_t dts)
{
    double c = m->slot;
    if (d > 1)
        c = sqrt(S * m->a * m->b / (d - 1));
    if (c > m->slot)
        c = m->slot;
    if (c < 4096)
        c = 4096 < m->slot ? 4096 : m->slot;
    size_t ci = ((size_t)c / dts) * dts;
    return (double)(ci ? ci : dts);
}

static int ilog2ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* The hierarchical algorithms: 0 unless the ranks are several hosts of
 * equal size (>= 2 each); else *H, *L and the model of the link between
 * ranks of one host (same oversubscription scaling as the network's). */
static int hier_model(const model_t *m, const coll_env_t *e, model_t *ml,
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

double coll_tune_cost(const coll_algo_t *a, const coll_sched_t *s,
                      const coll_env_t *e, size_t *chunk)
{
    model_t m;
    size_t dts = rcoll_datatype_size(s->dt);
    double S = (double)s->count * (double)dts; /* the call's buffer */
    double c;
    int n = e->nranks;

    m.a = e->link.alpha_us * 1e-6;
    m.a_raw = m.a;
    if (e->local_size > e->ncores)
        m.a *= (double)e->local_size / e->ncores;
    m.b = e->link.gbps * 1e9;
    m.g = rcoll_config.tune_reduce_gbps * 1e9;
    m.slot = (double)((e->chunk_size / dts) * dts);
    m.n = n;
    m.p = 1;
    while (m.p * 2 <= n)
        m.p *= 2;
    m.L = ilog2ceil(n);
    m.Lp = ilog2ceil(m.p);
    m.extra = n != m.p;
    c = m.slot;
    double t = 0, blk;
    const char *nm = a->name;

    switch (a->kind) {
    case COLL_ALLREDUCE:
        if (!strcmp(nm, "ring")) {
            blk = S / n;
            t = (n - 1) * (step_ovl(&m, blk, c, 1) + step(&m, blk, c, 0));
        } else if (!strcmp(nm, "recursive_doubling")) {
            t = m.Lp * step(&m, S, c, 1) + m.extra * 2 * step(&m, S, c, 0);
        } else if (!strcmp(nm, "hierarchical")) {
            int H, L;
            model_t ml;
            if (!hier_model(&m, e, &ml, &H, &L)) {
                t = HUGE_VAL;
                break;
            }
            blk = S / L;
            double sub = blk / H, k = nch(&m, sub, c) < 1 ? 1 : nch(&m, sub, c);
            t = (L - 1) * (step_ovl(&ml, blk, c, 1) + step(&ml, blk, c, 0)) +
                (H - 1) * 2 * (k * m.a + S / H / m.b) +
                (H - 1) * sub / m.g;
        } else if (!strcmp(nm, "flat")) {
            /* one dependent round; the other n - 2 messages are only
             * posted; n - 1 inputs moved and reduced. Over a network
             * transport with more ranks than cores, each of the n - 1
             * messages also needs its sender and then the receiver to
             * get a core for a system call (TCP): each costs the scaled
             * alpha (TCP, 5 interleaved rounds, flat against recursive
             * doubling: 8 ranks on 2 cores, 8 B - 8 KiB, 1.9-2.5x
             * slower; 16 ranks 2.8-3.4x; which the unscaled posting had
             * chosen). Over shared memory a sender writes into the
             * receiver's ring on its own: there flat stays ahead (8
             * ranks, 8-512 B, 0.70-0.77 of recursive doubling's time) */
            int net = e->link_name && strcmp(e->link_name, "shm") != 0;
            t = m.a + (n - 2) * (net ? m.a : m.a_raw) +
                (n - 1) * (nch(&m, S, c) > 1 ? nch(&m, S, c) - 1 : 0) * m.a +
                (n - 1) * (S / m.b + S / m.g);
        } else { /* rabenseifner: each step waits for the whole previous */
            t = m.extra * (step(&m, S, c, 1) + step(&m, S, c, 0));
            for (double h = S / 2; h * m.p >= S * 0.99 && h > 0; h /= 2)
                t += step(&m, h, c, 1) + step(&m, h, c, 0);
        }
        break;
    case COLL_ALLGATHER: /* S is one rank's block */
        if (!strcmp(nm, "ring")) {
            t = (n - 1) * step(&m, S, c, 0);
        } else if (!strcmp(nm, "hierarchical")) {
            /* H - 1 network steps, the host's L rings sharing its network
             * bandwidth; (L - 1) H one-block steps inside the host */
            int H, L;
            model_t ml;
            if (!hier_model(&m, e, &ml, &H, &L)) {
                t = HUGE_VAL;
                break;
            }
            double k = nch(&m, S, c) < 1 ? 1 : nch(&m, S, c);
            t = (H - 1) * (k * m.a + L * S / m.b) +
                (L - 1) * H * step(&ml, S, c, 0);
        } else if (!strcmp(nm, "bruck")) {
            /* plus the final local rotation of everything */
            t = m.L * m.a + (n - 1) * S / m.b + n * S / m.g;
        } else { /* recursive doubling */
            t = m.Lp * m.a + (m.p - 1) * S * (m.extra ? 2 : 1) / m.b +
                m.extra * 2 * step(&m, S * n, c, 0);
        }
        break;
    case COLL_BROADCAST:
        if (!strcmp(nm, "chain")) {
            c = best_chunk(&m, S, n - 1, dts);
            t = pipe_cost(&m, S, c, n - 1, 0);
        } else if (!strcmp(nm, "tree")) {
            /* the root feeds L children the whole message in turn */
            c = best_chunk(&m, S, m.L, dts);
            t = m.L * (nch(&m, S, c) * m.a + S / m.b);
        } else { /* scatter_allgather */
            blk = S / n;
            t = (n - 1) * (m.a + blk / m.b) + (n - 1) * step(&m, blk, c, 0);
        }
        break;
    case COLL_REDUCE:
        if (!strcmp(nm, "chain")) {
            c = best_chunk(&m, S, n - 1, dts);
            t = pipe_cost(&m, S, c, n - 1, 1);
        } else { /* tree */
            c = best_chunk(&m, S, m.L, dts);
            t = m.L * step(&m, S, c, 1);
        }
        break;
    case COLL_REDUCE_SCATTER: /* S is one rank's block */
        if (!strcmp(nm, "ring")) {
            t = (n - 1) * step_ovl(&m, S, c, 1);
        } else if (!strcmp(nm, "hierarchical")) {
            /* (L - 1) H one-block reducing steps inside the host, then
             * H - 1 network steps, the host's L rings sharing it */
            int H, L;
            model_t ml;
            if (!hier_model(&m, e, &ml, &H, &L)) {
                t = HUGE_VAL;
                break;
            }
            double k = nch(&m, S, c) < 1 ? 1 : nch(&m, S, c);
            double mv = L * S / m.b, rd = S / m.g;
            t = (L - 1) * H * step_ovl(&ml, S, c, 1) +
                (H - 1) * (k * m.a + (mv > rd ? mv : rd));
        } else if (!strcmp(nm, "halving")) {
            /* the input permuted into scratch and our block out of it,
             * the extra ranks' whole input in and their block out, then
             * log2(p) rounds of half the range still held, none
             * overlapping the next */
            t = (n + 1) * S / m.g +
                m.extra * (step(&m, S * n, c, 1) + step(&m, S, c, 0));
            for (double h = S * n / 2; h * m.p >= S * n * 0.99 && h > 0;
                 h /= 2)
                t += step(&m, h, c, 1);
        } else { /* tree: reduce everything to 0, then scatter */
            t = m.L * step(&m, S * n, c, 1) + (n - 1) * step(&m, S, c, 0);
        }
        break;
    case COLL_ALLTOALL: /* S is one block */
        if (!strcmp(nm, "bruck")) {
            /* L dependent rounds of about n / 2 blocks, each packed and
             * unpacked, plus the two rotations */
            double h = (n + 1) / 2 * S;
            t = m.L * (step(&m, h, c, 0) + 2 * h / m.g) + 2 * n * S / m.g;
        } else if (!strcmp(nm, "hierarchical")) {
            model_t ml;
            int H, L;
            if (!hier_model(&m, e, &ml, &H, &L)) {
                t = INFINITY;
                break;
            }
            /* a host exchange of (L - 1) H single blocks, then (H - 1)
             * network messages of L blocks, the second waiting for the
             * first; own blocks copied in, rows unpacked out */
            double k1 = nch(&ml, S, c), k2 = nch(&m, L * S, c);
            t = ml.a + ((L - 1) * H - 1) * ml.a_raw +
                (L - 1) * H * ((k1 > 1 ? k1 - 1 : 0) * ml.a + S / ml.b) +
                m.a + (H - 2) * m.a_raw +
                (H - 1) * ((k2 > 1 ? k2 - 1 : 0) * m.a + L * S / m.b) +
                2 * n * S / m.g;
        } else { /* pairwise: one dependent round, n - 1 messages posted
                  * (as the flat all-reduce); across several hosts the
                  * (L - 1) messages inside the host cost the host link's
                  * posting only: the network's (H - 1) L dominate */
            model_t ml;
            int H, L, net = n - 1;
            double loc = 0;
            if (hier_model(&m, e, &ml, &H, &L)) {
                net = (H - 1) * L;
                loc = (L - 1) * ml.a_raw;
            }
            t = m.a + (net - 1) * m.a_raw + loc +
                net * (nch(&m, S, c) > 1 ? nch(&m, S, c) - 1 : 0) * m.a +
                net * S / m.b;
        }
        break;
    case COLL_GATHER:
    case COLL_SCATTER: /* S is one rank's block */
        if (!strcmp(nm, "binomial")) {
            /* ceil(log2 n) rounds; the blocks also pass through the
             * inner nodes' scratch (about log2(n) / 2 copies each) */
            t = m.L * m.a + (n - 1) * S / m.b + (n - 1) * S * m.L / 2 / m.g;
        } else { /* direct: the root posts or takes n - 1 messages */
            t = m.a + (n - 2) * m.a_raw + (n - 1) * S / m.b;
        }
        break;
    default:
        t = 0;
        break;
    }
    if (chunk)
        *chunk = (size_t)c;
    return t;
}

const coll_algo_t *coll_tune(const coll_sched_t *s, const coll_env_t *e,
                             size_t *chunk)
{
    const coll_algo_t *best = NULL;
    double best_t = 0;
    size_t best_c = e->chunk_size;
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        if (a->kind != s->kind || a->build == coll_area_build)
            continue; /* the area is chosen before (coll_sched_build) */
        size_t c;
        double t = coll_tune_cost(a, s, e, &c);
        rcoll_trace(RCOLL_SUBSYS_TUNE, "%s count %zu: %s would take %.1f us "
                    "(chunk %zu)", coll_kind_name(s->kind), s->count, a->name,
                    t * 1e6, c);
        if (!best || t < best_t) {
            best = a;
            best_t = t;
            best_c = c;
        }
    }
    if (chunk)
        *chunk = best_c;
    return best;
}
