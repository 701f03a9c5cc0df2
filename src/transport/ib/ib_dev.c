/* The verbs transport's devices (ib.h): which devices and ports are
 * allowed and usable, the address rdma_cm binds and the device behind it,
 * the GID the oob mode uses, opening a context's device, and rcoll-info's
 * description. */
#include "transport/ib/ib.h"
#include "topo/topo.h"

/* RCOLL_IB_HCA: "mlx5,erdma" (prefixes), "=mlx5_0" (exact names), "^siw"
 * (excluded prefixes); empty allows every device. */
static int ib_device_allowed(const char *name)
{
    const char *spec = rcoll_config.ib_hca;
    char buf[256];
    if (!spec || !spec[0])
        return 1;
    int neg = spec[0] == '^', exact = 0, hit = 0;
    spec += neg;
    if (spec[0] == '=') {
        exact = 1;
        spec++;
    }
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save, *t = strtok_r(buf, ",", &save); t;
         t = strtok_r(NULL, ",", &save))
        if (exact ? !strcmp(name, t) : !strncmp(name, t, strlen(t)))
            hit = 1;
    return neg ? !hit : hit;
}

/* libibverbs and librdmacm are loaded at run time (util/dl.h): a host
 * without them has no ib transport, and `why` says which file is missing */
int ib_libs_loaded(char *why, size_t len)
{
    return rcoll_dl_open(RCOLL_DL_VERBS, why, len) == 0 &&
           rcoll_dl_open(RCOLL_DL_RDMACM, why, len) == 0;
}

int ib_usable(char *why, size_t len)
{
    int n = 0, ok = 0;
    if (!ib_libs_loaded(why, len))
        return 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        snprintf(why, len, "no RDMA devices (ibv_get_device_list: %s)",
                 strerror(errno));
        return 0;
    }
    for (int i = 0; i < n && !ok; i++)
        ok = ib_device_allowed(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    if (!ok)
        snprintf(why, len, n ? "no RDMA device allowed by RCOLL_IB_HCA"
                             : "no RDMA devices");
    return ok;
}

static int ib_dev_imm(struct ibv_context *verbs)
{
    const char *m = rcoll_config.ib_imm;
    if (m && (!strcmp(m, "1") || !strcmp(m, "yes")))
        return 1;
    if (m && (!strcmp(m, "0") || !strcmp(m, "no")))
        return 0;
    /* iWARP has no immediate data; erdma adds it */
    if (verbs->device->transport_type == IBV_TRANSPORT_IWARP)
        return !strncmp(ibv_get_device_name(verbs->device), "erdma", 5);
    return 1;
}

/* siw (soft-iWARP) sends on a kernel TCP socket from the context of the
 * process that posts, without MSG_NOSIGNAL: a send to a peer whose
 * connection was reset raises SIGPIPE in this process, which by default
 * kills it (a survivor of a killed peer would die with status 141).
 * So on iWARP devices SIGPIPE is ignored when it is at its default; a
 * handler the program installed is left alone. Writes to a closed pipe or
 * socket then fail with EPIPE instead, as they do under Python. */
static void ib_sigpipe_guard(struct rcoll_tl_ctx *ctx, const ib_dev_t *d)
{
    struct sigaction old, ign;
    if (d->verbs->device->transport_type != IBV_TRANSPORT_IWARP)
        return;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
        old.sa_handler != SIG_DFL)
        return;
    if (sigaction(SIGPIPE, &ign, NULL) == 0)
        rcoll_info(RCOLL_SUBSYS_NET,
                   "ib: rank %d: SIGPIPE ignored (it was "
                   "at its default; %s sends from this process on kernel "
                   "TCP sockets)",
                   ctx->p.rank, d->devname);
}

const char *ib_link_layer_str(uint8_t ll, struct ibv_context *v)
{
    if (v->device->transport_type == IBV_TRANSPORT_IWARP)
        return "iWARP";
    return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

/* A usable device port (allowed, active) found through one of its IPv4
 * addresses, with the rdma_cm id bound to it. */
typedef struct {
    struct rdma_cm_id *id;
    struct sockaddr_in a;
    uint32_t mask;            /* the address's netmask (network order) */
    char dev[64];
    uint8_t port;
} ib_cand_t;
#define IB_MAX_CAND 64

/* Binds an id to address a: NULL and *why when its device cannot serve. */
static struct rdma_cm_id *ib_try_addr(struct rcoll_tl_ctx *ctx,
                                      struct sockaddr_in *a, const char **why)
{
    struct rdma_cm_id *id;
    *why = NULL;
    if (rdma_create_id(ctx->ech, &id, NULL, RDMA_PS_TCP) != 0) {
        *why = "rdma_create_id failed";
        return NULL;
    }
    if (rdma_bind_addr(id, (struct sockaddr *)a) != 0 || !id->verbs)
        *why = "no RDMA device";
    else if (!ib_device_allowed(ibv_get_device_name(id->verbs->device)))
        *why = "device excluded by RCOLL_IB_HCA";
    else {
        struct ibv_port_attr pa;
        if (ibv_query_port(id->verbs, id->port_num, &pa) != 0 ||
            pa.state != IBV_PORT_ACTIVE)
            *why = "port not active";
    }
    if (*why) {
        rdma_destroy_id(id);
        return NULL;
    }
    return id;
}

/* This rank's place among the communicator's ranks on its host */
static void ib_local_rank(const struct rcoll_tl_ctx *ctx, int *local,
                          int *nlocal)
{
    const rcoll_boot_peer_t *pe = ctx->p.bs->peers;
    uint64_t me = pe[ctx->p.rank].host_hash;
    *local = *nlocal = 0;
    for (int r = 0; r < ctx->p.nranks; r++)
        if (pe[r].host_hash == me) {
            *local += r < ctx->p.rank;
            (*nlocal)++;
        }
}

/* The host's topology, read once per process (hwloc's discovery costs
 * milliseconds; a job makes several communicators); NULL if none. */
static rcoll_topo_t *ib_topo;
static pthread_once_t ib_topo_once = PTHREAD_ONCE_INIT;
static void ib_topo_read(void)
{
    const char *src;
    char err[256];
    if (rcoll_topo_read(&ib_topo, &src, err, sizeof(err)) != RCOLL_OK)
        rcoll_debug(RCOLL_SUBSYS_NET, "ib: no topology for the device "
                    "choice (%s)", err);
}

/* 1 if every candidate's address is in one subnet (so a rank on any of
 * them reaches the peers on all the others as it reaches its own) */
static int ib_one_subnet(const ib_cand_t *c, int nc)
{
    for (int i = 1; i < nc; i++)
        if (c[i].mask != c[0].mask ||
            ((c[i].a.sin_addr.s_addr ^ c[0].a.sin_addr.s_addr) & c[0].mask))
            return 0;
    return 1;
}

/* Which of the nc usable device ports (found in address order, the
 * bootstrap address's first) this rank takes: the first with one, with
 * RCOLL_IB_NIC=boot, or with auto when they span several subnets (a rank
 * on one may not reach a peer on another); spread (and auto on one
 * subnet) shares the host's ranks out over them in name order
 * (rcoll_topo_rank_nic, with the topology when one can be read). */
static int ib_choose_device(struct rcoll_tl_ctx *ctx, const ib_cand_t *c,
                            int nc, const char **how)
{
    const char *mode = rcoll_config.ib_nic ? rcoll_config.ib_nic : "auto";
    if (!strcmp(mode, "all")) /* (out of band: one device, as auto) */
        mode = "auto";
    *how = "the only usable device";
    if (nc <= 1)
        return 0;
    if (!strcmp(mode, "boot") ||
        (!strcmp(mode, "auto") && !ib_one_subnet(c, nc))) {
        *how = !strcmp(mode, "boot") ? "RCOLL_IB_NIC=boot"
                                     : "devices in several subnets: the "
                                       "bootstrap's (RCOLL_IB_NIC=spread "
                                       "spreads ranks if they reach each "
                                       "other)";
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: %d devices: %s (%s)",
                   ctx->p.rank, nc, c[0].dev, *how);
        return 0;
    }
    const char *names[IB_MAX_CAND];
    int order[IB_MAX_CAND];
    for (int i = 0; i < nc; i++) { /* by name and port: alike on every rank */
        int j = i;
        while (j > 0 && (strcmp(c[order[j - 1]].dev, c[i].dev) > 0 ||
                         (!strcmp(c[order[j - 1]].dev, c[i].dev) &&
                          c[order[j - 1]].port > c[i].port))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int i = 0; i < nc; i++)
        names[i] = c[order[i]].dev;
    int local, nlocal;
    ib_local_rank(ctx, &local, &nlocal);
    pthread_once(&ib_topo_once, ib_topo_read);
    int k = rcoll_topo_rank_nic(ib_topo, local, nlocal, names, nc, how);
    rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: rank %d of %d on its host, "
               "%d devices: %s port %u (%s)", ctx->p.rank, local, nlocal, nc,
               names[k], c[order[k]].port, *how);
    return order[k];
}

/* The host's up IPv4 addresses other than loopback, the bootstrap's first
 * (cand[], with their netmasks); how many. */
static int ib_addresses(struct rcoll_tl_ctx *ctx, struct sockaddr_in *cand,
                        uint32_t *mask)
{
    const rcoll_sockaddr_t *boot = &ctx->p.bs->peers[ctx->p.rank].boot_addr;
    int nc = 0;
    if (boot->sa.sa_family == AF_INET) {
        cand[nc] = boot->sin;
        mask[nc++] = 0xffffffffu;
    }
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        return nc;
    for (struct ifaddrs *i = ifa; i && nc < IB_MAX_CAND; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
            !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
            continue;
        const struct sockaddr_in *a = (const struct sockaddr_in *)i->ifa_addr;
        uint32_t m = i->ifa_netmask ? ((const struct sockaddr_in *)
                                       i->ifa_netmask)->sin_addr.s_addr
                                    : 0xffffffffu;
        if (nc > 0 && boot->sa.sa_family == AF_INET &&
            a->sin_addr.s_addr == cand[0].sin_addr.s_addr) {
            mask[0] = m; /* the bootstrap's, already first */
            continue;
        }
        cand[nc] = *a;
        mask[nc++] = m;
    }
    freeifaddrs(ifa);
    return nc;
}

/* Binds the listening id to an IPv4 address of an allowed device with an
 * active port, on the device ib_choose_device gives this rank (the first
 * address found of each device port stands for it). */
static rcoll_status_t ib_pick_address(struct rcoll_tl_ctx *ctx)
{
    struct sockaddr_in cand[IB_MAX_CAND];
    uint32_t mask[IB_MAX_CAND];
    ib_cand_t dev[IB_MAX_CAND];
    int nd = 0;
    const char *mode = rcoll_config.ib_nic;
    char tried[512] = "";
    size_t toff = 0;
    if (mode && strcmp(mode, "auto") != 0 && strcmp(mode, "boot") != 0 &&
        strcmp(mode, "spread") != 0 && strcmp(mode, "all") != 0)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "ib: RCOLL_IB_NIC=\"%s\": expected auto, "
                                "spread, boot or all", mode);
    /* all, but not out of band (it exchanges one device's GID): there
     * one device per rank, chosen as auto chooses */
    int all = mode && !strcmp(mode, "all");
    if (all && ctx->oob) {
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: RCOLL_IB_NIC=all needs "
                   "rdma_cm; out of band (RCOLL_IB_CONNECT=oob) a rank uses "
                   "one device, chosen as with auto", ctx->p.rank);
        all = 0;
    }
    int nc = ib_addresses(ctx, cand, mask);
    for (int i = 0; i < nc; i++) {
        struct sockaddr_in a = cand[i];
        char s[INET_ADDRSTRLEN];
        const char *why;
        a.sin_port = 0;
        inet_ntop(AF_INET, &a.sin_addr, s, sizeof(s));
        struct rdma_cm_id *id = ib_try_addr(ctx, &a, &why);
        if (!id) {
            toff += (size_t)snprintf(tried + toff, sizeof(tried) - RCOLL_MIN(toff, sizeof(tried)),
                                     "%s%s: %s", toff ? "; " : "", s, why);
            if (toff >= sizeof(tried))
                toff = sizeof(tried) - 1;
            continue;
        }
        const char *name = ibv_get_device_name(id->verbs->device);
        int seen = 0;
        for (int d = 0; d < nd; d++) /* (all: a device's first port only;
                                        its ports share one context) */
            seen |= !strcmp(dev[d].dev, name) &&
                    (dev[d].port == id->port_num || all);
        if (seen) {
            rdma_destroy_id(id);
            continue;
        }
        dev[nd].id = id;
        dev[nd].a = a;
        dev[nd].mask = mask[i];
        dev[nd].port = id->port_num;
        snprintf(dev[nd].dev, sizeof(dev[nd].dev), "%s", name);
        nd++;
    }
    if (nd == 0)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                                "ib: rank %d found no IPv4 address on a usable "
                                "RDMA device (%s); check RCOLL_IB_HCA, or exclude "
                                "the transport with RCOLL_TRANSPORTS=^ib",
                                ctx->p.rank, tried[0] ? tried : "no addresses");
    /* all: each of them, in the order found, the bootstrap's first */
    const char *how;
    int k = all ? 0 : ib_choose_device(ctx, dev, nd, &how);
    int n = all ? RCOLL_MIN(nd, IB_MAX_DEVS) : 1;
    for (int d = 0; d < nd; d++)
        if (all ? d >= n : d != k)
            rdma_destroy_id(dev[d].id);
    for (int i = 0; i < n; i++) {
        const ib_cand_t *c = &dev[all ? i : k];
        ib_dev_t *t = &ctx->devs[i];
        t->ctx = ctx;
        t->idx = i;
        t->listen_id = c->id;
        t->verbs = c->id->verbs;
        t->port = c->id->port_num;
        t->addr = c->a;
        t->mask = c->mask;
        snprintf(t->devname, sizeof(t->devname), "%s", c->dev);
        inet_ntop(AF_INET, &t->addr.sin_addr, t->addr_str,
                  sizeof(t->addr_str));
    }
    ctx->ndev = n;
    if (all)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: %d of its %d usable "
                   "devices (RCOLL_IB_NIC=all)", ctx->p.rank, n, nd);
    return RCOLL_OK;
}

/* The GID the oob mode uses on this port: RCOLL_IB_GID_INDEX, else the
 * best scored (RoCE v2, IPv4-mapped, the address rdma_cm picked). */
int ib_pick_gid(const ib_dev_t *d, struct ibv_port_attr *pa, union ibv_gid *gid)
{
    const char *gi = rcoll_config.ib_gid_index;
    if (gi && gi[0] && strcmp(gi, "auto") != 0) {
        char *end;
        long v = strtol(gi, &end, 0);
        if (*end || v < 0 || v > 65535 ||
            ibv_query_gid(d->verbs, d->port, (int)v, gid) != 0)
            return -1;
        return (int)v;
    }
    if (pa->link_layer != IBV_LINK_LAYER_ETHERNET) {
        ibv_query_gid(d->verbs, d->port, 0, gid);
        return 0;
    }
    int best = -1, best_score = 0;
    for (int i = 0; i < pa->gid_tbl_len && i < 256; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(d->verbs, d->port, (uint32_t)i, &e, 0) != 0)
            continue;
        const uint8_t *g = e.gid.raw;
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        int is_v4 = !memcmp(g, v4, 12);
        int link_local = g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
        int zero = 1;
        for (int k = 0; k < 16; k++)
            zero &= g[k] == 0;
        if (zero || link_local)
            continue;
        int score = (e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 4 : 1) +
                    (is_v4 ? 2 : 0) +
                    (is_v4 && !memcmp(g + 12, &d->addr.sin_addr, 4) ? 8 : 0);
        if (score > best_score) {
            best_score = score;
            best = i;
            *gid = e.gid;
        }
    }
    return best;
}

/* The device: the address and device rdma_cm picks, its protection
 * domain, completion channel and registration cache. */
rcoll_status_t ib_dev_open(struct rcoll_tl_ctx *ctx)
{
    ctx->ech = rdma_create_event_channel();
    if (!ctx->ech)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: rdma_create_event_"
                                "channel: %s (is rdma_ucm loaded?)",
                                strerror(errno));
    rcoll_status_t st = ib_pick_address(ctx);
    if (st != RCOLL_OK)
        return st;
    static const rcoll_rcache_ops_t rc_ops = {.reg = ib_rc_reg,
                                              .dereg = ib_rc_dereg};
    for (int i = 0; i < ctx->ndev; i++) {
        ib_dev_t *d = &ctx->devs[i];
        d->imm_ok = ib_dev_imm(d->verbs);
        ib_sigpipe_guard(ctx, d);
        if (!(d->pd = ibv_alloc_pd(d->verbs)) ||
            !(d->cch = ibv_create_comp_channel(d->verbs)))
            return rcoll__set_error(RCOLL_ERR_SYSTEM,
                                    "ib: protection domain or "
                                    "completion channel on %s: %s",
                                    d->devname, strerror(errno));
        if (!(d->rcache = rcoll_rcache_create(&rc_ops, d,
                                              rcoll_config.rcache_max)))
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    }
    return RCOLL_OK;
}

/* rcoll-info -t: every device, its ports, the IPv4 addresses rdma_cm maps
 * to it, and the GID the oob mode would pick. */
void ib_describe(FILE *f)
{
    int n = 0;
    char why[320];
    if (!ib_libs_loaded(why, sizeof(why))) {
        fprintf(f, "         %s\n", why);
        return;
    }
    struct ibv_device **list = ibv_get_device_list(&n);
    struct rdma_event_channel *ech = rdma_create_event_channel();
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        ifa = NULL;
    for (int i = 0; list && i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *v = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (!v || ibv_query_device(v, &da) != 0) {
            fprintf(f, "         %s: cannot open: %s\n", name, strerror(errno));
            if (v)
                ibv_close_device(v);
            continue;
        }
        fprintf(f, "         %s%s: %s, %d port(s), immediate data: %s\n", name,
                ib_device_allowed(name) ? "" : " (excluded by RCOLL_IB_HCA)",
                v->device->transport_type == IBV_TRANSPORT_IWARP ? "iWARP"
                                                                  : "IB/RoCE",
                da.phys_port_cnt, ib_dev_imm(v) ? "yes" : "no (WRITE + SEND)");
        for (uint8_t port = 1; port <= da.phys_port_cnt; port++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(v, port, &pa) != 0)
                continue;
            fprintf(f, "           port %u: %s, %s, MTU %d", port,
                    ibv_port_state_str(pa.state),
                    ib_link_layer_str(pa.link_layer, v), 128 << pa.active_mtu);
            ib_dev_t tmp;
            memset(&tmp, 0, sizeof(tmp));
            tmp.verbs = v;
            tmp.port = port;
            union ibv_gid gid;
            if (v->device->transport_type != IBV_TRANSPORT_IWARP) {
                int gi = ib_pick_gid(&tmp, &pa, &gid);
                char gs[INET6_ADDRSTRLEN] = "-";
                if (gi >= 0)
                    inet_ntop(AF_INET6, gid.raw, gs, sizeof(gs));
                fprintf(f, ", oob GID index %d (%s)", gi, gs);
            }
            fprintf(f, "\n");
        }
        ibv_close_device(v);
        /* the addresses rdma_cm binds to this device */
        fprintf(f, "           IPv4 (rdma_cm):");
        int any = 0;
        for (struct ifaddrs *a = ifa; ech && a; a = a->ifa_next) {
            if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET ||
                !(a->ifa_flags & IFF_UP))
                continue;
            struct rdma_cm_id *id;
            struct sockaddr_in sin = *(struct sockaddr_in *)a->ifa_addr;
            sin.sin_port = 0;
            if (rdma_create_id(ech, &id, NULL, RDMA_PS_TCP) != 0)
                break;
            if (rdma_bind_addr(id, (struct sockaddr *)&sin) == 0 && id->verbs &&
                !strcmp(ibv_get_device_name(id->verbs->device), name)) {
                char s[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &sin.sin_addr, s, sizeof(s));
                fprintf(f, " %s (%s)", s, a->ifa_name);
                any = 1;
            }
            rdma_destroy_id(id);
        }
        fprintf(f, "%s\n", any ? "" : " none");
    }
    if (ifa)
        freeifaddrs(ifa);
    if (ech)
        rdma_destroy_event_channel(ech);
    if (list)
        ibv_free_device_list(list);
}
