/* A communicator's set-up after the bootstrap: the settings every rank
 * must share, the transport of each pair of ranks and opening them, and
 * the ring order (placement); closing the transports. */
#include "core.h"
#include "topo/topo.h"
#include "util/params.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The transports this rank may use: allowed by RCOLL_TRANSPORTS and
 * usable here, as a bit mask over rcoll_transports[]. */
uint32_t rcoll__usable_transports(void)
{
    char why[256];
    uint32_t mask = 0;
    for (int i = 0; rcoll_transports[i] && i < RCOLL_MAX_TLS; i++) {
        const rcoll_tl_ops_t *t = rcoll_transports[i];
        if (!rcoll_config_name_allowed(rcoll_config.transports, t->name))
            continue;
        why[0] = '\0';
        if (!t->usable(why, sizeof(why))) {
            rcoll_info(RCOLL_SUBSYS_INIT, "transport %s not usable: %s",
                       t->name, why);
            continue;
        }
        mask |= 1u << i;
    }
    return mask;
}

/* Chooses a transport for every pair of ranks (the first both can use that
 * reaches: shared memory needs the same host) and opens each transport
 * some pair needs, in the same order on every rank (setup is collective).
 * Every rank computes the same answer from the same all-gathered masks. */
static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Every rank must have the same value of each setting that shapes
 * schedules or the wire (rcoll_config_is_shared): one all-gather of a
 * hash over all of them; only when they differ, one of the per-setting
 * hashes (which setting, which rank) and one of the values (to name
 * both). Every rank sees the same gathered data, so all fail alike. */
#define AGREE_MAX 32
#define AGREE_VAL 120

rcoll_status_t rcoll__config_agree(struct rcoll_comm *c)
{
    int n = c->nranks, me = c->rank, np = rcoll_config_nparams(), ns = 0;
    int idx[AGREE_MAX];
    uint64_t mine[AGREE_MAX], all = 0xcbf29ce484222325ull;
    char v[AGREE_VAL];
    for (int i = 0; i < np && ns < AGREE_MAX; i++) {
        if (!rcoll_config_is_shared(i))
            continue;
        rcoll_config_value_string(i, v, sizeof(v));
        idx[ns] = i;
        mine[ns] = fnv1a(fnv1a(0xcbf29ce484222325ull,
                               rcoll_config_param(i)->name), v);
        all = fnv1a(fnv1a(all, rcoll_config_param(i)->name), v);
        all = fnv1a(all, "\n");
        ns++;
    }
    if (n == 1)
        return RCOLL_OK;
    rcoll_status_t st;
    uint64_t *h = calloc((size_t)n, sizeof(uint64_t) * AGREE_MAX);
    char *vals = NULL;
    if (!h)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    h[me] = all;
    if ((st = rcoll_bootstrap_allgather(&c->bs, h, sizeof(uint64_t))) !=
        RCOLL_OK)
        goto out;
    int same = 1;
    for (int a = 1; a < n; a++)
        same &= h[a] == h[0];
    if (same)
        goto out;
    memcpy(h + (size_t)me * AGREE_MAX, mine, sizeof(mine));
    if ((st = rcoll_bootstrap_allgather(&c->bs, h,
                                        sizeof(uint64_t) * AGREE_MAX)) !=
        RCOLL_OK)
        goto out;
    int var = -1, who = -1;
    for (int k = 0; k < ns && var < 0; k++)
        for (int a = 1; a < n; a++)
            if (h[(size_t)a * AGREE_MAX + k] != h[k]) {
                var = k;
                who = a;
                break;
            }
    if (var < 0) { /* the sets differ: different builds of rcoll */
        st = rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                              "the ranks' settings differ "
                              "in a way this build cannot name (different "
                              "rcoll versions on the ranks?)");
        goto out;
    }
    if (!(vals = calloc((size_t)n, AGREE_VAL))) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
        goto out;
    }
    rcoll_config_value_string(idx[var], vals + (size_t)me * AGREE_VAL,
                              AGREE_VAL);
    if ((st = rcoll_bootstrap_allgather(&c->bs, vals, AGREE_VAL)) !=
        RCOLL_OK)
        goto out;
    vals[AGREE_VAL - 1] = vals[(size_t)who * AGREE_VAL + AGREE_VAL - 1] = 0;
    st = rcoll__set_error(
        RCOLL_ERR_INVALID_ARGUMENT,
        "%s differs between ranks: rank 0 (%s pid %d) has "
        "\"%s\", rank %d (%s pid %d) has \"%s\"; it shapes schedules or "
        "messages, so set it the same on every rank",
        rcoll_config_param(idx[var])->name, c->bs.peers[0].hostname,
        c->bs.peers[0].pid, vals, who, c->bs.peers[who].hostname,
        c->bs.peers[who].pid, vals + (size_t)who * AGREE_VAL);
out:
    free(h);
    free(vals);
    return st;
}

/* What each rank offers, all-gathered: its usable transports, its cores,
 * its RCOLL_RING_ORDER (which must agree), and the descriptors it has to
 * spare (RLIMIT_NOFILE less those open; INT32_MAX unknown). */
typedef struct {
    uint32_t mask;
    int32_t ncores;
    int32_t ring_user;
    int32_t fd_room;
} tl_offer_t;

static rcoll_status_t gather_offers(struct rcoll_comm *c, tl_offer_t *o)
{
    int n = c->nranks, me = c->rank;
    o[me].mask = rcoll__usable_transports();
    o[me].ncores = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    o[me].ring_user = strcmp(rcoll_config.ring_order, "user") == 0;
    long open = rcoll_fd_open_count();
    unsigned long lim = rcoll_fd_limit_raise(0);
    o[me].fd_room = open < 0 || lim >= (unsigned long)INT32_MAX
                        ? INT32_MAX
                        : (int32_t)RCOLL_MAX(0, (long)lim - open);
    rcoll_status_t st = rcoll_bootstrap_allgather(&c->bs, o, sizeof(*o));
    if (st != RCOLL_OK)
        return st;
    for (int a = 1; a < n; a++)
        if (o[a].ring_user != o[0].ring_user)
            return rcoll__set_error(
                RCOLL_ERR_INVALID_ARGUMENT,
                "rank 0 (%s) has RCOLL_RING_ORDER=%s and rank %d (%s) has "
                "%s: it must be the same on every rank",
                c->bs.peers[0].hostname, o[0].ring_user ? "user" : "topo",
                a, c->bs.peers[a].hostname, o[a].ring_user ? "user" : "topo");
    return RCOLL_OK;
}

/* The transport of two masks: the first both offer that reaches (shared
 * memory needs the same host); its index + 1, 0 if none. */
int rcoll__pair_tl_masks(uint32_t a, uint32_t b, int same_host)
{
    uint32_t both = a & b;
    for (int t = 0; t < RCOLL_MAX_TLS && rcoll_transports[t]; t++)
        if ((both >> t & 1) && (!rcoll_transports[t]->local_only || same_host))
            return t + 1;
    return 0;
}

typedef struct {
    uint64_t host;
    uint32_t mask;
    int rank;
} pair_ent_t;

static int pair_ent_cmp(const void *x, const void *y)
{
    const pair_ent_t *a = x, *b = y;
    if (a->host != b->host)
        return a->host < b->host ? -1 : 1;
    if (a->mask != b->mask)
        return a->mask < b->mask ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static void pair_bad(rcoll_pairs_t *out, int a, int b)
{
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    if (out->bad_a < 0 || a < out->bad_a || (a == out->bad_a && b < out->bad_b)) {
        out->bad_a = a;
        out->bad_b = b;
    }
}

/* Ranks sorted by (host, mask) fall into classes; the pairs of one host
 * are checked class by class, the pairs across hosts mask by mask (a mask
 * on two hosts, or two masks on different hosts, make a pair). */
int rcoll__pairs_summary(int n, const uint64_t *host, const uint32_t *mask,
                         rcoll_pairs_t *out)
{
    typedef struct {
        uint32_t mask;
        int nhosts;    /* hosts with a rank of this mask */
        uint64_t host; /* the first of them */
        int rep, rep2; /* a rank on it; a rank on another host, or -1 */
    } dmask_t;
    memset(out, 0, sizeof(*out));
    out->bad_a = out->bad_b = -1;
    int shm = 0;
    while (rcoll_transports[shm] && rcoll_transports[shm] != &rcoll_tl_shm_ops)
        shm++;
    pair_ent_t *e = malloc((size_t)(n > 0 ? n : 1) * sizeof(*e));
    dmask_t *dm = malloc((size_t)(n > 0 ? n : 1) * sizeof(*dm));
    if (!e || !dm) {
        free(e);
        free(dm);
        return -1;
    }
    for (int r = 0; r < n; r++)
        e[r] = (pair_ent_t){host[r], mask[r], r};
    qsort(e, (size_t)n, sizeof(*e), pair_ent_cmp);
    int nd = 0;
    for (int hs = 0, he; hs < n; hs = he) { /* host: e[hs, he) */
        for (he = hs; he < n && e[he].host == e[hs].host; he++)
            ;
        if (he - hs > out->local_size)
            out->local_size = he - hs;
        /* classes of this host: runs of one mask */
        for (int cs = hs, ce; cs < he; cs = ce) {
            for (ce = cs; ce < he && e[ce].mask == e[cs].mask; ce++)
                ;
            int k = 0; /* shared-memory peers of a rank of this class */
            for (int ds = hs, de; ds < he; ds = de) {
                for (de = ds; de < he && e[de].mask == e[ds].mask; de++)
                    ;
                int cnt = de - ds - (ds == cs); /* not itself */
                if (cnt <= 0 || ds < cs)
                    goto count; /* no pair, or seen from the other side */
                int t = rcoll__pair_tl_masks(e[cs].mask, e[ds].mask, 1);
                if (!t) {
                    pair_bad(out, e[cs].rank, e[ds == cs ? ds + 1 : ds].rank);
                    continue;
                }
                out->used |= 1u << (t - 1);
                if (!rcoll_transports[t - 1]->local_only)
                    out->local_net = 1;
            count:
                if (cnt > 0 &&
                    rcoll__pair_tl_masks(e[cs].mask, e[ds].mask, 1) == shm + 1)
                    k += cnt;
            }
            if (k > out->most_shm)
                out->most_shm = k;
            int d = 0; /* the distinct masks, with their hosts */
            while (d < nd && dm[d].mask != e[cs].mask)
                d++;
            if (d == nd)
                dm[nd++] = (dmask_t){e[cs].mask, 1, e[cs].host, e[cs].rank, -1};
            else if (dm[d].host != e[cs].host) {
                if (dm[d].rep2 < 0)
                    dm[d].rep2 = e[cs].rank;
                dm[d].nhosts++;
            }
        }
    }
    for (int a = 0; a < nd; a++)
        for (int b = a; b < nd; b++) {
            int any = a == b ? dm[a].nhosts >= 2
                             : !(dm[a].nhosts == 1 && dm[b].nhosts == 1 &&
                                 dm[a].host == dm[b].host);
            if (!any)
                continue;
            int t = rcoll__pair_tl_masks(dm[a].mask, dm[b].mask, 0);
            if (t) {
                out->used |= 1u << (t - 1);
                continue;
            }
            if (a == b)
                pair_bad(out, dm[a].rep, dm[a].rep2);
            else if (dm[a].host != dm[b].host)
                pair_bad(out, dm[a].rep, dm[b].rep);
            else if (dm[b].rep2 >= 0)
                pair_bad(out, dm[a].rep, dm[b].rep2);
            else
                pair_bad(out, dm[a].rep2, dm[b].rep);
        }
    free(e);
    free(dm);
    return 0;
}

/* The tuner's inputs, the same on every rank (every rank must pick the
 * same algorithm and chunk size): the most ranks on one host, the fewest
 * cores of a host; the links start as shared memory's (pick_transports
 * and open_one slow them down). */
static void tune_inputs(struct rcoll_comm *c, const tl_offer_t *o,
                        const rcoll_pairs_t *pr)
{
    int n = c->nranks;
    c->env.link = rcoll_config.tune_shm;
    c->env.link_local = rcoll_config.tune_shm;
    c->env.link_name = "shm";
    c->env.paths = 1;
    c->env.host_nics = 1;
    c->env.local_size = pr->local_size > 0 ? pr->local_size : 1;
    c->env.ncores = o[0].ncores > 0 ? o[0].ncores : 1;
    for (int a = 0; a < n; a++)
        if (o[a].ncores > 0 && o[a].ncores < c->env.ncores)
            c->env.ncores = o[a].ncores;
}

/* The transport of ranks a and b (rcoll__pair_tl_masks): computed on
 * demand from the gathered offers, so no rank keeps an n x n table. */
static int pair_tl(const struct rcoll_comm *c, const tl_offer_t *o, int a,
                   int b)
{
    return rcoll__pair_tl_masks(o[a].mask, o[b].mask,
                                c->bs.peers[a].host_hash ==
                                    c->bs.peers[b].host_hash);
}

/* Every pair has a transport (else the error names both ranks); used[t]
 * is set for each transport some pair uses. */
static rcoll_status_t pick_transports(struct rcoll_comm *c,
                                      const tl_offer_t *o,
                                      const rcoll_pairs_t *pr, int *used)
{
    if (pr->bad_a >= 0) {
        int a = pr->bad_a, b = pr->bad_b;
        return rcoll__set_error(
            RCOLL_ERR_NO_DEVICE,
            "no transport connects rank %d (%s, transports 0x%x) and rank "
            "%d (%s, transports 0x%x): check RCOLL_TRANSPORTS on both", a,
            c->bs.peers[a].hostname, o[a].mask, b, c->bs.peers[b].hostname,
            o[b].mask);
    }
    for (int t = 0; t < RCOLL_MAX_TLS; t++)
        if (pr->used >> t & 1)
            used[t] = 1;
    if (pr->local_net)
        c->env.link_local = rcoll_config.tune_tcp;
    return RCOLL_OK;
}

/* How many peers every rank can connect to on first use over the
 * transports whose connections then take descriptors
 * (coll_env_t.peer_room): the fewest spare descriptors of any rank, less a
 * reserve (listener, epoll, shared memory's pidfds, the program's own
 * files), over the descriptors per peer; 0 when every rank has room for
 * all its peers, or no connection is made on first use. */
#define PEER_ROOM_RESERVE 16
static void peer_room(struct rcoll_comm *c, const tl_offer_t *o,
                      const int *used)
{
    int n = c->nranks, lanes = 0, local = 0;
    c->env.peer_room = 0;
    for (int t = 0; t < RCOLL_MAX_TLS && rcoll_transports[t]; t++) {
        const rcoll_tl_ops_t *ops = rcoll_transports[t];
        if (used[t] && ops->local_only)
            local = c->env.local_size - 1;
        if (used[t] && ops->fd_lanes)
            lanes = RCOLL_MAX(lanes, ops->fd_lanes(n));
    }
    if (lanes < 1)
        return;
    long room = INT32_MAX;
    for (int a = 0; a < n; a++)
        room = RCOLL_MIN(room, (long)o[a].fd_room);
    room = (room - PEER_ROOM_RESERVE - local) / lanes;
    if (room >= n - 1)
        return;
    c->env.peer_room = (int)RCOLL_MAX(1, room);
    if (c->rank != 0)
        return;
    if (room < COLL_PEERS_LOG(n))
        rcoll_warn("descriptors for only %d peers (RLIMIT_NOFILE, %d "
                   "sockets each): the ring and log-step algorithms of %d "
                   "ranks may need %d; raise the limit (ulimit -n)",
                   c->env.peer_room, lanes, n, COLL_PEERS_LOG(n));
    else
        rcoll_info(RCOLL_SUBSYS_INIT, "descriptors for %d peers "
                   "(RLIMIT_NOFILE, %d sockets each), not all %d: the "
                   "algorithms that need more partners are left out",
                   c->env.peer_room, lanes, n - 1);
}

/* The communicator's chunk (every transport's slot payload), the same on
 * every rank: RCOLL_CHUNK_SIZE, lowered when the rank with the most
 * shared-memory peers would need more than RCOLL_SHM_BUDGET for their
 * receive rings. */
static void choose_chunk(struct rcoll_comm *c, const rcoll_pairs_t *pr)
{
    int most = pr->most_shm, over = 0;
    size_t want = rcoll_config.chunk_size;
    c->env.chunk_size =
        rcoll_tl_chunk_fit(want, rcoll_config.nslots, most,
                           coll_area_region(rcoll_config.shm_area), &over);
    if (c->rank != 0)
        return;
    if (over)
        rcoll_warn("%d shared-memory peers per rank need more than "
                   "RCOLL_SHM_BUDGET=%zu bytes of /dev/shm per rank even "
                   "with %zu-byte chunks: raise it, or lower RCOLL_NSLOTS",
                   most, rcoll_config.shm_budget, c->env.chunk_size);
    else if (c->env.chunk_size < want)
        rcoll_info(RCOLL_SUBSYS_INIT, "chunk %zu bytes, not %zu "
                   "(RCOLL_CHUNK_SIZE): the receive rings of %d "
                   "shared-memory peers per rank fit RCOLL_SHM_BUDGET=%zu",
                   c->env.chunk_size, want, most, rcoll_config.shm_budget);
}

/* rcoll_tl_params_t's pair predicate: the pairs of transport t */
typedef struct {
    const struct rcoll_comm *c;
    const tl_offer_t *o;
    int t;
} pair_arg_t;

static int pair_is(const void *arg, int a, int b)
{
    const pair_arg_t *x = arg;
    return a != b && pair_tl(x->c, x->o, a, b) == x->t + 1;
}

/* Opens transport t for its pairs (collective: every rank calls it for
 * the same transports in the same order). */
static rcoll_status_t open_one(struct rcoll_comm *c, int t,
                               const tl_offer_t *o, const uint8_t secret[16])
{
    const rcoll_tl_ops_t *ops = rcoll_transports[t];
    int n = c->nranks, me = c->rank;
    pair_arg_t pa = {c, o, t};
    if (!ops->local_only) {
        c->env.link = rcoll_config.tune_tcp;
        c->env.link_name = ops->name;
    }
    if (!ops->send_revoke) /* required: see transport.h */
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "transport %s has no "
                                "send_revoke", ops->name);
    rcoll_tl_ep_t **eps = calloc((size_t)n, sizeof(*eps));
    if (!eps)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    rcoll_tl_params_t tp = {
        .rank = me, .nranks = n, .secret = secret, .bs = &c->bs,
        .epfd = c->epfd, .chunk_size = c->env.chunk_size,
        .nslots = rcoll_config.nslots, .ev = &c->tl_events,
        .pair = pair_is, .pair_arg = &pa, .timeout = c->timeout,
        .region = coll_area_region(rcoll_config.shm_area)};
    rcoll_status_t st = ops->ctx_create(&tp, &c->tl_ctxs[c->ntls], eps);
    if (st != RCOLL_OK) {
        free(eps);
        return st;
    }
    c->tls[c->ntls] = ops;
    if (!ops->local_only && ops->paths) {
        int np = ops->paths(c->tl_ctxs[c->ntls]);
        if (np > 1 && (c->env.paths == 1 || np < c->env.paths))
            c->env.paths = np;
    }
    if (!ops->local_only && ops->host_nics)
        c->env.host_nics = RCOLL_MAX(c->env.host_nics,
                                     ops->host_nics(c->tl_ctxs[c->ntls]));
    if (ops->wait && c->wait_tl < 0)
        c->wait_tl = c->ntls;
    c->ntls++;
    for (int p = 0; p < n; p++)
        if (pair_is(&pa, me, p)) {
            c->eps[p] = eps[p];
            c->peer_tl[p] = ops;
        }
    free(eps);
    rcoll_debug(RCOLL_SUBSYS_INIT, "rank %d: transport %s opened", me,
                ops->name);
    return RCOLL_OK;
}

rcoll_status_t rcoll__open_transports(struct rcoll_comm *c,
                                      const uint8_t secret[16])
{
    int n = c->nranks;
    int used[RCOLL_MAX_TLS] = {0};
    tl_offer_t *offers = calloc((size_t)n, sizeof(*offers));
    rcoll_status_t st = RCOLL_OK;
    if (!offers)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    if ((st = gather_offers(c, offers)) != RCOLL_OK)
        goto out;
    {
        rcoll_pairs_t pr;
        uint64_t *hh = malloc((size_t)n * sizeof(*hh));
        uint32_t *mk = malloc((size_t)n * sizeof(*mk));
        int bad = !hh || !mk;
        for (int r = 0; !bad && r < n; r++) {
            hh[r] = c->bs.peers[r].host_hash;
            mk[r] = offers[r].mask;
        }
        bad = bad || rcoll__pairs_summary(n, hh, mk, &pr) != 0;
        free(hh);
        free(mk);
        if (bad) {
            st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
            goto out;
        }
        tune_inputs(c, offers, &pr);
        if ((st = pick_transports(c, offers, &pr, used)) != RCOLL_OK)
            goto out;
        choose_chunk(c, &pr);
        peer_room(c, offers, used);
    }
    rcoll__engine_tl_events(c);
    for (int t = 0; rcoll_transports[t] && t < RCOLL_MAX_TLS; t++)
        if (used[t] && (st = open_one(c, t, offers, secret)) != RCOLL_OK)
            goto out;
out:
    free(offers);
    return st;
}

/* The ring order and the host structure (coll_env_t): hosts by their
 * lowest rank, each host's ranks contiguous and in rank order
 * (RCOLL_RING_ORDER=topo), or rank order (user). Every rank computes the
 * same answer from the same rendezvous table. */
/* RCOLL_TOPO_DUMP_FILE: rank 0 writes the topology in use, once per
 * process (a failure is a warning: the job does not depend on it). */
static pthread_once_t topo_dump_once = PTHREAD_ONCE_INIT;
static void topo_dump(void)
{
    rcoll_topo_t *t = NULL;
    const char *src = "";
    char err[512] = "";
    if (rcoll_topo_get(&t, &src, err, sizeof(err)) != RCOLL_OK) {
        rcoll_warn("RCOLL_TOPO_DUMP_FILE: %s", err);
        return;
    }
    rcoll_info(RCOLL_SUBSYS_INIT, "topology (%s): %d packages, %d GPUs, %d "
               "NICs, written to %s", src, rcoll_topo_npackages(t),
               rcoll_topo_ngpus(t), rcoll_topo_nnics(t),
               rcoll_config.topo_dump_file);
    rcoll_topo_free(t);
}

void rcoll__topo_dump_once(void)
{
    pthread_once(&topo_dump_once, topo_dump);
}

/* The rings of channels 1.. (coll_sched_build_channels,
 * rcoll_topo_chan_ring): RCOLL_NCHANNELS of them, or across hosts 2 or as
 * many as one host's ranks use NICs, none on one host. */
static rcoll_status_t chan_rings_init(struct rcoll_comm *c, const int *host)
{
    int n = c->nranks, nc = rcoll_config.nchannels;
    if (!nc)
        nc = c->env.nhosts > 1 ? RCOLL_MAX(2, c->env.host_nics) : 1;
    nc = RCOLL_MIN(nc, COLL_CHAN_MAX);
    c->env.nchan_rings = nc;
    c->env.chan_ring[0] = c->ring;
    c->env.chan_pos[0] = c->ring_pos;
    c->env.host_min = n;
    for (int b = 0, k; b < n; b += k) { /* each host's run of the ring */
        for (k = 1; b + k < n && host[c->ring[b + k]] == host[c->ring[b]];)
            k++;
        c->env.host_min = RCOLL_MIN(c->env.host_min, k);
    }
    if (nc < 2)
        return RCOLL_OK;
    if (!(c->chan_rings = malloc((size_t)(nc - 1) * 2 * (size_t)n *
                                 sizeof(int)))) {
        c->env.nchan_rings = 1;
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory for the "
                                "rings of %d channels", nc);
    }
    for (int ch = 1; ch < nc; ch++) {
        int *ring = c->chan_rings + (size_t)(ch - 1) * 2 * (size_t)n;
        int *pos = ring + n;
        rcoll_topo_chan_ring(n, c->ring, host, ch, nc, ring);
        for (int i = 0; i < n; i++)
            pos[ring[i]] = i;
        c->env.chan_ring[ch] = ring;
        c->env.chan_pos[ch] = pos;
    }
    return RCOLL_OK;
}

rcoll_status_t rcoll__placement_init(struct rcoll_comm *c)
{
    int n = c->nranks;
    int *host = malloc((size_t)n * sizeof(int)); /* rank -> host index */
    uint64_t *ids = calloc((size_t)n, sizeof(uint64_t));
    c->ring = malloc((size_t)n * sizeof(int));
    c->ring_pos = malloc((size_t)n * sizeof(int));
    if (!host || !ids || !c->ring || !c->ring_pos) {
        free(host);
        free(ids);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    }
    for (int r = 0; r < n; r++)
        ids[r] = c->bs.peers[r].host_hash;
    int topo = strcmp(rcoll_config.ring_order, "user") != 0;
    int nh = rcoll_topo_ring_order(n, ids, topo, c->ring, host,
                                   &c->env.host_size);
    if (nh < 0 || coll_locality_init(&c->env.loc, n, host, nh, c->ring)) {
        free(host);
        free(ids);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory for the "
                                "placement of %d ranks", n);
    }
    for (int i = 0; i < n; i++)
        c->ring_pos[c->ring[i]] = i;
    c->env.ring = c->ring;
    c->env.ring_pos = c->ring_pos;
    c->env.nhosts = nh;
    if (chan_rings_init(c, host) != RCOLL_OK) {
        free(host);
        free(ids);
        return RCOLL_ERR_NO_MEMORY;
    }
    if (c->rank == 0 && rcoll__log_level >= RCOLL_LOG_INFO) {
        char buf[512];
        size_t off = 0;
        for (int i = 0; i < n && off < sizeof(buf) - 16; i++)
            off += (size_t)snprintf(
                buf + off, sizeof(buf) - off, "%s%d",
                i == 0 ? "" : host[c->ring[i]] != host[c->ring[i - 1]] ? " | "
                                                                       : " ",
                c->ring[i]);
        if (off >= sizeof(buf) - 16)
            snprintf(buf + off, sizeof(buf) - off, " ...");
        rcoll_info(RCOLL_SUBSYS_INIT, "ring order (%s): %s (%d host%s, %s)",
                   topo ? "topo" : "user", buf, nh, nh == 1 ? "" : "s",
                   c->env.host_size ? "as many ranks on each"
                                    : "hosts of different sizes or "
                                      "interleaved");
    }
    free(host);
    free(ids);
    return RCOLL_OK;
}

void rcoll__mem_reg_free(struct rcoll_comm *c, struct rcoll_mem_reg *m)
{
    for (int i = 0; i < c->ntls; i++)
        if (m->tl[i] && c->tls[i]->mem_dereg)
            c->tls[i]->mem_dereg(c->tl_ctxs[i], m->tl[i]);
    free(m);
}

void rcoll__close_transports(struct rcoll_comm *c, int abort,
                             const char *reason)
{
    while (c->regs) {
        struct rcoll_mem_reg *m = c->regs;
        c->regs = m->next;
        rcoll__mem_reg_free(c, m);
    }
    /* out of reach first (comm_kick_locked), then destroyed */
    pthread_mutex_lock(&c->lock);
    int n = c->ntls;
    c->ntls = 0;
    c->wait_tl = -1;
    pthread_mutex_unlock(&c->lock);
    for (int i = n - 1; i >= 0; i--)
        c->tls[i]->ctx_destroy(c->tl_ctxs[i], abort, reason);
}
