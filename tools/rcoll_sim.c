/* rcoll-sim: the library's own schedule builders, tuner and executor
 * (coll/sched.c, coll/match.c) for thousands of simulated ranks in one
 * process and one thread, over a modelled network instead of transports.
 *
 *   rcoll-sim verify [options]       every algorithm at many rank counts,
 *                                    results checked element by element
 *   rcoll-sim estimate FILE COLL SIZE [--algo NAME]
 *                                    time and bytes per link of one call
 *                                    on the cluster FILE describes
 *
 * Each simulated rank has its own coll_env_t, schedule and matching state,
 * exactly as a communicator's rank does; its transport is a fake one whose
 * every endpoint is a (sender, receiver) pair with `slots` receive slots
 * and as many credits, one FIFO per direction. Time is an event queue:
 * a message crosses each resource on its path (the sender's and
 * receiver's ports inside a host; the host's NIC, the leaf switch's
 * uplink and downlink, the peer's NIC across hosts) in 64 KiB segments,
 * each served by one resource after the other, first come first served,
 * and arrives a latency later; a released slot's credit gets
 * back a latency later; a rank's copies and reductions advance its own
 * clock. A rank runs (coll_sched_progress) when something reached it;
 * events less than a quarter of the smallest latency apart are delivered
 * together (verify delivers all that are in flight at once: any order of
 * arrival is a legal one, and the check does not depend on it).
 *
 * verify: inputs are 64-bit fingerprints of (rank, element), reductions
 * are uint64 sums, so an output element that misses a contribution or
 * holds one twice differs from the reference computed here (with
 * probability 1 - 2^-64). It also fails a run in which nothing can move
 * while operations are unfinished (a deadlock in the step order), a
 * message that is never received, and a write past an output buffer;
 * it counts the runs that needed the engine's 100 ms unblock
 * (coll_match_unblock) to go on. --plant skip-block makes rank 1 of
 * every non-power-of-two run drop its first received block, to show that
 * the check catches it.
 *
 * estimate: no data moves (buffers are reserved, never touched; the
 * memory domain only counts); it prints the tuner's choice and each
 * algorithm's modelled and simulated time, bus bandwidth as nccl-tests
 * defines it, network bytes per rank, and the busiest resource. */
#include "../src/coll/sched.h"
#include "../src/util/params.h"
#include "../src/topo/topo.h"
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* ---- the cluster ---- */

typedef struct {
    int hosts, rph;          /* hosts, ranks per host (the last may hold
                                fewer) */
    int nics;                /* NICs (rails) per host */
    double nic_gbps;         /* each NIC, Gb/s */
    double nic_lat_us;       /* one network hop, end to end */
    double local_gbps;       /* a rank's port inside a host, GB/s */
    double local_lat_us;
    double send_us;          /* the sender's cost per message */
    int hosts_per_leaf;      /* hosts under one leaf switch (0: all) */
    double oversub;          /* leaf uplink oversubscription (>= 1) */
    double reduce_gbps;      /* a rank's reduction, GB/s of output */
    double copy_gbps;        /* a rank's copy, GB/s */
    int cores;               /* per host (the tuner's oversubscription) */
    int slots;               /* receive slots per direction */
    size_t chunk;            /* slot payload bytes */
    int cyclic;              /* rank r on host r mod hosts (else r / rph) */
} cluster_t;

static cluster_t cl = {
    .hosts = 1, .rph = 1, .nics = 1, .nic_gbps = 100, .nic_lat_us = 5,
    .local_gbps = 20, .local_lat_us = 1, .send_us = 0.3,
    .hosts_per_leaf = 0, .oversub = 1, .reduce_gbps = 10, .copy_gbps = 20,
    .cores = 0, .slots = 4, .chunk = 512 << 10,
};

/* ---- simulated ranks, messages and directions ---- */

struct res;
typedef struct smsg {
    struct smsg *next;
    rcoll_msg_hdr_t h;
    char *data;              /* verify: the payload as sent */
    int arrived;
    int di;                  /* its direction */
    /* its path through the network model */
    struct res *path[4];
    double bps[4];
    int np;
    int segs_left;           /* segments not through the last resource */
    double lat;
} smsg_t;

/* A message crosses the network in segments of SEG_BYTES, each served by
 * every resource of its path in turn, first come first served, store and
 * forward: a segment's time at a resource is at most SEG_BYTES / bandwidth
 * of error against a cut-through network. */
#define SEG_BYTES 65536
typedef struct seg {
    struct seg *next;        /* in a resource's queue */
    smsg_t *m;
    int hop;
    double bytes;
} seg_t;

typedef struct {
    int a, b;                /* sender, receiver */
    int credits;             /* the sender's */
    smsg_t *head, *tail;     /* sent and not released, in send order */
    int narrived;            /* of them: arrived */
    uint64_t nsent;
} sdir_t;

typedef struct {
    coll_env_t env;
    coll_sched_t s;
    uint64_t *in, *out;      /* verify */
    size_t in_n, out_n;
    size_t *sd;              /* verify, all-to-all-v: where its block for
                                each rank starts in its input */
    double t;                /* the rank's clock (seconds) */
    int state;               /* 1 running, 2 done, 3 failed */
    int queued;
    char err[256];
} srank_t;

typedef struct res {
    double busy;             /* seconds it served */
    uint64_t bytes;
    int serving;             /* a segment is in service */
    seg_t *qh, *qt;          /* segments waiting */
} res_t;

static int n;                /* ranks */
static int cur = -1;         /* the rank the library code runs for */
static int with_data;        /* verify: payloads move */
static srank_t *R;
static const rcoll_tl_ops_t **g_tls;
static rcoll_tl_ep_t **g_eps;
static int *g_ids;
static rcoll_boot_peer_t *g_peers;
static int *g_ring, *g_ring_pos; /* the placement's ring (topo order) */
static char *g_zero;         /* estimate: every payload (never written) */
static size_t g_zero_len;

static sdir_t *dirs;
static size_t ndirs, dirs_cap;
static int32_t *dtab;        /* open addressing: (a, b) -> dirs index */
static size_t dtab_cap;

static res_t *ltx, *lrx, *ntx, *nrx, *lup, *ldown;
static size_t res_n_nic;     /* ntx, nrx: hosts x NICs */
static int nleaves;
static double now;
static double quantum;       /* estimate: events this close run together */
static uint64_t n_msgs, n_stalls, net_bytes;
static rcoll_reduce_fn_t g_host_reduce;
static size_t g_dts = 8;     /* the reduced type's size */

/* ---- the event queue (a binary heap on time, then insertion order) ---- */

enum { EV_DELIVER, EV_CREDIT, EV_ARRIVE, EV_SERVED };
/* DELIVER (p: the message) and CREDIT at direction dir; ARRIVE (a segment
 * at its hop's resource) and SERVED (a segment done there) with p the
 * segment */
typedef struct {
    double t;
    uint64_t seq;
    int type;
    int dir;
    void *p;
} ev_t;
static ev_t *heap;
static size_t nheap, heap_cap;
static uint64_t ev_seq;

static int ev_less(const ev_t *x, const ev_t *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static int ev_push(double t, int type, int dir, void *m)
{
    if (nheap == heap_cap) {
        size_t c = heap_cap ? 2 * heap_cap : 1024;
        ev_t *h = realloc(heap, c * sizeof(*h));
        if (!h)
            return -1;
        heap = h;
        heap_cap = c;
    }
    size_t i = nheap++;
    ev_t e = {t, ev_seq++, type, dir, m};
    while (i && ev_less(&e, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = e;
    return 0;
}

static ev_t ev_pop(void)
{
    ev_t top = heap[0], last = heap[--nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nheap)
            break;
        if (c + 1 < nheap && ev_less(&heap[c + 1], &heap[c]))
            c++;
        if (!ev_less(&heap[c], &last))
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (nheap)
        heap[i] = last;
    return top;
}

/* ---- directions: a hash of (sender, receiver) ---- */

static size_t dhash(int a, int b)
{
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static int dtab_grow(void)
{
    size_t c = dtab_cap ? 2 * dtab_cap : 4096;
    int32_t *t = malloc(c * sizeof(*t));
    if (!t)
        return -1;
    memset(t, 0xff, c * sizeof(*t));
    for (size_t i = 0; i < ndirs; i++) {
        size_t j = dhash(dirs[i].a, dirs[i].b) & (c - 1);
        while (t[j] >= 0)
            j = (j + 1) & (c - 1);
        t[j] = (int32_t)i;
    }
    free(dtab);
    dtab = t;
    dtab_cap = c;
    return 0;
}

/* The direction a -> b, created when `make` (NULL: none, or no memory). */
static sdir_t *dir_get(int a, int b, int make, int *idx)
{
    if (dtab_cap) {
        size_t j = dhash(a, b) & (dtab_cap - 1);
        for (; dtab[j] >= 0; j = (j + 1) & (dtab_cap - 1))
            if (dirs[dtab[j]].a == a && dirs[dtab[j]].b == b) {
                if (idx)
                    *idx = dtab[j];
                return &dirs[dtab[j]];
            }
    }
    if (!make)
        return NULL;
    if ((ndirs + 1) * 10 > dtab_cap * 7 && dtab_grow())
        return NULL;
    if (ndirs == dirs_cap) {
        size_t c = dirs_cap ? 2 * dirs_cap : 1024;
        sdir_t *d = realloc(dirs, c * sizeof(*d));
        if (!d)
            return NULL;
        dirs = d;
        dirs_cap = c;
    }
    sdir_t *d = &dirs[ndirs];
    memset(d, 0, sizeof(*d));
    d->a = a;
    d->b = b;
    d->credits = cl.slots;
    size_t j = dhash(a, b) & (dtab_cap - 1);
    while (dtab[j] >= 0)
        j = (j + 1) & (dtab_cap - 1);
    dtab[j] = (int32_t)ndirs;
    if (idx)
        *idx = (int)ndirs;
    ndirs++;
    return d;
}

static void wake(int r)
{
    R[r].t = R[r].t > now ? R[r].t : now;
    R[r].queued = 1;
}

/* ---- the network model ---- */

static int g_hosts = 1; /* hosts of the current world */
static int host_of(int r) { return cl.cyclic ? r % g_hosts : r / cl.rph; }
static int leaf_of(int h)
{
    return cl.hosts_per_leaf > 0 ? h / cl.hosts_per_leaf : 0;
}

static double lat(int a, int b)
{
    return (host_of(a) == host_of(b) ? cl.local_lat_us : cl.nic_lat_us) * 1e-6;
}

/* Message m of `bytes` that a sends to b (its k-th to b): its path, and
 * its segments into the first resource at time t. */
static int route(smsg_t *m, int a, int b, size_t bytes, uint64_t k, double t)
{
    res_t **p = m->path;
    double *bps = m->bps;
    int np = 0, ha = host_of(a), hb = host_of(b);
    if (ha == hb) {
        p[np] = &ltx[a];
        bps[np++] = cl.local_gbps * 1e9;
        p[np] = &lrx[b];
        bps[np++] = cl.local_gbps * 1e9;
    } else {
        int rail = (int)(k % (uint64_t)cl.nics);
        double nic = cl.nic_gbps / 8 * 1e9;
        p[np] = &ntx[ha * cl.nics + rail];
        bps[np++] = nic;
        if (leaf_of(ha) != leaf_of(hb)) {
            double up = cl.hosts_per_leaf * cl.nics * nic / cl.oversub;
            p[np] = &lup[leaf_of(ha)];
            bps[np++] = up;
            p[np] = &ldown[leaf_of(hb)];
            bps[np++] = up;
        }
        p[np] = &nrx[hb * cl.nics + rail];
        bps[np++] = nic;
        net_bytes += bytes;
    }
    m->np = np;
    m->lat = lat(a, b);
    size_t nseg = bytes ? (bytes + SEG_BYTES - 1) / SEG_BYTES : 1;
    m->segs_left = (int)nseg;
    for (size_t i = 0; i < nseg; i++) {
        seg_t *g = calloc(1, sizeof(*g));
        if (!g || ev_push(t, EV_ARRIVE, 0, g)) {
            free(g);
            return -1;
        }
        g->m = m;
        g->bytes = (double)(i + 1 < nseg ? SEG_BYTES
                                         : bytes - i * SEG_BYTES);
    }
    return 0;
}

/* Segment g's service at resource r starts now. */
static int serve(res_t *r, seg_t *g)
{
    double d = g->bytes / g->m->bps[g->hop];
    r->serving = 1;
    r->busy += d;
    r->bytes += (uint64_t)g->bytes;
    return ev_push(now + d, EV_SERVED, 0, g);
}

/* A network event (ARRIVE, SERVED) at time now. */
static int net_event(const ev_t *ev)
{
    seg_t *g = ev->p;
    res_t *r = g->m->path[g->hop];
    if (ev->type == EV_ARRIVE) {
        if (!r->serving)
            return serve(r, g);
        g->next = NULL;
        if (r->qt)
            r->qt->next = g;
        else
            r->qh = g;
        r->qt = g;
        return 0;
    }
    /* served: the next one waiting here starts; g goes on */
    r->serving = 0;
    if (r->qh) {
        seg_t *x = r->qh;
        r->qh = x->next;
        if (!r->qh)
            r->qt = NULL;
        if (serve(r, x))
            return -1;
    }
    if (++g->hop < g->m->np)
        return net_event(&(ev_t){.type = EV_ARRIVE, .p = g});
    smsg_t *m = g->m;
    free(g);
    if (--m->segs_left == 0)
        return ev_push(now + m->lat, EV_DELIVER, m->di, m);
    return 0;
}

/* ---- the fake transport (cur: the calling rank) ---- */

static int ep_peer(rcoll_tl_ep_t *ep) { return *(int *)ep; }

static rcoll_status_t sim_send(rcoll_tl_ep_t *ep, const rcoll_msg_hdr_t *h,
                               const void *pl, void *cookie, int flags,
                               size_t xfer)
{
    (void)flags;
    (void)xfer;
    int a = cur, b = ep_peer(ep), di;
    sdir_t *d = dir_get(a, b, 1, &di);
    if (!d)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rcoll-sim: no memory "
                                "for the direction %d -> %d", a, b);
    if (!d->credits)
        return RCOLL_INPROGRESS;
    smsg_t *m = calloc(1, sizeof(*m));
    if (!m || (with_data && h->len && !(m->data = malloc(h->len)))) {
        free(m);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rcoll-sim: no memory "
                                "for a message");
    }
    m->h = *h;
    m->di = di;
    if (with_data && h->len)
        memcpy(m->data, pl, h->len);
    if (d->tail)
        d->tail->next = m;
    else
        d->head = m;
    d->tail = m;
    d->credits--;
    if (route(m, a, b, h->len, d->nsent++, R[a].t))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rcoll-sim: no memory "
                                "for the network's events");
    R[a].t += cl.send_us * 1e-6;
    n_msgs++;
    if (cookie)
        coll_sched_send_done(cookie);
    return RCOLL_OK;
}

static rcoll_status_t sim_peek(rcoll_tl_ep_t *ep, const rcoll_msg_hdr_t **h,
                               const void **pl)
{
    sdir_t *d = dir_get(ep_peer(ep), cur, 0, NULL);
    if (!d || !d->head || !d->head->arrived)
        return RCOLL_INPROGRESS;
    *h = &d->head->h;
    *pl = with_data ? d->head->data : g_zero;
    if (!with_data && d->head->h.len > g_zero_len)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "rcoll-sim: a %u-byte "
                                "message, larger than a chunk",
                                d->head->h.len);
    return RCOLL_OK;
}

static void sim_release(rcoll_tl_ep_t *ep)
{
    int di;
    sdir_t *d = dir_get(ep_peer(ep), cur, 0, &di);
    smsg_t *m = d->head;
    d->head = m->next;
    if (!d->head)
        d->tail = NULL;
    d->narrived--;
    free(m->data);
    free(m);
    if (ev_push(R[cur].t + lat(d->a, d->b), EV_CREDIT, di, NULL))
        d->credits++; /* no memory for the event: the credit at once */
}

static int sim_full(rcoll_tl_ep_t *ep)
{
    sdir_t *d = dir_get(ep_peer(ep), cur, 0, NULL);
    return d && d->narrived >= cl.slots;
}

static const rcoll_tl_ops_t sim_ops = {
    .name = "sim",
    .send = sim_send,
    .recv_peek = sim_peek,
    .recv_release = sim_release,
    .recv_full = sim_full,
};

/* ---- the memory domain: the host's with the time it takes ---- */

static void sim_copy(void *dst, const void *src, size_t bytes)
{
    R[cur].t += (double)bytes / (cl.copy_gbps * 1e9);
    if (with_data)
        memcpy(dst, src, bytes);
}

static void sim_reduce(void *dst, const void *a, const void *b, size_t count)
{
    R[cur].t += (double)(count * g_dts) / (cl.reduce_gbps * 1e9);
    if (with_data)
        g_host_reduce(dst, a, b, count);
}

static rcoll_reduce_fn_t sim_reduce_get(rcoll_datatype_t dt, rcoll_op_t op)
{
    g_host_reduce = coll_md_host.reduce_get(dt, op);
    g_dts = rcoll_datatype_size(dt);
    return g_host_reduce ? sim_reduce : NULL;
}

static const coll_md_t sim_md = {
    .name = "sim",
    .copy = sim_copy,
    .reduce_get = sim_reduce_get,
};

/* ---- set-up and teardown ---- */

static void *res_alloc(size_t k)
{
    return calloc(k ? k : 1, sizeof(res_t));
}

static int world_init(int nr)
{
    n = nr;
    R = calloc((size_t)n, sizeof(*R));
    g_tls = calloc((size_t)n, sizeof(*g_tls));
    g_eps = calloc((size_t)n, sizeof(*g_eps));
    g_ids = calloc((size_t)n, sizeof(*g_ids));
    g_peers = calloc((size_t)n, sizeof(*g_peers));
    int hosts = (n + cl.rph - 1) / cl.rph;
    g_hosts = hosts;
    nleaves = cl.hosts_per_leaf > 0
                  ? (hosts + cl.hosts_per_leaf - 1) / cl.hosts_per_leaf
                  : 1;
    ltx = res_alloc((size_t)n);
    lrx = res_alloc((size_t)n);
    res_n_nic = (size_t)hosts * (size_t)cl.nics;
    ntx = res_alloc((size_t)hosts * (size_t)cl.nics);
    nrx = res_alloc((size_t)hosts * (size_t)cl.nics);
    lup = res_alloc((size_t)nleaves);
    ldown = res_alloc((size_t)nleaves);
    g_ring = malloc((size_t)n * sizeof(int));
    g_ring_pos = malloc((size_t)n * sizeof(int));
    if (!R || !g_tls || !g_eps || !g_ids || !g_peers || !ltx || !lrx ||
        !ntx || !nrx || !lup || !ldown || !g_ring || !g_ring_pos)
        return -1;
    for (int r = 0; r < n; r++) {
        g_tls[r] = &sim_ops;
        g_ids[r] = r;
        g_eps[r] = (rcoll_tl_ep_t *)&g_ids[r];
        snprintf(g_peers[r].hostname, sizeof(g_peers[r].hostname),
                 "sim%d", host_of(r));
        g_peers[r].pid = r;
        g_peers[r].rank = r;
    }
    int multi = hosts > 1;
    /* the placement a communicator computes (core/setup.c): the topo ring
     * order, hosts numbered by their lowest rank, the locality counts */
    coll_locality_t loc;
    int *hidx = malloc((size_t)n * sizeof(int)), hsize = 0, nh = 1;
    uint64_t *ids = malloc((size_t)n * sizeof(uint64_t));
    if (!hidx || !ids) {
        free(hidx);
        free(ids);
        return -1;
    }
    for (int r = 0; r < n; r++)
        ids[r] = 0x9e3779b97f4a7c15ULL * (uint64_t)(host_of(r) + 1);
    nh = rcoll_topo_ring_order(n, ids, 1, g_ring, hidx, &hsize);
    for (int i = 0; i < n; i++)
        g_ring_pos[g_ring[i]] = i;
    int bad = nh < 0 || coll_locality_init(&loc, n, hidx, nh, g_ring);
    free(hidx);
    free(ids);
    if (bad)
        return -1;
    for (int r = 0; r < n; r++) {
        coll_env_t *e = &R[r].env;
        e->loc = loc;
        e->rank = r;
        e->nranks = n;
        e->chunk_size = cl.chunk;
        e->tls = g_tls;
        e->eps = g_eps;
        e->peers = g_peers;
        e->link = multi ? (rcoll_link_model_t){cl.nic_lat_us,
                                               cl.nic_gbps / 8}
                        : (rcoll_link_model_t){cl.local_lat_us,
                                               cl.local_gbps};
        e->link_name = multi ? "net" : "shm";
        e->link_local = (rcoll_link_model_t){cl.local_lat_us, cl.local_gbps};
        e->local_size = cl.rph < n ? cl.rph : n;
        e->ncores = cl.cores > 0 ? cl.cores : e->local_size;
        e->nhosts = nh;
        e->host_size = hsize;
        e->ring = g_ring;
        e->ring_pos = g_ring_pos;
        e->paths = multi ? cl.nics : 1;
        e->md = &sim_md;
        e->p2p_eager = 1u << 16;
        if (!(e->match = coll_match_create(n, (size_t)1 << 40)))
            return -1;
    }
    return 0;
}

static void world_fini(void)
{
    for (size_t i = 0; i < ndirs; i++)
        for (smsg_t *m = dirs[i].head, *nx; m; m = nx) {
            nx = m->next;
            free(m->data);
            free(m);
        }
    free(dirs);
    free(dtab);
    dirs = NULL;
    dtab = NULL;
    ndirs = dirs_cap = dtab_cap = 0;
    /* segments still in the network (a run that failed) */
    for (size_t i = 0; i < nheap; i++)
        if (heap[i].type == EV_ARRIVE || heap[i].type == EV_SERVED)
            free(heap[i].p);
    res_t *all[] = {ltx, lrx, ntx, nrx, lup, ldown};
    size_t cnt[] = {(size_t)n, (size_t)n, res_n_nic, res_n_nic,
                    (size_t)nleaves, (size_t)nleaves};
    for (int j = 0; j < 6; j++)
        for (size_t i = 0; all[j] && i < cnt[j]; i++)
            for (seg_t *g = all[j][i].qh, *x; g; g = x) {
                x = g->next;
                free(g);
            }
    free(heap);
    heap = NULL;
    nheap = heap_cap = 0;
    for (int r = 0; R && r < n; r++) {
        cur = r;
        coll_sched_free(&R[r].s);
        if (R[r].env.match)
            coll_match_destroy(R[r].env.match);
        free(R[r].in);
        free(R[r].out);
        free(R[r].sd);
    }
    free(R);
    free(g_tls);
    free(g_eps);
    free(g_ids);
    free(g_peers);
    free(g_ring);
    free(g_ring_pos);
    g_ring = g_ring_pos = NULL;
    free(ltx);
    free(lrx);
    free(ntx);
    free(nrx);
    free(lup);
    free(ldown);
    R = NULL;
    cur = -1;
    now = 0;
    n_msgs = net_bytes = 0;
}

/* ---- running one collective on every rank ---- */

typedef struct {
    int ok;                  /* every rank finished */
    int deadlock;
    double t;                /* the last rank's finish */
    char why[512];
} runres_t;

/* Runs every rank's schedule (built already) until all are done, a rank
 * fails, or nothing can move. */
static runres_t run_all(void)
{
    runres_t rr = {0};
    int *q = malloc((size_t)n * sizeof(int)), qh = 0, qn = 0, done = 0;
    if (!q) {
        snprintf(rr.why, sizeof(rr.why), "no memory");
        return rr;
    }
    for (int r = 0; r < n; r++) {
        R[r].queued = 1;
        q[qn++] = r;
    }
    for (;;) {
        while (qn) {
            int r = q[qh];
            qh = (qh + 1) % n;
            qn--;
            R[r].queued = 0;
            if (R[r].state != 1)
                continue;
            cur = r;
            if (R[r].t < now)
                R[r].t = now;
            int mv = 0;
            rcoll_status_t st = coll_sched_progress(&R[r].s, &R[r].env, &mv);
            if (st == RCOLL_OK) {
                R[r].state = 2;
                done++;
                if (R[r].t > rr.t)
                    rr.t = R[r].t;
            } else if (st != RCOLL_INPROGRESS) {
                R[r].state = 3;
                snprintf(rr.why, sizeof(rr.why), "rank %d: %s", r,
                         rcoll_last_error());
                goto out;
            } else if (mv) {
                R[r].queued = 1; /* it may move again */
                q[(qh + qn++) % n] = r;
            }
        }
        if (done == n)
            break;
        if (!nheap) {
            /* nothing in flight, nothing can run: the engine would set
             * aside what fills the slots after 100 ms */
            int set = 0;
            for (int r = 0; r < n; r++)
                if (R[r].state == 1) {
                    cur = r;
                    int k = coll_match_unblock(&R[r].env);
                    if (k && !R[r].queued) {
                        R[r].queued = 1;
                        q[(qh + qn++) % n] = r;
                    }
                    set += k;
                }
            if (!set) {
                rr.deadlock = 1;
                int shown = 0;
                size_t o = (size_t)snprintf(rr.why, sizeof(rr.why),
                                            "deadlock: %d of %d ranks "
                                            "unfinished;", n - done, n);
                for (int r = 0; r < n && shown < 3; r++) {
                    coll_sched_t *s = &R[r].s;
                    if (R[r].state != 1 || o >= sizeof(rr.why))
                        continue;
                    o += (size_t)snprintf(rr.why + o, sizeof(rr.why) - o,
                                          " rank %d at step %d/%d waits for "
                                          "%s rank %d;", r, s->r_step,
                                          s->nsteps,
                                          s->waiting_for ? s->waiting_for
                                                         : "?",
                                          s->waiting_peer);
                    shown++;
                }
                goto out;
            }
            n_stalls++;
            continue;
        }
        /* the next event, and those within the quantum after it (verify:
         * all of them; the ranks then run once for the lot instead of
         * once per message: an executor pass looks at every step, so a
         * flat algorithm would cost n^3 passes) */
        double until = heap[0].t + (with_data ? 1e300 : quantum);
        while (nheap && heap[0].t <= until) {
            ev_t ev = ev_pop();
            now = ev.t;
            if (ev.type == EV_ARRIVE || ev.type == EV_SERVED) {
                if (net_event(&ev)) {
                    snprintf(rr.why, sizeof(rr.why), "rcoll-sim: no memory "
                             "for the network's events");
                    goto out;
                }
                continue;
            }
            sdir_t *d = &dirs[ev.dir];
            int w;
            if (ev.type == EV_DELIVER) {
                ((smsg_t *)ev.p)->arrived = 1;
                d->narrived++;
                w = d->b;
            } else {
                d->credits++;
                w = d->a;
            }
            if (!R[w].queued && R[w].state == 1) {
                wake(w);
                q[(qh + qn++) % n] = w;
            }
        }
    }
    rr.ok = 1;
    /* a message nobody received */
    for (size_t i = 0; i < ndirs; i++)
        if (dirs[i].head) {
            rr.ok = 0;
            snprintf(rr.why, sizeof(rr.why), "a message from rank %d to "
                     "rank %d (step %u chunk %u) was never received",
                     dirs[i].a, dirs[i].b, dirs[i].head->h.step,
                     dirs[i].head->h.chunk);
            break;
        }
out:
    free(q);
    return rr;
}

/* ---- verify ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* rank r's input element i: a fingerprint (splitmix64) */
static uint64_t val(int r, size_t i)
{
    return mix64((uint64_t)r << 40 ^ (uint64_t)i ^ 0x5eed0000000000ULL);
}

static size_t in_len(coll_kind_t k, size_t c)
{
    return k == COLL_REDUCE_SCATTER || k == COLL_ALLTOALL ||
                   k == COLL_SCATTER
               ? c * (size_t)n
               : c;
}

static size_t out_len(coll_kind_t k, size_t c)
{
    return k == COLL_ALLGATHER || k == COLL_ALLTOALL || k == COLL_GATHER
               ? c * (size_t)n
               : k == COLL_BARRIER ? 0 : c;
}

/* count is one rank's block, not the whole buffer */
static int per_rank_block(coll_kind_t k)
{
    return k == COLL_ALLGATHER || k == COLL_ALLTOALL || k == COLL_GATHER ||
           k == COLL_REDUCE_SCATTER || k == COLL_SCATTER ||
           k == COLL_ALLTOALLV;
}

/* all-to-all-v: the elements rank a sends rank b (0 to c + 1, zeros
 * among them); blocks are one element apart in both buffers, so a block
 * put at the wrong displacement, or a gap written, shows */
static size_t vcnt(int a, int b, size_t c)
{
    return ((size_t)a * 7 + (size_t)b * 3 + c) % (c + 2);
}

/* out[i] of rank r, computed from the inputs' definition */
static uint64_t expect(coll_kind_t k, int r, int root, size_t c, size_t i)
{
    uint64_t sum = 0;
    switch (k) {
    case COLL_ALLREDUCE: case COLL_REDUCE:
        for (int p = 0; p < n; p++)
            sum += val(p, i);
        return sum;
    case COLL_REDUCE_SCATTER:
        for (int p = 0; p < n; p++)
            sum += val(p, (size_t)r * c + i);
        return sum;
    case COLL_ALLGATHER: case COLL_GATHER:
        return val((int)(i / c), i % c);
    case COLL_BROADCAST:
        return val(root, i);
    case COLL_ALLTOALL:
        return val((int)(i / c), (size_t)r * c + i % c);
    case COLL_SCATTER:
        return val(root, (size_t)r * c + i);
    default:
        return 0;
    }
}

/* The reductions' reference for every element at once (n x count sums
 * element by element would be n times slower). */
static uint64_t *ref_sums(size_t len)
{
    uint64_t *s = calloc(len ? len : 1, sizeof(uint64_t));
    for (int p = 0; s && p < n; p++)
        for (size_t i = 0; i < len; i++)
            s[i] += val(p, i);
    return s;
}

static const char *plant;

/* rank 1 of a non-power-of-two run drops its first received block */
static void plant_bug(void)
{
    if (!plant || n < 3 || !(n & (n - 1)))
        return;
    coll_sched_t *s = &R[1].s;
    for (int i = 0; i < s->nsteps; i++)
        if (s->steps[i].recv_peer >= 0 && s->steps[i].recv_bytes &&
            s->steps[i].recv_mode != RECV_DISCARD) {
            s->steps[i].recv_mode = RECV_DISCARD;
            s->steps[i].recv_place = 0;
            return;
        }
}

/* how many ranks schedule s sends to or receives from */
static int distinct_peers(const coll_sched_t *s)
{
    unsigned char *seen = calloc((size_t)n, 1);
    int k = 0;
    for (int i = 0; seen && i < s->nsteps; i++) {
        int p[2] = {s->steps[i].send_peer, s->steps[i].recv_peer};
        for (int j = 0; j < 2; j++)
            if (p[j] >= 0 && !seen[p[j]]) {
                seen[p[j]] = 1;
                k++;
            }
    }
    if (!seen)
        return n;
    free(seen);
    return k;
}

static size_t mem_limit = (size_t)6 << 30;

/* bytes malloc has handed out and not had back */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* One algorithm at nr ranks. 0: passed, 1: failed, 2: skipped. */
static int verify_one(const coll_algo_t *a, int nr, size_t cnt, size_t chunk,
                      char *why, size_t wlen)
{
    why[0] = 0;
    if (world_init(nr)) {
        snprintf(why, wlen, "no memory for %d ranks", nr);
        world_fini();
        return 2;
    }
    with_data = 1;
    int root = n / 3, rc = 0;
    uint64_t *ref = NULL;
    size_t il = in_len(a->kind, cnt), ol = out_len(a->kind, cnt);
    int av = a->kind == COLL_ALLTOALLV;
    for (int r = 0; r < n; r++) {
        srank_t *x = &R[r];
        coll_sched_t *s = &x->s;
        if (av) { /* counts, displacements; both buffers' lengths */
            if (!(s->v = malloc(4 * (size_t)n * sizeof(size_t))) ||
                !(x->sd = malloc((size_t)n * sizeof(size_t)))) {
                snprintf(why, wlen, "no memory for the counts");
                rc = 2;
                goto out;
            }
            il = ol = 0;
            for (int j = 0; j < n; j++) {
                s->v[j] = vcnt(r, j, cnt);
                s->v[n + j] = x->sd[j] = il;
                il += s->v[j] + 1;
                s->v[2 * n + j] = vcnt(j, r, cnt);
                s->v[3 * n + j] = ol;
                ol += s->v[2 * n + j] + 1;
            }
        }
        x->in = malloc((il + 1) * sizeof(uint64_t));
        x->out = malloc((ol + 1) * sizeof(uint64_t));
        if (!x->in || !x->out) {
            snprintf(why, wlen, "no memory for the buffers");
            rc = 2;
            goto out;
        }
        for (size_t i = 0; i < il; i++)
            x->in[i] = val(r, i);
        memset(x->out, 0xee, (ol + 1) * sizeof(uint64_t));
        s->kind = a->kind;
        s->sendbuf = x->in;
        s->recvbuf = x->out;
        s->count = cnt;
        s->dt = RCOLL_UINT64;
        s->op = RCOLL_SUM;
        s->root = root;
        s->seq = 1;
        cur = r;
        size_t heap0 = r == 0 ? heap_in_use() : 0;
        rcoll_status_t st = coll_sched_build_algo(s, &x->env, a, chunk);
        if (st == RCOLL_ERR_NOT_SUPPORTED ||
            st == RCOLL_ERR_INVALID_ARGUMENT) {
            rc = 2; /* not for this rank count or layout */
            goto out;
        }
        if (st != RCOLL_OK) {
            snprintf(why, wlen, "build on rank %d: %s", r,
                     rcoll_last_error());
            rc = st == RCOLL_ERR_NO_MEMORY ? 2 : 1;
            goto out;
        }
        x->state = 1;
        if (r == 0) {
            /* what all ranks' schedules and buffers will take */
            /* what its build allocated (steps, scratch), the state
             * (6 ints a step, 3 a distinct peer), the matching state's
             * pages of 64 peers (2 peers a step at most), its buffers,
             * and what it may have in flight */
            double peers = distinct_peers(s);
            double pages = peers < n / 64 + 1 ? peers : n / 64 + 1;
            double built = (double)heap_in_use() - (double)heap0;
            double fly = 0; /* in flight: what it sends, a peer's slots */
            for (int i = 0; i < s->nsteps; i++)
                fly += (double)RCOLL_MIN(s->steps[i].send_bytes,
                                         (size_t)cl.slots * chunk) + 96;
            if (fly > peers * cl.slots * (double)(chunk + 96))
                fly = peers * cl.slots * (double)(chunk + 96);
            double per = (built > 0 ? built : 0) +
                         (double)s->nsteps * 24 + peers * 12 +
                         pages * 64 * 40 + (double)(il + ol + 2) * 8 +
                         sizeof(srank_t) + fly;
            if (per * n > (double)mem_limit) {
                snprintf(why, wlen, "needs about %.1f GiB (--mem-gib)",
                         per * n / (1 << 30));
                rc = 2;
                goto out;
            }
        }
    }
    plant_bug();
    runres_t rr = run_all();
    if (!rr.ok) {
        snprintf(why, wlen, "%s", rr.why);
        rc = 1;
        goto out;
    }
    if (a->kind == COLL_ALLREDUCE || a->kind == COLL_REDUCE ||
        a->kind == COLL_REDUCE_SCATTER)
        ref = ref_sums(il);
    for (int r = 0; r < n && !rc && av; r++) { /* block by block, gaps */
        size_t at = 0;
        for (int j = 0; j < n && !rc; j++) {
            size_t k = vcnt(j, r, cnt);
            for (size_t i = 0; i <= k && !rc; i++, at++) {
                uint64_t want = i < k ? val(j, R[j].sd[r] + i)
                                      : 0xeeeeeeeeeeeeeeeeULL;
                if (R[r].out[at] != want) {
                    snprintf(why, wlen, "rank %d element %zu (from rank "
                             "%d): %s", r, at, j, i == k ? "a gap written"
                             : R[r].out[at] == 0xeeeeeeeeeeeeeeeeULL
                                 ? "never written" : "wrong contributions");
                    rc = 1;
                }
            }
        }
        if (!rc && R[r].out[at] != 0xeeeeeeeeeeeeeeeeULL) {
            snprintf(why, wlen, "rank %d wrote past its output", r);
            rc = 1;
        }
    }
    for (int r = 0; r < n && !rc && !av; r++) {
        if (R[r].out[ol] != 0xeeeeeeeeeeeeeeeeULL) {
            snprintf(why, wlen, "rank %d wrote past its output", r);
            rc = 1;
            break;
        }
        if ((a->kind == COLL_REDUCE || a->kind == COLL_GATHER) && r != root)
            continue;
        for (size_t i = 0; i < ol; i++) {
            uint64_t want;
            if (ref)
                want = ref[a->kind == COLL_REDUCE_SCATTER
                               ? (size_t)r * cnt + i
                               : i];
            else
                want = expect(a->kind, r, root, cnt, i);
            if (R[r].out[i] != want) {
                snprintf(why, wlen, "rank %d element %zu of %zu: %s",
                         r, i, ol, R[r].out[i] == 0xeeeeeeeeeeeeeeeeULL
                                       ? "never written"
                                       : "wrong contributions");
                rc = 1;
                break;
            }
        }
    }
out:
    free(ref);
    world_fini();
    return rc;
}

/* 1 if name is one of the comma-separated list */
static int in_list(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1
                                                     : NULL)
        if (!strncmp(p, name, len) && (p[len] == ',' || !p[len]))
            return 1;
    return 0;
}

/* "1-64,100,257" -> the list of rank counts */
static int parse_ranks(const char *spec, int **out)
{
    int k = 0, cap = 64, *v = malloc(cap * sizeof(int));
    const char *p = spec;
    while (v && *p) {
        char *e;
        long lo = strtol(p, &e, 10), hi = lo;
        if (e == p || lo < 1)
            break;
        if (*e == '-')
            hi = strtol(e + 1, &e, 10);
        for (long x = lo; x <= hi && x <= (1 << 20); x++) {
            if (k == cap) {
                int *nv = realloc(v, (size_t)(cap *= 2) * sizeof(int));
                if (!nv) {
                    free(v);
                    return -1;
                }
                v = nv;
            }
            v[k++] = (int)x;
        }
        p = *e == ',' ? e + 1 : e;
        if (*e && *e != ',')
            break;
    }
    *out = v;
    return v ? k : -1;
}

static int verify_main(int argc, char **argv)
{
    const char *ranks = "1-40,48,63,64,65,100,127,128,129,255,256,257";
    const char *kind = NULL, *algo = NULL;
    size_t count = 0, chunk = 0;
    int rph_list[2] = {0, 0}, layout_cyclic = 1;
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--ranks") && v)
            ranks = argv[++i];
        else if (!strcmp(argv[i], "--kind") && v)
            kind = argv[++i];
        else if (!strcmp(argv[i], "--algo") && v)
            algo = argv[++i];
        else if (!strcmp(argv[i], "--count") && v)
            count = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--chunk") && v)
            chunk = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--rph") && v)
            rph_list[1] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--block-only"))
            layout_cyclic = 0;
        else if (!strcmp(argv[i], "--mem-gib") && v)
            mem_limit = (size_t)(atof(argv[++i]) * (1 << 30));
        else if (!strcmp(argv[i], "--plant") && v)
            plant = argv[++i];
        else {
            fprintf(stderr, "rcoll-sim verify: unknown option %s\n",
                    argv[i]);
            return 2;
        }
    }
    if (plant && strcmp(plant, "skip-block")) {
        fprintf(stderr, "rcoll-sim: --plant knows skip-block\n");
        return 2;
    }
    int *rl, nrl = parse_ranks(ranks, &rl);
    if (nrl <= 0) {
        if (nrl == 0)
            free(rl);
        fprintf(stderr, "rcoll-sim: bad --ranks %s\n", ranks);
        return 2;
    }
    int total = 0, failed = 0, skipped = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        if (a->kind == COLL_SEND || a->kind == COLL_RECV ||
            a->build == coll_area_build)
            continue;
        if (kind && !in_list(kind, coll_kind_name(a->kind)))
            continue;
        if (algo && !in_list(algo, a->name))
            continue;
        int runs = 0, bad = 0, skip = 0, lo = 0, hi = 0;
        struct timespec a0, a1;
        clock_gettime(CLOCK_MONOTONIC, &a0);
        int stalled = 0;
        char skipwhy[256] = "";
        for (int j = 0; j < nrl; j++) {
            int nr = rl[j];
            /* one host; and hosts of rph ranks (the hierarchical
             * algorithms' layout): --rph, else the smallest of 4, 3, 2
             * that divides nr into two hosts or more */
            int layouts[3] = {nr, 0, 0}, cyc[3] = {0, 0, 1}, nlay = 1;
            int g = rph_list[1];
            if (!g)
                for (int c = 4; c >= 2 && !g; c--)
                    if (nr % c == 0 && nr / c >= 2)
                        g = c;
            if (g && g < nr) {
                layouts[nlay++] = g;
                /* and dealt out (rank r on host r mod H): the placement
                 * reorders the rings, the log-step algorithms reorder
                 * their halving */
                if (layout_cyclic && g > 1)
                    layouts[nlay++] = g;
            }
            for (int l = 0; l < nlay; l++) {
                cl.rph = layouts[l];
                cl.cyclic = cyc[l];
                size_t c = count;
                /* blocks of 3 elements per rank (1 above 1,024 ranks,
                 * where an all-gather's outputs grow as n^2) */
                if (!c && a->kind != COLL_BARRIER)
                    c = nr <= 1024 ? (per_rank_block(a->kind) ? 3
                                                    : 3 * (size_t)nr + 5)
                                   : (per_rank_block(a->kind) ? 1
                                                    : (size_t)nr + 3);
                /* chunks of 48 bytes cut every transfer into several
                 * (pipelines) up to 16 ranks; above, a quarter of the
                 * whole buffer (an all-gather's output), or n^2 messages
                 * times many chunks cost minutes */
                size_t ch = chunk;
                size_t all = (per_rank_block(a->kind) ? c * (size_t)nr : c) *
                             8;
                if (!ch)
                    ch = nr <= 16 || all / 4 < 48 ? 48 : all / 4 / 8 * 8;
                char why[600];
                uint64_t st0 = n_stalls;
                int rc = verify_one(a, nr, c, ch, why, sizeof(why));
                stalled += n_stalls > st0;
                if (rc == 2) {
                    skip++;
                    if (why[0] && !skipwhy[0])
                        snprintf(skipwhy, sizeof(skipwhy), "%d ranks: %s",
                                 nr, why);
                    continue;
                }
                runs++;
                if (!lo)
                    lo = nr;
                hi = nr;
                if (rc) {
                    bad++;
                    printf("FAIL %s/%s, %d ranks (%d per host%s), count "
                           "%zu, chunk %zu: %s\n", coll_kind_name(a->kind),
                           a->name, nr, cl.rph, cl.cyclic ? ", dealt out" : "",
                           c, ch, why);
                    fflush(stdout);
                }
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &a1);
        printf("%-14s %-19s %4d runs (%d-%d ranks), %d failed, %d needed "
               "the 100 ms unblock, %d skipped, %.1f s%s%s\n",
               coll_kind_name(a->kind), a->name, runs, lo, hi, bad,
               stalled, skip,
               (double)(a1.tv_sec - a0.tv_sec) +
                   (double)(a1.tv_nsec - a0.tv_nsec) * 1e-9,
               skipwhy[0] ? "; " : "", skipwhy);
        fflush(stdout);
        total += runs;
        failed += bad;
        skipped += skip;
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("rcoll-sim verify: %d runs, %d failed, %d skipped (not for that "
           "layout or over the memory limit), %.1f s\n", total, failed,
           skipped, (double)(t1.tv_sec - t0.tv_sec) +
                        (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    free(rl);
    return failed ? 1 : 0;
}

/* ---- estimate ---- */

static int parse_size(const char *s, size_t *out)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || v < 0)
        return -1;
    switch (*e) {
    case 'k': case 'K': v *= 1024; e++; break;
    case 'm': case 'M': v *= 1048576; e++; break;
    case 'g': case 'G': v *= 1073741824.0; e++; break;
    default: break;
    }
    if (*e == 'B' || *e == 'b')
        e++;
    if (*e)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* "key = value" lines; '#' starts a comment */
static int cluster_load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "rcoll-sim: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[256];
    int ln = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        ln++;
        char *h = strchr(line, '#');
        if (h)
            *h = 0;
        char key[64];
        double v;
        if (sscanf(line, " %63[a-z_] = %lf", key, &v) != 2) {
            char *p = line;
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
                p++;
            if (*p) {
                fprintf(stderr, "rcoll-sim: %s:%d: not key = number\n",
                        path, ln);
                rc = -1;
            }
            continue;
        }
        if (!strcmp(key, "hosts")) cl.hosts = (int)v;
        else if (!strcmp(key, "ranks_per_host")) cl.rph = (int)v;
        else if (!strcmp(key, "cyclic")) cl.cyclic = v != 0;
        else if (!strcmp(key, "nics")) cl.nics = (int)v;
        else if (!strcmp(key, "nic_gbit")) cl.nic_gbps = v;
        else if (!strcmp(key, "nic_latency_us")) cl.nic_lat_us = v;
        else if (!strcmp(key, "local_gbyte")) cl.local_gbps = v;
        else if (!strcmp(key, "local_latency_us")) cl.local_lat_us = v;
        else if (!strcmp(key, "send_us")) cl.send_us = v;
        else if (!strcmp(key, "hosts_per_leaf")) cl.hosts_per_leaf = (int)v;
        else if (!strcmp(key, "oversubscription")) cl.oversub = v;
        else if (!strcmp(key, "reduce_gbyte")) cl.reduce_gbps = v;
        else if (!strcmp(key, "copy_gbyte")) cl.copy_gbps = v;
        else if (!strcmp(key, "cores_per_host")) cl.cores = (int)v;
        else if (!strcmp(key, "slots")) cl.slots = (int)v;
        else if (!strcmp(key, "chunk_kib")) cl.chunk = (size_t)(v * 1024);
        else {
            fprintf(stderr, "rcoll-sim: %s:%d: unknown key %s\n", path, ln,
                    key);
            rc = -1;
        }
    }
    fclose(f);
    if (!rc && (cl.hosts < 1 || cl.rph < 1 || cl.nics < 1 ||
                cl.nic_gbps <= 0 || cl.local_gbps <= 0 || cl.oversub < 1 ||
                cl.reduce_gbps <= 0 || cl.copy_gbps <= 0 || cl.slots < 1 ||
                cl.chunk < 64)) {
        fprintf(stderr, "rcoll-sim: %s: a value out of range\n", path);
        rc = -1;
    }
    return rc;
}

static const char *res_name(const res_t *r, char *buf, size_t len)
{
    int hosts = (n + cl.rph - 1) / cl.rph;
    if (r >= ntx && r < ntx + hosts * cl.nics)
        snprintf(buf, len, "host %d NIC %d out", (int)(r - ntx) / cl.nics,
                 (int)(r - ntx) % cl.nics);
    else if (r >= nrx && r < nrx + hosts * cl.nics)
        snprintf(buf, len, "host %d NIC %d in", (int)(r - nrx) / cl.nics,
                 (int)(r - nrx) % cl.nics);
    else if (r >= lup && r < lup + nleaves)
        snprintf(buf, len, "leaf %d uplink", (int)(r - lup));
    else if (r >= ldown && r < ldown + nleaves)
        snprintf(buf, len, "leaf %d downlink", (int)(r - ldown));
    else if (r >= ltx && r < ltx + n)
        snprintf(buf, len, "rank %d port out (in host)", (int)(r - ltx));
    else
        snprintf(buf, len, "rank %d port in (in host)", (int)(r - lrx));
    return buf;
}

static const res_t *busiest(void)
{
    const res_t *b = NULL;
    int hosts = (n + cl.rph - 1) / cl.rph;
    struct {
        res_t *v;
        size_t k;
    } all[] = {{ltx, (size_t)n}, {lrx, (size_t)n},
               {ntx, (size_t)hosts * cl.nics}, {nrx, (size_t)hosts * cl.nics},
               {lup, (size_t)nleaves}, {ldown, (size_t)nleaves}};
    for (size_t j = 0; j < sizeof(all) / sizeof(all[0]); j++)
        for (size_t i = 0; i < all[j].k; i++)
            if (!b || all[j].v[i].busy > b->busy)
                b = &all[j].v[i];
    return b;
}

/* nccl-tests' bus bandwidth factor for a collective of n ranks */
static double bus_factor(coll_kind_t k)
{
    switch (k) {
    case COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER: case COLL_REDUCE_SCATTER: case COLL_ALLTOALL:
    case COLL_GATHER: case COLL_SCATTER:
        return (double)(n - 1) / n;
    default:
        return 1;
    }
}

static int estimate_main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: rcoll-sim estimate CLUSTER_FILE COLL SIZE "
                "[--algo NAME]\n");
        return 2;
    }
    if (cluster_load(argv[0]))
        return 2;
    coll_kind_t kind = 0;
    for (int k = 1; k <= COLL_KIND_MAX; k++)
        if (!strcmp(argv[1], coll_kind_name((coll_kind_t)k)))
            kind = (coll_kind_t)k;
    size_t size;
    if (!kind || kind == COLL_SEND || kind == COLL_RECV ||
        kind == COLL_ALLTOALLV || parse_size(argv[2], &size)) {
        fprintf(stderr, "rcoll-sim: COLL is allreduce, allgather, "
                "broadcast, reduce_scatter, reduce, alltoall, gather, "
                "scatter or barrier; SIZE bytes (K, M, G)\n");
        return 2;
    }
    const char *only = argc > 4 && !strcmp(argv[3], "--algo") ? argv[4]
                                                              : NULL;
    int nr = cl.hosts * cl.rph;
    /* SIZE as nccl-tests counts it: the whole buffer (all-gather: the
     * gathered output; reduce-scatter and all-to-all: the input) */
    size_t elems = size / 4, cnt = elems;
    if (per_rank_block(kind))
        cnt = elems / (size_t)nr;
    if (kind == COLL_BARRIER)
        cnt = 0;
    size_t bytes = cnt * 4 * (per_rank_block(kind) ? (size_t)nr : 1);
    printf("cluster %s: %d hosts x %d ranks = %d, %d NIC%s x %.0f Gb/s "
           "(%.1f us), in-host %.0f GB/s (%.1f us)", argv[0], cl.hosts,
           cl.rph, nr, cl.nics, cl.nics > 1 ? "s" : "", cl.nic_gbps,
           cl.nic_lat_us, cl.local_gbps, cl.local_lat_us);
    if (cl.hosts_per_leaf > 0)
        printf(", %d hosts per leaf, %.1f:1 uplinks", cl.hosts_per_leaf,
               cl.oversub);
    printf("\n%s of %zu bytes (%zu float32 per %s), chunk %zu\n",
           coll_kind_name(kind), bytes, cnt,
           cnt == elems ? "rank" : "block", cl.chunk);
    /* the send and the receive buffer every rank names (the same for
     * all: nothing reads or writes them), reserved and never touched;
     * checksums would read them */
    rcoll_config.checksum = 0;
    /* the tuner's reduction rate (its copies too) is the cluster's, as
     * the simulation charges it, not this machine's default */
    rcoll_config.tune_reduce_gbps = cl.reduce_gbps;
    size_t half = bytes + 4096, span = 2 * half;
    char *buf = mmap(NULL, span, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g_zero_len = cl.chunk;
    g_zero = calloc(1, g_zero_len);
    if (buf == MAP_FAILED || !g_zero) {
        fprintf(stderr, "rcoll-sim: cannot reserve %zu bytes\n", span);
        if (buf != MAP_FAILED)
            munmap(buf, span);
        free(g_zero);
        return 1;
    }
    with_data = 0;
    quantum = 0.25e-6 * (cl.local_lat_us < cl.nic_lat_us ? cl.local_lat_us
                                                          : cl.nic_lat_us);
    printf("%-20s %12s %14s %12s %16s %9s  %s\n", "algorithm", "model (us)",
           "simulated (us)", "busbw (GB/s)", "net bytes/rank", "rails %",
           "busiest");
    const coll_algo_t *choice = NULL;
    int status = 0;
    for (const coll_algo_t *a = coll_algos; a->name; a++) {
        if (a->kind != kind || a->build == coll_area_build)
            continue;
        if (only && strcmp(only, a->name))
            continue;
        if (world_init(nr)) {
            fprintf(stderr, "rcoll-sim: no memory for %d ranks\n", nr);
            world_fini();
            munmap(buf, span);
            free(g_zero);
            return 1;
        }
        double model = 0;
        size_t chunk = cl.chunk;
        const char *why = NULL;
        for (int r = 0; r < nr && !why; r++) {
            coll_sched_t *s = &R[r].s;
            s->kind = kind;
            s->sendbuf = buf;
            s->recvbuf = buf + half;
            s->count = cnt;
            s->dt = RCOLL_FLOAT32;
            s->op = RCOLL_SUM;
            s->seq = 1;
            cur = r;
            if (r == 0) {
                model = coll_tune_cost(a, s, &R[0].env, &chunk);
                if (!choice) {
                    size_t c2;
                    choice = coll_tune(s, &R[0].env, &c2);
                }
            }
            rcoll_status_t st = coll_sched_build_algo(s, &R[r].env, a, chunk);
            if (st != RCOLL_OK)
                why = st == RCOLL_ERR_NOT_SUPPORTED ||
                              st == RCOLL_ERR_INVALID_ARGUMENT
                          ? "not for this layout"
                          : rcoll_last_error();
            else
                R[r].state = 1;
            if (!why && r == 0 &&
                (double)s->nsteps * (sizeof(coll_step_t) + 16) * nr >
                    (double)mem_limit)
                why = "its schedules would not fit the memory limit";
        }
        if (why) {
            printf("%-20s %12.1f %14s %12s %16s %9s  (%s)\n", a->name,
                   model * 1e6, "-", "-", "-", "-", why);
            world_fini();
            continue;
        }
        runres_t rr = run_all();
        if (!rr.ok) {
            printf("%-20s %12.1f  FAILED: %s\n", a->name, model * 1e6,
                   rr.why);
            status = 1;
            world_fini();
            continue;
        }
        char rn[96], rails[64] = "";
        const res_t *b = busiest();
        if (cl.nics > 1 && net_bytes) {
            /* each rail's share of the bytes leaving hosts */
            size_t o = 0;
            for (int k = 0; k < cl.nics && o < sizeof(rails); k++) {
                double sum = 0;
                for (int h = 0; h < cl.hosts; h++)
                    sum += (double)ntx[h * cl.nics + k].bytes;
                o += (size_t)snprintf(rails + o, sizeof(rails) - o, "%s%.0f",
                                      k ? "/" : "", 100 * sum / net_bytes);
            }
        }
        printf("%-20s %12.1f %14.1f %12.2f %16.0f %9s  %s (busy %.0f%%)\n",
               a->name, model * 1e6, rr.t * 1e6,
               rr.t > 0 ? (double)bytes * bus_factor(kind) / rr.t / 1e9 : 0,
               (double)net_bytes / nr, rails[0] ? rails : "-",
               res_name(b, rn, sizeof(rn)),
               rr.t > 0 ? 100 * b->busy / rr.t : 0);
        fflush(stdout);
        world_fini();
    }
    if (choice)
        printf("tuner's choice: %s\n", choice->name);
    munmap(buf, span);
    free(g_zero);
    return status;
}

int main(int argc, char **argv)
{
    if (rcoll_config_init() != RCOLL_OK) {
        fprintf(stderr, "rcoll-sim: %s\n", rcoll_last_error());
        return 2;
    }
    if (argc > 1 && !strcmp(argv[1], "verify"))
        return verify_main(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "estimate"))
        return estimate_main(argc - 2, argv + 2);
    fprintf(stderr,
            "usage: rcoll-sim verify [--ranks 1-64,100] [--kind K] "
            "[--algo A] [--count C] [--chunk B] [--rph G] [--block-only] [--mem-gib G] "
            "[--plant skip-block]\n"
            "       rcoll-sim estimate CLUSTER_FILE COLL SIZE "
            "[--algo NAME]\n");
    return 2;
}
