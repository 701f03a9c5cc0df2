/* A collective expands into a schedule: a list of steps, each with at most
 * one send and one receive of a contiguous byte range, cut into chunks of
 * the transport's slot size. The executor streams chunks: sends go out in
 * (step, chunk) order, receives complete in (step, chunk) order, and a send
 * may wait for the same chunk of an earlier step's receive (send_dep), which
 * pipelines rings and chains. Algorithms only build steps; they never see a
 * transport.
 *
 * Every operation in flight has its own schedule and cursors, and all of
 * them progress together (coll/match.c matches each arriving message to
 * the operation it names). Copies and reductions go through the memory
 * domain's table (coll_md_t), never memcpy or a CPU kernel directly. */
#ifndef RCOLL_SCHED_H
#define RCOLL_SCHED_H

#include "transport/transport.h"
#include "reduce/reduce.h"
#include "util/params.h"
#include <string.h>

typedef enum {
    COLL_ALLREDUCE = 1, COLL_ALLGATHER, COLL_BROADCAST, COLL_REDUCE_SCATTER,
    COLL_REDUCE, COLL_BARRIER, COLL_SEND, COLL_RECV, COLL_ALLTOALL,
    COLL_ALLTOALLV, COLL_GATHER, COLL_SCATTER
} coll_kind_t;
#define COLL_KIND_MAX COLL_SCATTER

/* A message's class (bits 24-30 of the header's kind word): what its seq
 * names. */
enum {
    COLL_MSG_COLL = 0, /* a collective's chunk; seq: the collective */
    COLL_MSG_P2P = 1,  /* point-to-point data; seq: the message number */
    COLL_MSG_RTS = 2,  /* a large send's announcement (rendezvous) */
    COLL_MSG_CTS = 3   /* the receiver is ready for it (to the sender) */
};
#define COLL_MSG_CLASS(kind) (((kind) >> 24) & 0x7fu)
_Static_assert(COLL_MSG_CTS < RCOLL_TL_CLASS,
               "the transports' message class is theirs alone");

/* What the receive path asks of a memory domain for one message: dst =
 * src (COPY), dst = local op src (REDUCE, with fn from reduce_get), or
 * AVG's last step (dst = (local + src) / nranks). */
typedef struct {
    enum { COLL_MD_COPY, COLL_MD_REDUCE, COLL_MD_AVG } kind;
    void *dst;
    const void *local;
    const void *src;
    size_t bytes;
    rcoll_datatype_t dt;
    rcoll_reduce_fn_t fn;
    int nranks;
} coll_md_op_t;

/* A memory domain's copy and reduction table (host memory today; GPU
 * memory adds its own without touching the algorithms). copy and the
 * reductions complete on return. */
typedef struct coll_md {
    const char *name;
    void (*copy)(void *dst, const void *src, size_t bytes);
    rcoll_reduce_fn_t (*reduce_get)(rcoll_datatype_t dt, rcoll_op_t op);
    void (*reduce_avg_final)(rcoll_datatype_t dt, void *dst, const void *a,
                             const void *b, size_t count, int nranks);
    void (*reduce_avg_scale)(rcoll_datatype_t dt, void *dst, const void *src,
                             size_t count, int nranks);
    /* Optional: operations that complete later (a GPU's copy engines and
     * kernels on a stream). post queues op and returns its ticket, or 0
     * if it completed already; test(t) is 1 once ticket t has completed
     * (tickets complete in posting order); quiesce waits for all. The
     * executor posts each received message's copy or reduction and holds
     * the message (its slot: the source) until its ticket completes; only
     * then does the chunk count as received, so a send that forwards it
     * waits. ctx_create gives the communicator its context (its queue,
     * stream...), passed to the other three. */
    void *(*ctx_create)(void);
    void (*ctx_destroy)(void *ctx);
    uint64_t (*post)(void *ctx, const coll_md_op_t *op);
    int (*test)(void *ctx, uint64_t ticket);
    void (*quiesce)(void *ctx);
} coll_md_t;
extern const coll_md_t coll_md_host;
/* The host domain with its receive-path operations deferred: each runs
 * only when a test finds it at the head of its queue, one per test
 * (RCOLL_FAULT=md_deferred: proves the executor's asynchronous path). */
extern const coll_md_t coll_md_host_deferred;

typedef enum {
    RECV_COPY = 0,     /* dst = incoming */
    RECV_REDUCE,       /* dst = local op incoming */
    RECV_REDUCE_AVG,   /* dst = (local + incoming) / nranks: AVG's last step */
    RECV_DISCARD       /* only the arrival matters (barrier) */
} recv_mode_t;

struct coll_sched;
struct coll_env;
struct coll_algo;
typedef struct coll_area coll_area_t; /* coll/area.c */
typedef struct coll_umsg coll_umsg_t; /* coll/match.c */

typedef struct {
    int send_peer;          /* -1: no send in this step */
    const char *send_buf;
    size_t send_bytes;
    int send_dep;           /* step whose receive of chunk c must finish
                               before chunk c is sent; -1 none */
    int send_dep_all;       /* 1: wait for all of send_dep's chunks instead;
                               2: for every receive of steps 0..send_dep
                               (a phase boundary, even when that step
                               receives nothing) */
    int send_copy;          /* the peer only copies what this step sends
                               (a hint: shm then lets it read our buffer) */
    unsigned char send_free; /* the send waits on nothing but send_dep,
                               and on no earlier step by step order:
                               blocked on its receive, a send_free step
                               holds later send_free steps only to the
                               same peer (every later step not so marked
                               still waits; sched_send) */
    unsigned char send_class, recv_class; /* COLL_MSG_*: 0 for collectives */
    unsigned char send_always, recv_always; /* one message even when the
                               step moves no bytes (control messages) */
    /* run once before the step's first chunk leaves (its send_dep is met
     * by then): a local pack, e.g. Bruck's; NULL: none */
    void (*pre_send)(struct coll_sched *s, const struct coll_env *e,
                     int step);
    int recv_peer;          /* -1: no receive */
    char *recv_dst;
    const char *recv_local; /* RECV_REDUCE*: the local operand */
    size_t recv_bytes;
    recv_mode_t recv_mode;
    /* RECV_COPY into memory that nothing else in the operation reads or
     * writes, so the transport may land the data there as it arrives,
     * before the step's turn (a receive in place: tl recv_place) */
    unsigned char recv_place;
    unsigned char placed;   /* execution: registered with the transport */
} coll_step_t;
/* Receives in place are posted from this many bytes (smaller ones cost
 * less to copy than to post) */
#define COLL_PLACE_MIN ((size_t)64 << 10)

/* The smallest chunk the tuner cuts a transfer into to spread it over
 * several rails (coll_env_t.paths): below it a message's fixed costs
 * outweigh a second link's bandwidth. */
#define COLL_PATH_CHUNK_MIN ((size_t)64 << 10)

/* Where the ranks' partners are, for the tuner and the log-step
 * algorithms (coll_locality_init; the same on every rank). A host's NICs
 * are shared by its ranks whose partner in a step is on another host: the
 * most such ranks on one host, for each kind of step. 0 everywhere on one
 * host; valid 0: unknown (the model then charges every step as one flow
 * over the network). */
#define COLL_LOC_BITS 32
typedef struct coll_locality {
    int valid;
    int xq[COLL_LOC_BITS]; /* partner r ^ 2^k (the ranks that have one) */
    int sq[COLL_LOC_BITS]; /* partner (r + 2^k) mod n */
    int ringq;             /* ring successor (the ring order) */
    int allq;              /* partners on other hosts when everyone talks
                              to everyone: the most ranks on one host, if
                              there are several hosts, else 0 */
} coll_locality_t;
/* 0, or -1 out of memory (loc then invalid: the caller must fail, as
 * every rank must agree on it) */
int coll_locality_init(coll_locality_t *loc, int n, const int *host,
                       int nhosts, const int *ring);

/* What a schedule needs to know of its communicator. */
typedef struct coll_env {
    int rank;
    int nranks;
    size_t chunk_size;
    const rcoll_tl_ops_t *const *tls;  /* by peer: the transport it uses */
    rcoll_tl_ep_t **eps;
    const rcoll_boot_peer_t *peers;
    /* for the tuner (coll/tuner.c): the slowest link in use, the ranks on
     * this host and its cores */
    rcoll_link_model_t link;
    const char *link_name;
    int local_size;
    int ncores;
    /* placement (core/comm.c): the ring order, position -> rank and rank
     * -> position (NULL: rank order). With RCOLL_RING_ORDER=topo each
     * host's ranks are contiguous in it; rings and chains follow it. */
    const int *ring;
    const int *ring_pos;
    int nhosts;             /* distinct hosts */
    int host_size;          /* ranks per host when every host has as many
                               (then host h's ranks are ring positions
                               h * host_size ...), else 0 */
    rcoll_link_model_t link_local; /* the link between ranks of one host */
    int host_nics;          /* the most NICs one host's ranks use between
                               them (transport host_nics), >= 1 */
    int paths;              /* network paths (rails) per peer pair, >= 1:
                               the transports' paths(), the same on every
                               rank */
    coll_locality_t loc;    /* partners across hosts, per kind of step */
    /* channels (coll_sched_build_channels): channel c's ring order and
     * positions, c < nchan_rings (chan_ring[0] is ring); 0: none */
    int nchan_rings;
    int host_min;           /* ranks of the smallest host's run in the
                               ring order (1 when hosts interleave) */
    const int *chan_ring[8];
    const int *chan_pos[8];
    int peer_room;          /* peers every rank can connect to on first
                               use over a transport whose lanes hold
                               descriptors (the fewest of any rank); 0: no
                               bound */
    /* the tuner's last answer per collective (the engine is driven by one
     * thread at a time, so no lock); NULL: no caching */
    struct coll_tune_cache *tune_cache;
    const coll_md_t *md;    /* copies and reductions */
    void *md_ctx;           /* its context (md->ctx_create), or NULL */
    struct coll_match *match; /* messages that arrived before their
                               operation wanted them (coll/match.c) */
    size_t p2p_eager;       /* point-to-point: larger sends rendezvous */
    coll_area_t *area;      /* every rank on this host over shared memory:
                               the shared area (coll/area.c); else NULL */
} coll_env_t;

typedef struct coll_tune_cache {
    size_t count;
    int dt;
    int valid;
    const struct coll_algo *algo;
    size_t chunk;
} coll_tune_cache_t;
#define COLL_TUNE_CACHE_N 16

typedef struct coll_sched {
    /* the call */
    coll_kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    rcoll_datatype_t dt;
    rcoll_op_t op;
    int root;               /* root, or peer for send/recv */
    int tag;                /* send/recv: the tag (>= 0) */
    uint64_t seq;           /* collectives: the number every rank agrees on;
                               send: this message's number to the peer */
    int p2p_matched;        /* recv: seq is the matched message's number */
    size_t p2p_cap;         /* recv, once matched: the count posted (count
                               is then the message's) */
    int p2p_trunc;          /* recv: the message is longer than p2p_cap */
    /* recv: the first message it matched (class, tag and order right)
     * rebuilds the rest of it (p2p_direct.c) */
    rcoll_status_t (*matched)(struct coll_sched *s,
                              const struct coll_env *e,
                              const rcoll_msg_hdr_t *h);
    struct coll_match *match; /* recv: registered there until matched */
    size_t stride;          /* all-gather, reduce-scatter: elements from
                               one rank's block to the next in the
                               rank-indexed buffer; 0: count */
    /* channels: the parts of a call split into nchan operations, each on
     * its own ring (coll_sched_build_channels); the parent has no steps
     * and progresses its parts, chan_left the bits of those not done */
    struct coll_sched *chan;
    int nchan;
    unsigned chan_left;
    /* all-to-all(v): counts and displacements in elements, by rank (owned
     * copies: send counts, send displacements, receive counts, receive
     * displacements, n each) */
    size_t *v;
    const char *algo;
    /* the plan */
    coll_step_t *steps;
    int nsteps, cap;
    size_t chunk;           /* bytes per chunk, a multiple of the type size */
    char *scratch;          /* owned temporary */
    /* execution */
    int s_step, s_chunk;    /* the first step with sends left, and its
                               next chunk (later steps may be further on:
                               per-peer cursors, sched.c) */
    int pre_sent;           /* steps whose pre_send hook ran */
    int r_step, r_chunk;    /* the first step with receives left, and its
                               next chunk */
    int *recv_done;         /* per step: chunks received */
    int *sent;              /* per step: chunks sent */
    int *spx, *rpx;         /* per step: its send's and its receive's
                               peer as a dense index (sched_peer_index) */
    int *pmark;             /* per peer index: the pass that marked it (a
                               step to or from it is behind: later ones
                               wait) */
    int nspeers, nrpeers;   /* distinct peers it sends to, receives from
                               (a pass ends once it has marked them all) */
    unsigned pass;          /* sched_send / recv_ahead passes */
    int in_order;           /* sends strictly in step order (an algorithm
                               with pre_send hooks packs as it goes) */
    int *ord;               /* per step: the send's and the receive's
                               ordinal among this operation's transfers
                               to / from that peer (2 per step) */
    int state_small[6 * 8 + 3 * 16]; /* the state of up to 8 steps
                               and 16 peers (no allocation for small
                               collectives) */
#define COLL_SCHED_SMALL_STEPS 4
    coll_step_t steps_small[COLL_SCHED_SMALL_STEPS]; /* steps, while they
                               fit (no allocation for small collectives) */
    int sends_inflight;
    int nplaced;            /* steps posted in place (coll_sched_unplace) */
    /* received messages whose copy or reduction the memory domain has not
     * finished (md->post): held until it has (coll_sched_md_drain) */
#define COLL_MD_PEND 8
    struct {
        int step, nch, peer;
        coll_umsg_t *u;
        uint64_t ticket;
    } md_pend[COLL_MD_PEND];
    int md_npending;
    int waiting_peer;       /* for diagnostics */
    const char *waiting_for;
    const coll_md_t *md;
    rcoll_reduce_fn_t reduce;
    char *bounce;           /* for reducing data that a transport left
                               in the sender's memory */
    size_t bounce_len;
    /* run once when every step is done (e.g. a final local copy) */
    void (*finish)(struct coll_sched *s, const coll_env_t *e);
    /* through the shared area (coll/area.c) instead of steps */
    int area;
    int aphase;             /* 0 publish, 1 consume, 2 finish */
    int anext;              /* the next rank to look at */
    uint64_t aseq;          /* the area's operation number */
    uint64_t aneed;         /* its line and buffer are free once every
                               rank has finished this operation */
    size_t ain;             /* bytes of input a rank publishes */
    size_t adoff;           /* its input's offset in the data space;
                               SIZE_MAX: in its line */
} coll_sched_t;

rcoll_status_t coll_sched_add(coll_sched_t *s, const coll_step_t *step);
void coll_sched_step_init(coll_step_t *st);
/* Runs what can run now. RCOLL_OK: finished; RCOLL_INPROGRESS: not yet;
 * an error (message set) otherwise. *progressed is set if anything moved. */
rcoll_status_t coll_sched_progress(coll_sched_t *s, const coll_env_t *env,
                                   int *progressed);
void coll_sched_send_done(coll_sched_t *s);
/* Ends the receives in place still posted (a failed or cancelled
 * operation's): before the request completes, while the transports live. */
void coll_sched_unplace(coll_sched_t *s, const coll_env_t *e);
/* Waits for the memory domain's operations on s's received messages and
 * releases those messages (before a failed operation's buffers go back). */
void coll_sched_md_drain(coll_sched_t *s, const coll_env_t *e);
void coll_sched_free(coll_sched_t *s);
/* sched_err.c: a received message that belongs to another call or count
 * (RCOLL_ERR_MISMATCH), failed its checksum (RCOLL_ERR_CORRUPT), a failed
 * peer (dir: "sending to", "receiving from"), a receive whose message was
 * longer than its buffer (RCOLL_ERR_TRUNCATED); each sets the message */
rcoll_status_t coll_sched_mismatch(const coll_sched_t *s,
                                   const coll_env_t *e, int peer,
                                   const rcoll_msg_hdr_t *h,
                                   size_t expect_len);
rcoll_status_t coll_sched_corrupt(const coll_sched_t *s, const coll_env_t *e,
                                  int peer, const rcoll_msg_hdr_t *h,
                                  uint32_t got);
rcoll_status_t coll_sched_peer_error(const coll_sched_t *s,
                                     const coll_env_t *e, rcoll_status_t st,
                                     int peer, const char *dir);
rcoll_status_t coll_sched_truncated(const coll_sched_t *s,
                                    const coll_env_t *e);
const char *coll_kind_name(coll_kind_t k);

/* Channels: at most this many parts of a call, each on its own ring. A
 * part's messages carry the call's number with its channel + 1 in the top
 * bits (the count of collectives never gets there). */
#define COLL_CHAN_MAX 8
#define COLL_SEQ_CHAN_SHIFT 56
static inline unsigned long long coll_seq_num(uint64_t seq)
{
    return (unsigned long long)(seq & ((1ull << COLL_SEQ_CHAN_SHIFT) - 1));
}
/* The number of channels for this call by algorithm a (1: none):
 * RCOLL_NCHANNELS, else the tuner's rule (coll/select.c). */
int coll_sched_channels(const coll_sched_t *s, const coll_env_t *env,
                        const struct coll_algo *a);
/* Splits the call into nchan parts, each built with a on its channel's
 * ring (env->chan_ring) */
rcoll_status_t coll_sched_build_channels(coll_sched_t *s,
                                         const coll_env_t *env,
                                         const struct coll_algo *a,
                                         size_t chunk, int nchan);
/* Channel c's view of the communicator: env with that channel's ring */
static inline void coll_chan_env(const coll_env_t *e, int c, coll_env_t *out)
{
    *out = *e;
    if (c > 0 && c < e->nchan_rings) {
        out->ring = e->chan_ring[c];
        out->ring_pos = e->chan_pos[c];
    }
}
/* The operations an operation s (or its parts) still has posted with the
 * transports: sends not done, receives in place, memory-domain work */
int coll_sched_busy(const coll_sched_t *s);
/* s itself, or its i-th part (i < coll_sched_nparts(s)) */
static inline int coll_sched_nparts(const coll_sched_t *s)
{
    return s->nchan ? s->nchan : 1;
}
static inline coll_sched_t *coll_sched_part(coll_sched_t *s, int i)
{
    return s->nchan ? &s->chan[i] : s;
}

/* The rank at ring position pos (taken mod nranks) and a rank's position. */
static inline int coll_ring_rank(const coll_env_t *e, int pos)
{
    pos = (pos % e->nranks + e->nranks) % e->nranks;
    return e->ring ? e->ring[pos] : pos;
}
static inline int coll_ring_pos(const coll_env_t *e, int rank)
{
    return e->ring_pos ? e->ring_pos[rank] : rank;
}

/* sendbuf -> recvbuf when not in place (count elements): the whole job of
 * a one-rank all-reduce, reduce or broadcast root. */
static inline void coll_copy_in(coll_sched_t *s)
{
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    if (bytes && s->sendbuf != s->recvbuf)
        s->md->copy(s->recvbuf, s->sendbuf, bytes);
}

/* Block b of n over count elements: offset and length in elements. */
static inline void coll_block(size_t count, int n, int b, size_t *off,
                              size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    size_t ub = (size_t)b;
    *off = ub * base + (ub < rem ? ub : rem);
    *len = base + (ub < rem ? 1 : 0);
}

/* Position v's place in a binomial tree of n rooted at 0: its children are
 * v + m for m = 1, 2, 4, ... below *lowbit (the lowest set bit of v, or
 * the first power of two >= n for the root) while v + m < n; its parent
 * is v - *lowbit. Returns the number of children. */
static inline int coll_binomial(int v, int n, int *lowbit)
{
    int nchild = 0, lb = 1;
    while (lb < n && !(v & lb)) {
        if (v + lb < n)
            nchild++;
        lb <<= 1;
    }
    *lowbit = lb;
    return nchild;
}

/* The receive half of a binomial reduce toward position 0 (rank `root`):
 * position v reduces each child's `bytes` into acc, the first with `local`
 * as its own operand, AVG dividing at position 0's last child. *last gets
 * the last receive step (-1: a leaf). Used by the reduce and
 * reduce-scatter trees. */
rcoll_status_t coll_binomial_reduce_recvs(coll_sched_t *s, int v, int n,
                                          int root, const char *local,
                                          char *acc, size_t bytes,
                                          int *last);

/* ---- algorithms: each fills the schedule's steps ---- */
typedef rcoll_status_t (*coll_algo_fn_t)(coll_sched_t *s, const coll_env_t *e);
/* The tuner's model of a call (coll/tune.h) */
typedef struct coll_tune_model coll_tune_model_t;
/* An algorithm's estimated time for a call (seconds); *chunk comes in as
 * the slot size and may be set to the chunk it pipelines with. */
typedef double (*coll_cost_fn_t)(const coll_tune_model_t *m,
                                 const coll_env_t *e, double *chunk);
typedef struct coll_algo {
    coll_kind_t kind;
    const char *name;
    coll_algo_fn_t build;
    coll_cost_fn_t cost;    /* NULL: costs nothing (the only one of its
                               kind, or chosen before the tuner) */
    const char *doc;
    /* the most distinct peers one rank talks to; NULL: at most
     * COLL_PEERS_LOG(n) (the ring and log-step algorithms). The tuner
     * leaves out an algorithm that needs more than coll_env_t.peer_room */
    int (*npeers)(const struct coll_env *e);
} coll_algo_t;
#define COLL_PEERS_LOG(n) (2 * coll_log2ceil(n) + 2)
static inline int coll_log2ceil(int n)
{
    int l = 0;
    while ((1L << l) < n)
        l++;
    return l;
}
/* npeers: every other rank (or the root to every rank) */
int coll_peers_all(const struct coll_env *e);
/* npeers of the hierarchical all-to-all: the ranks of its host and one
 * of every other host */
int coll_alltoall_hier_peers(const struct coll_env *e);

extern const coll_algo_t coll_algos[];
/* Picks the algorithm for this call (RCOLL_ALGO overrides), builds it. */
rcoll_status_t coll_sched_build(coll_sched_t *s, const coll_env_t *env);
/* Builds the call with algorithm a and chunk size chunk (coll_sched_build
 * after its choice; tests/test_protocol.c runs every algorithm so). */
rcoll_status_t coll_sched_build_algo(coll_sched_t *s, const coll_env_t *env,
                                     const coll_algo_t *a, size_t chunk);
/* The tuner: the cheapest algorithm for this call by the cost model and
 * the chunk size to pipeline it with (coll/tuner.c). */
const coll_algo_t *coll_tune(const coll_sched_t *s, const coll_env_t *env,
                             size_t *chunk);
/* The model's estimate for one algorithm (seconds), and its chunk size. */
double coll_tune_cost(const coll_algo_t *a, const coll_sched_t *s,
                      const coll_env_t *env, size_t *chunk);
rcoll_status_t coll_algo_check_config(void);
/* The halving bits k (partner r ^ 2^k) of Rabenseifner's all-reduce in
 * the order it runs them; returns how many (allreduce_rabenseifner.c) */
int coll_rabenseifner_order(const coll_env_t *e, int p, int *bit);
/* Where a halving in that order leaves rank v (< p): its bits in round
 * order, the first round's most significant; the identity for the
 * descending order. coll_halving_layout: po[j], the first block of
 * position j (po[p]: the end), when position P(v) holds group v, i.e.
 * blocks v and v + p (if < n). */
int coll_halving_pos(int v, const int *bit, int nb);
void coll_halving_layout(int n, int p, const int *bit, int nb, size_t *po);
/* s->scratch of total bytes with that layout after it (NULL and the error
 * set when out of memory); coll_halving_po finds the layout again */
size_t *coll_halving_scratch(coll_sched_t *s, size_t total, int n, int p,
                             const int *bit, int nb);
size_t *coll_halving_po(const coll_sched_t *s, size_t total);

rcoll_status_t coll_allreduce_ring(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allreduce_rd(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allreduce_dbtree(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allreduce_hier(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allgather_ring(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allgather_hier(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allgather_bruck(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allgather_rdb(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allreduce_flat(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_allreduce_rabenseifner(coll_sched_t *s,
                                           const coll_env_t *e);
rcoll_status_t coll_broadcast_scatter_allgather(coll_sched_t *s,
                                                const coll_env_t *e);
rcoll_status_t coll_reduce_tree(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_reduce_scatter_tree(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_broadcast_chain(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_broadcast_tree(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_reduce_scatter_ring(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_reduce_scatter_halving(coll_sched_t *s,
                                           const coll_env_t *e);
rcoll_status_t coll_reduce_scatter_hier(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_reduce_chain(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_barrier_dissemination(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_send_direct(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_recv_direct(coll_sched_t *s, const coll_env_t *e);
/* Starts the execution state over after the steps were rebuilt. */
rcoll_status_t coll_sched_restart(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_alltoall_pairwise(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_alltoall_hier(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_alltoall_bruck(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_alltoallv_pairwise(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_gather_direct(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_gather_binomial(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_scatter_direct(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_scatter_binomial(coll_sched_t *s, const coll_env_t *e);


/* the algorithms' cost functions (coll/tune.h) */
double coll_allreduce_ring_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_allreduce_dbtree_cost(const coll_tune_model_t *m,
                                  const coll_env_t *e, double *c);
double coll_allreduce_rd_cost(const coll_tune_model_t *m, const coll_env_t *e,
                              double *c);
double coll_allreduce_hier_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_allreduce_flat_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_allreduce_rabenseifner_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                        double *c);
double coll_allgather_ring_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_allgather_hier_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_allgather_bruck_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                 double *c);
double coll_allgather_rdb_cost(const coll_tune_model_t *m, const coll_env_t *e,
                               double *c);
double coll_broadcast_chain_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                 double *c);
double coll_broadcast_tree_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_broadcast_scatter_allgather_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                             double *c);
double coll_reduce_chain_cost(const coll_tune_model_t *m, const coll_env_t *e,
                              double *c);
double coll_reduce_tree_cost(const coll_tune_model_t *m, const coll_env_t *e,
                             double *c);
double coll_reduce_scatter_ring_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                     double *c);
double coll_reduce_scatter_hier_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                     double *c);
double coll_reduce_scatter_halving_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                        double *c);
double coll_reduce_scatter_tree_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                     double *c);
double coll_alltoall_bruck_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                double *c);
double coll_alltoall_hier_cost(const coll_tune_model_t *m, const coll_env_t *e,
                               double *c);
double coll_alltoall_pairwise_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                   double *c);
double coll_gather_binomial_cost(const coll_tune_model_t *m, const coll_env_t *e,
                                 double *c);
double coll_gather_direct_cost(const coll_tune_model_t *m, const coll_env_t *e,
                               double *c);

/* ---- the shared area (coll/area.c) ---- */
/* A rank's area is the shared region its transport gives it (transport op
 * region; params.region = COLL_AREA_LEN). Its length for a data space of
 * twice `data` bytes: the counters' line, COLL_AREA_NDESC slots of
 * COLL_AREA_SLOT bytes (operation k uses slot k mod NDESC: its
 * descriptor, and its input when that fits; so calls may run that far
 * ahead), then the data space. 64 slots: a broadcast root waits for its
 * readers once a lap, and with ranks sharing cores each wait costs a
 * core's hand-over; at 64 an 8-byte broadcast on 4 ranks of 2 cores takes
 * about half the time it does at 16, and more slots gain nothing. */
#define COLL_AREA_NDESC 64
#define COLL_AREA_SLOT 1024
#define COLL_AREA_LEN(data)                                                \
    (64 + COLL_AREA_SLOT * COLL_AREA_NDESC +                               \
     2 * (((size_t)(data) + 63) & ~(size_t)63))
/* The area's first cache line: the region's watch words (a change wakes
 * a rank asleep in the transport's wait()). */
typedef struct {
    uint64_t posted;    /* the last operation whose input is published */
    uint64_t done;      /* the last operation this rank has finished */
} coll_area_ctl_t;
/* params.region for RCOLL_SHM_AREA = data (0: no area) */
static inline size_t coll_area_region(size_t data)
{
    return data ? COLL_AREA_LEN(data) : 0;
}
/* The area of every rank of a communicator of n, through transport tl
 * (its region op), or NULL if some rank has none (then no rank uses
 * it). */
coll_area_t *coll_area_create(int rank, int n, const rcoll_tl_ops_t *tl,
                              rcoll_tl_ctx_t *ctx);
void coll_area_destroy(coll_area_t *a);
size_t coll_area_data(const coll_area_t *a); /* bytes per buffer */
/* Before the engine may sleep: wakes peers asleep since a publish (which
 * does not wake them itself, to keep a fence off the fast path). */
void coll_area_flush(coll_area_t *a);
/* 1 if this call can run through the area (its arguments alone decide,
 * alike on every rank) */
int coll_area_fits(const coll_sched_t *s, const coll_env_t *e);
/* 1 if coll_sched_build will run it through the area (fits, and
 * RCOLL_ALGO names no other algorithm) */
int coll_area_wants(const coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_area_build(coll_sched_t *s, const coll_env_t *e);
/* coll_sched_build's shortcut for a call that wants the area */
rcoll_status_t coll_area_start(coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_area_progress(coll_sched_t *s, const coll_env_t *e,
                                  int *progressed);

/* ---- matching (coll/match.c) ---- */
/* A message taken out of its transport's slot because the operation it
 * names did not want it yet while another waited behind it. */
struct coll_umsg {
    struct coll_umsg *next;
    rcoll_msg_hdr_t hdr;
    char data[];
};
/* The next message from `peer` for schedule s's receive step t: from the
 * messages set aside earlier, else from the transport, setting aside
 * (copying out) whatever comes first and belongs to another operation.
 * RCOLL_OK: *h, *payload (NULL: still in the sender's memory, fetch with
 * the transport's recv_copy) and *u (non-NULL: set aside) are valid until
 * coll_rx_release; RCOLL_INPROGRESS: not here yet; an error otherwise. */
/* A stalled engine sets aside what fills the slots of peers that may be
 * out of credits: how many messages. */
int coll_match_unblock(const coll_env_t *e);
rcoll_status_t coll_rx_get(coll_sched_t *s, const coll_step_t *t,
                           const coll_env_t *e, int peer,
                           const rcoll_msg_hdr_t **h, const void **payload,
                           coll_umsg_t **u);
void coll_rx_release(const coll_env_t *e, int peer, coll_umsg_t *u);
/* on: the head message of `peer` stays in its slot for an operation whose
 * memory domain still reads it (md->post): no other operation takes or
 * sets aside anything of that peer's until off. */
void coll_rx_hold(const coll_env_t *e, int peer, int on);
/* Point-to-point order (MPI's non-overtaking rule, coll/match.c).
 * may_start: 1 yes, 0 not yet, -1 no memory (error set). */
int coll_p2p_send_may_start(const coll_sched_t *s, const coll_env_t *e);
void coll_p2p_send_started(const coll_sched_t *s, const coll_env_t *e);
rcoll_status_t coll_p2p_recv_register(coll_sched_t *s, const coll_env_t *e);
void coll_p2p_recv_unregister(coll_sched_t *s);
/* The store for a communicator of n ranks; max: the bytes it may hold. */
struct coll_match *coll_match_create(int nranks, size_t max);
void coll_match_destroy(struct coll_match *m);
/* For rcoll_comm_dump: messages and bytes set aside now, and the peak. */
void coll_match_stats(const struct coll_match *m, size_t *msgs,
                      size_t *bytes, size_t *peak);

#endif
