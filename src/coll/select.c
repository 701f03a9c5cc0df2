/* The algorithm table and the choice per call: the tuner's (coll/tuner.c)
 * unless RCOLL_ALGO=coll:name,... forces one. */
#include "sched.h"
#include "util/params.h"
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

const coll_algo_t coll_algos[] = {
    {COLL_ALLREDUCE, "ring", coll_allreduce_ring, coll_allreduce_ring_cost,
     "pipelined ring: reduce-scatter then all-gather (large messages)", NULL},
    {COLL_ALLREDUCE, "recursive_doubling", coll_allreduce_rd, coll_allreduce_rd_cost,
     "log2(n) exchanges of the whole buffer (small messages)", NULL},
    {COLL_ALLREDUCE, "flat", coll_allreduce_flat, coll_allreduce_flat_cost,
     "everyone sends to everyone, one round, local reduction in rank order "
     "(small messages, ranks outnumbering cores)", coll_peers_all},
    {COLL_ALLREDUCE, "rabenseifner", coll_allreduce_rabenseifner, coll_allreduce_rabenseifner_cost,
     "recursive halving reduce-scatter + recursive doubling all-gather "
     "(medium and large messages, 2 log2(n) steps)", NULL},
    {COLL_ALLREDUCE, "double_tree", coll_allreduce_dbtree, coll_allreduce_dbtree_cost,
     "two complementary binary trees, each reducing half up to its root "
     "and broadcasting it back, chunk-pipelined (many ranks)", NULL},
    {COLL_ALLREDUCE, "hierarchical", coll_allreduce_hier, coll_allreduce_hier_cost,
     "reduce-scatter inside each host, one network ring per local rank, "
     "all-gather inside each host (several hosts with as many ranks each)", NULL},
    {COLL_ALLGATHER, "ring", coll_allgather_ring, coll_allgather_ring_cost,
     "pipelined ring (large messages)", NULL},
    {COLL_ALLGATHER, "bruck", coll_allgather_bruck, coll_allgather_bruck_cost,
     "Bruck, ceil(log2 n) steps, any rank count (small messages)", NULL},
    {COLL_ALLGATHER, "recursive_doubling", coll_allgather_rdb, coll_allgather_rdb_cost,
     "recursive doubling, log2(n) steps (+2 when n is not a power of two)", NULL},
    {COLL_ALLGATHER, "hierarchical", coll_allgather_hier, coll_allgather_hier_cost,
     "one network ring per local rank, then a ring of the gathered blocks "
     "inside each host (several hosts with as many ranks each)", NULL},
    {COLL_BROADCAST, "tree", coll_broadcast_tree, coll_broadcast_tree_cost,
     "binomial tree, chunk-pipelined (small messages)", NULL},
    {COLL_BROADCAST, "chain", coll_broadcast_chain, coll_broadcast_chain_cost,
     "pipelined chain from the root (large messages)", NULL},
    {COLL_BROADCAST, "scatter_allgather", coll_broadcast_scatter_allgather, coll_broadcast_scatter_allgather_cost,
     "scatter from the root + ring all-gather (large messages, many ranks)", coll_peers_all},
    {COLL_REDUCE_SCATTER, "ring", coll_reduce_scatter_ring, coll_reduce_scatter_ring_cost, "pipelined ring", NULL},
    {COLL_REDUCE_SCATTER, "tree", coll_reduce_scatter_tree, coll_reduce_scatter_tree_cost,
     "binomial-tree reduce to rank 0, then scatter (small blocks)", coll_peers_all},
    {COLL_REDUCE_SCATTER, "halving", coll_reduce_scatter_halving, coll_reduce_scatter_halving_cost,
     "recursive halving, log2 rounds (small blocks)", NULL},
    {COLL_REDUCE_SCATTER, "hierarchical", coll_reduce_scatter_hier, coll_reduce_scatter_hier_cost,
     "a ring of block groups inside each host, then one network ring per "
     "local rank (several hosts with as many ranks each)", NULL},
    {COLL_REDUCE, "chain", coll_reduce_chain, coll_reduce_chain_cost,
     "pipelined chain toward the root", NULL},
    {COLL_REDUCE, "tree", coll_reduce_tree, coll_reduce_tree_cost,
     "binomial tree toward the root, chunk-pipelined (small messages)", NULL},
    {COLL_BARRIER, "dissemination", coll_barrier_dissemination, NULL,
     "dissemination, ceil(log2 n) rounds", NULL},
    {COLL_SEND, "direct", coll_send_direct, NULL, "chunked through the slots", NULL},
    {COLL_RECV, "direct", coll_recv_direct, NULL, "chunked through the slots", NULL},
    {COLL_ALLTOALL, "pairwise", coll_alltoall_pairwise, coll_alltoall_pairwise_cost,
     "n - 1 exchanges with ranks r + k / r - k, all posted at once "
     "(large blocks, or ranks outnumbering cores)", coll_peers_all},
    {COLL_ALLTOALL, "bruck", coll_alltoall_bruck, coll_alltoall_bruck_cost,
     "Bruck, ceil(log2 n) exchanges of about n / 2 blocks (small blocks, "
     "many ranks)", NULL},
    {COLL_ALLTOALL, "hierarchical", coll_alltoall_hier, coll_alltoall_hier_cost,
     "several hosts: pairwise inside each host by local position, then one "
     "network message of L blocks per host pair and position (small blocks "
     "across hosts)", coll_alltoall_hier_peers},
    {COLL_ALLTOALLV, "pairwise", coll_alltoallv_pairwise, NULL,
     "n - 1 exchanges with ranks r + k / r - k, all posted at once", coll_peers_all},
    {COLL_GATHER, "binomial", coll_gather_binomial, coll_gather_binomial_cost,
     "binomial tree toward the root, subtrees gathered in order (small "
     "blocks)", NULL},
    {COLL_GATHER, "direct", coll_gather_direct, coll_gather_direct_cost,
     "every rank sends to the root (large blocks)", coll_peers_all},
    {COLL_SCATTER, "binomial", coll_scatter_binomial, coll_gather_binomial_cost,
     "binomial tree from the root, each child gets its subtree (small "
     "blocks)", NULL},
    {COLL_SCATTER, "direct", coll_scatter_direct, coll_gather_direct_cost,
     "the root sends each rank its block (large blocks)", coll_peers_all},
#define AREA_DOC                                                           \
    "one round through the shared area: inputs and flags in shared "       \
    "memory, no messages (every rank on one host over shm; inputs up to "  \
    "RCOLL_SHM_AREA_MAX, broadcast 4x that; chosen before the tuner)"
    /* (RCOLL_ALGO=coll:shared: where the call fits; elsewhere the tuner's
     * choice) */
    {COLL_ALLREDUCE, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {COLL_ALLGATHER, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {COLL_BROADCAST, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {COLL_REDUCE_SCATTER, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {COLL_REDUCE, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {COLL_BARRIER, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {COLL_ALLTOALL, "shared", coll_area_build, NULL, AREA_DOC, NULL},
    {0, NULL, NULL, NULL, NULL, NULL},
};

/* The algorithm RCOLL_ALGO names for this collective, or NULL. */
static const coll_algo_t *forced_parse(coll_kind_t kind)
{
    const char *spec = rcoll_config.algo;
    const char *kname = coll_kind_name(kind);
    size_t kl = strlen(kname);
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        if (len > kl && !strncmp(spec, kname, kl) && spec[kl] == ':') {
            for (const coll_algo_t *a = coll_algos; a->name; a++)
                if (a->kind == kind && strlen(a->name) == len - kl - 1 &&
                    !strncmp(a->name, spec + kl + 1, len - kl - 1))
                    return a;
        }
        spec = end ? end + 1 : NULL;
    }
    return NULL;
}

/* RCOLL_ALGO is read once (rcoll_config_init): so is its table */
static const coll_algo_t *forced_tab[COLL_KIND_MAX + 1];
static pthread_once_t forced_once = PTHREAD_ONCE_INIT;
static void forced_init(void)
{
    for (int k = 1; k <= COLL_KIND_MAX; k++)
        forced_tab[k] = forced_parse((coll_kind_t)k);
}
static const coll_algo_t *forced(coll_kind_t kind)
{
    pthread_once(&forced_once, forced_init);
    return (unsigned)kind <= COLL_KIND_MAX ? forced_tab[kind] : NULL;
}

int coll_area_wants(const coll_sched_t *s, const coll_env_t *env)
{
    if (!env->area)
        return 0;
    const coll_algo_t *f = forced(s->kind);
    return (!f || f->build == coll_area_build) && coll_area_fits(s, env);
}

/* The cheapest algorithm for this call by the cost model (coll/tuner.c),
 * and the chunk size to pipeline it with. */
const coll_algo_t *coll_tune(const coll_sched_t *s, const coll_env_t *e,
                             size_t *chunk)
{
    const coll_algo_t *best = NULL;
    double best_t = 0;
    size_t best_c = e->chunk_size;
    /* too few descriptors for every peer: the algorithms that talk to
     * more peers than there is room for are left out (unless nothing else
     * is left) */
    int tight = e->peer_room > 0;
again:
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        /* the area is chosen before (coll_sched_build) */
        if (a->kind != s->kind || a->build == coll_area_build ||
            (tight && a->npeers && a->npeers(e) > e->peer_room))
            continue;
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
    if (!best && tight) {
        tight = 0;
        goto again;
    }
    if (chunk)
        *chunk = best_c;
    return best;
}

rcoll_status_t coll_sched_build(coll_sched_t *s, const coll_env_t *env)
{
    const coll_algo_t *a = forced(s->kind);
    /* the shared area before the tuner (which knows no area); forced, it
     * runs where it fits and the tuner picks elsewhere */
    if ((!a || a->build == coll_area_build) && env->area &&
        coll_area_fits(s, env))
        return coll_area_start(s, env);
    if (a && a->build == coll_area_build)
        a = NULL;
    size_t chunk = env->chunk_size;
    coll_tune_cache_t *tc = env->tune_cache && s->kind < COLL_TUNE_CACHE_N &&
                                    s->kind != COLL_ALLTOALLV
                                ? &env->tune_cache[s->kind]
                                : NULL;
    if (a) {
        coll_tune_cost(a, s, env, &chunk); /* its chunk size, all the same */
    } else if (tc && tc->valid && tc->count == s->count &&
               tc->dt == (int)s->dt) {
        a = tc->algo; /* the same call as last time: the same answer */
        chunk = tc->chunk;
    } else {
        a = coll_tune(s, env, &chunk);
        if (tc && a) {
            tc->valid = 1;
            tc->count = s->count;
            tc->dt = (int)s->dt;
            tc->algo = a;
            tc->chunk = chunk;
        }
    }
    if (!a)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "no algorithm for %s",
                                coll_kind_name(s->kind));
    int nchan = coll_sched_channels(s, env, a);
    if (nchan > 1)
        return coll_sched_build_channels(s, env, a, chunk, nchan);
    return coll_sched_build_algo(s, env, a, chunk);
}

/* ---- channels ---- */

/* The algorithms whose data splits into independent contiguous parts,
 * each a ring (or chain) of its own */
static int chan_capable(const coll_algo_t *a)
{
    return a->build == coll_allreduce_ring ||
           a->build == coll_allgather_ring ||
           a->build == coll_reduce_scatter_ring ||
           a->build == coll_broadcast_chain;
}

/* The tuner's rule: where a host's ranks use several NICs between them
 * (ib, a device per rank: transport host_nics) and hosts have at least as
 * many ranks each (contiguous in the ring order), as many channels as
 * NICs, from COLL_CHAN_MIN bytes a channel; each channel's ring enters and
 * leaves a host through other ranks (rcoll_topo_chan_ring), so every NIC
 * sends and receives. Where every rank uses the same NICs (TCP's rails
 * carry every socket's lanes already) channels only add messages
 * (docs/design.md, Channels). */
#define COLL_CHAN_MIN ((size_t)1 << 20)

int coll_sched_channels(const coll_sched_t *s, const coll_env_t *e,
                        const coll_algo_t *a)
{
    int c = rcoll_config.nchannels;
    if (!chan_capable(a) || e->nranks < 2 || e->nchan_rings < 2)
        return 1;
    if (!c) {
        size_t bytes = s->count * rcoll_datatype_size(s->dt);
        if (s->kind == COLL_ALLGATHER || s->kind == COLL_REDUCE_SCATTER)
            bytes *= (size_t)e->nranks;
        c = RCOLL_MIN(e->host_nics, e->host_min);
        if (e->nhosts < 2 || c < 2 || bytes < (size_t)c * COLL_CHAN_MIN)
            c = 1;
    }
    c = RCOLL_MIN(c, e->nchan_rings);
    if ((size_t)c > s->count)
        c = (int)s->count; /* every part at least one element */
    return RCOLL_MAX(c, 1);
}

rcoll_status_t coll_sched_build_channels(coll_sched_t *s,
                                         const coll_env_t *env,
                                         const coll_algo_t *a, size_t chunk,
                                         int nchan)
{
    size_t dts = rcoll_datatype_size(s->dt);
    int per_rank = s->kind == COLL_ALLGATHER ||
                   s->kind == COLL_REDUCE_SCATTER;
    s->algo = a->name;
    s->md = env->md;
    s->chunk = RCOLL_MAX(dts, (RCOLL_MIN(chunk, env->chunk_size) / dts) * dts);
    if (!(s->chan = calloc((size_t)nchan, sizeof(*s->chan))))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory for %d "
                                "channels", coll_kind_name(s->kind), nchan);
    s->nchan = nchan;
    s->chan_left = (1u << nchan) - 1;
    rcoll_debug(RCOLL_SUBSYS_TUNE, "%s #%llu count %zu %s: %d channels of "
                "%s", coll_kind_name(s->kind), (unsigned long long)s->seq,
                s->count, rcoll_datatype_name(s->dt), nchan, a->name);
    for (int c = 0; c < nchan; c++) {
        coll_sched_t *x = &s->chan[c];
        size_t off, len;
        coll_block(s->count, nchan, c, &off, &len);
        x->kind = s->kind;
        x->dt = s->dt;
        x->op = s->op;
        x->root = s->root;
        x->seq = s->seq | (uint64_t)(c + 1) << COLL_SEQ_CHAN_SHIFT;
        x->count = len;
        x->sendbuf = s->sendbuf ? (const char *)s->sendbuf + off * dts
                                : NULL;
        x->recvbuf = s->recvbuf ? (char *)s->recvbuf + off * dts : NULL;
        if (per_rank)
            x->stride = s->stride ? s->stride : s->count;
        x->waiting_peer = -1;
        coll_env_t ec;
        coll_chan_env(env, c, &ec);
        rcoll_status_t st = coll_sched_build_algo(x, &ec, a, chunk);
        if (st != RCOLL_OK)
            return st; /* (the parts are freed with s) */
    }
    return RCOLL_OK;
}

rcoll_status_t coll_sched_build_algo(coll_sched_t *s, const coll_env_t *env,
                                     const coll_algo_t *a, size_t chunk)
{
    size_t dts = rcoll_datatype_size(s->dt);
    s->algo = a->name;
    if (chunk > env->chunk_size || chunk < dts)
        chunk = env->chunk_size;
    s->chunk = (chunk / dts) * dts;
    s->md = env->md;
    s->reduce = s->md->reduce_get(s->dt, s->op);
    rcoll_debug(RCOLL_SUBSYS_TUNE, "%s #%llu%s count %zu %s, %d ranks (%d "
                "on this host), %s: algorithm %s%s, chunk %zu",
                coll_kind_name(s->kind), coll_seq_num(s->seq),
                s->seq >> COLL_SEQ_CHAN_SHIFT ? " (a channel's part)" : "",
                s->count,
                rcoll_datatype_name(s->dt), env->nranks, env->local_size,
                env->link_name ? env->link_name : "-", a->name,
                forced(s->kind) ? " (RCOLL_ALGO)" : "", s->chunk);
    return a->build(s, env);
}

/* Validates RCOLL_ALGO once at init: every entry must name a real pair. */
rcoll_status_t coll_algo_check_config(void)
{
    const char *spec = rcoll_config.algo;
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        int ok = 0;
        for (const coll_algo_t *a = coll_algos; a->name && !ok; a++) {
            char buf[128];
            snprintf(buf, sizeof(buf), "%s:%s", coll_kind_name(a->kind),
                     a->name);
            ok = strlen(buf) == len && !strncmp(buf, spec, len);
        }
        if (!ok)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "RCOLL_ALGO: unknown entry \"%.*s\" "
                                    "(rcoll-info -a lists collective:algorithm "
                                    "pairs)", (int)len, spec);
        spec = end ? end + 1 : NULL;
    }
    return RCOLL_OK;
}
