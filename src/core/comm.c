/* Communicator lifetime: creation, destroy and abort, memory
 * registration, and the small queries (rank, size, asynchronous error).
 * The engine is in engine.c, the set-up after the bootstrap in setup.c,
 * requests in request.c. */
#include "core.h"
#include "util/params.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

RCOLL_API rcoll_status_t rcoll_comm_init_rank(rcoll_comm_t *comm, int nranks,
                                              const rcoll_unique_id_t *id,
                                              int rank)
{
    return rcoll_comm_init_rank_config(comm, nranks, id, rank, NULL);
}

/* A field of the caller's config, if its size covers it. */
#define CONFIG_HAS(cfg, field)                                               \
    ((cfg) && (cfg)->size >= offsetof(rcoll_comm_config_t, field) +          \
                                  sizeof((cfg)->field))

/* The arguments and the process's settings, before anything is made. */
static rcoll_status_t init_check(rcoll_comm_t *comm, int nranks,
                                 const rcoll_unique_id_t *id, int rank)
{
    rcoll_status_t st;
    if ((st = rcoll_config_init()) != RCOLL_OK)
        return st;
    if ((st = coll_algo_check_config()) != RCOLL_OK)
        return st;
    if (strcmp(rcoll_config.ring_order, "topo") != 0 &&
        strcmp(rcoll_config.ring_order, "user") != 0)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "RCOLL_RING_ORDER=\"%s\": expected topo or "
                                "user", rcoll_config.ring_order);
    if (!comm || !id)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_init_rank: %s is NULL",
                                !comm ? "comm" : "id");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_init_rank: rank %d / nranks %d "
                                "out of range", rank, nranks);
    return RCOLL_OK;
}

/* A new communicator's own state: locks, the idle condition on the
 * monotonic clock, the epoll set and its wake-up eventfd. */
static rcoll_status_t init_local(struct rcoll_comm *c, int nranks, int rank,
                                 const rcoll_comm_config_t *config)
{
    c->rank = rank;
    c->nranks = nranks;
    c->timeout = CONFIG_HAS(config, timeout) && config->timeout > 0
                     ? config->timeout
                     : rcoll_config.timeout;
    c->refs = 1;
    c->epfd = c->evfd = -1;
    c->wait_tl = -1;
    c->spin_budget = RCOLL_SPIN_MAX;
    c->yield_s = -1;
    c->bs.listen_fd = c->bs.next_fd = c->bs.prev_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->engine, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->idle_cond, &ca);
    pthread_condattr_destroy(&ca);
    rcoll__log_rank = rank;

    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->epfd < 0 || c->evfd < 0) {
        int e = errno;
        char hint[320];
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "rcoll_comm_init_rank: "
                                "epoll/eventfd: %s%s", strerror(e),
                                rcoll_fd_limit_hint(e, hint, sizeof(hint)));
    }
    c->ev_wakeup.cb = rcoll__engine_wakeup;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ev_wakeup};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->evfd, &ev) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "rcoll_comm_init_rank: "
                                "epoll_ctl(EPOLL_CTL_ADD) of the wake-up "
                                "eventfd: %s", strerror(errno));
    if (rcoll__usable_transports() == 0)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                                "no usable transport (RCOLL_TRANSPORTS=%s)",
                                rcoll_config.transports
                                    ? rcoll_config.transports
                                    : "");
    return RCOLL_OK;
}

/* What the schedules see of the communicator (coll_env_t), and the shared
 * area when every peer is over one transport that has one (shm: all ranks
 * on this host): small collectives go through it (coll/area.c). Every
 * rank comes to the same answer: a pair uses shm only if both can. */
static void init_env(struct rcoll_comm *c)
{
    int n = c->nranks, rank = c->rank;
    c->env.rank = rank;
    c->env.nranks = n;
    if (!c->env.chunk_size) /* (set with the transports: core/setup.c) */
        c->env.chunk_size = rcoll_config.chunk_size;
    c->env.tls = c->peer_tl;
    c->env.eps = c->eps;
    c->env.tune_cache = c->tune_cache;
    c->env.md = &coll_md_host;
    if (rcoll_fault("md_deferred")) /* (tests: the asynchronous path) */
        c->env.md = &coll_md_host_deferred;
    if (c->env.md->ctx_create && !(c->env.md_ctx = c->env.md->ctx_create())) {
        rcoll_warn("rank %d: no memory for the %s memory domain: host",
                   rank, c->env.md->name);
        c->env.md = &coll_md_host;
    }
    c->env.match = c->match;
    c->env.p2p_eager = rcoll_config.p2p_eager;
    c->env.peers = c->bs.peers;
    if (c->ntls != 1 || !c->tls[0]->region)
        return;
    int all = 1;
    for (int p = 0; p < n; p++)
        all &= p == rank || c->peer_tl[p] == c->tls[0];
    if (all)
        c->env.area = coll_area_create(rank, n, c->tls[0], c->tl_ctxs[0]);
    if (c->env.area) {
        size_t d = coll_area_data(c->env.area), m = rcoll_config.shm_area_max;
        rcoll_info(RCOLL_SUBSYS_INIT, "rank %d: shared area in use: "
                   "collectives with up to %zu bytes of input per rank run "
                   "through it, broadcasts up to %zu (RCOLL_SHM_AREA_MAX, "
                   "RCOLL_SHM_AREA)", rank, d < m ? d : m,
                   d < 4 * m ? d : 4 * m);
    }
}

/* Collective with the other ranks: the bootstrap, the shared settings,
 * the transports, the ring order. On failure the transports opened so far
 * are closed (their peers learn why). */
static rcoll_status_t init_wire(struct rcoll_comm *c,
                                const rcoll_sockaddr_t *root,
                                const uint8_t secret[16])
{
    int n = c->nranks;
    /* room for every peer over TCP (and the bootstrap's sockets, shm's
     * pidfds) beyond what the process has open (other communicators'
     * included): the soft limit (often 1,024) up to the hard one */
    long open = rcoll_fd_open_count();
    rcoll_fd_limit_raise((unsigned long)RCOLL_MAX(open, 0) + 256 +
                         (unsigned long)n *
                             (unsigned long)(rcoll_config.tcp_nsocks + 2));
    rcoll_status_t st = rcoll_bootstrap_init(&c->bs, root, secret, c->rank,
                                             n, c->timeout);
    if (st != RCOLL_OK || (st = rcoll__config_agree(c)) != RCOLL_OK)
        return st;
    c->eps = calloc((size_t)n, sizeof(*c->eps));
    c->peer_tl = calloc((size_t)n, sizeof(*c->peer_tl));
    c->p2p_tx = calloc((size_t)n, sizeof(*c->p2p_tx));
    c->match = coll_match_create(n, rcoll_config.unexpected_max);
    if (!c->eps || !c->peer_tl || !c->p2p_tx || !c->match)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    if ((st = rcoll__open_transports(c, secret)) != RCOLL_OK) {
        /* the peers already connected learn why (the root cause, when the
         * bootstrap named one), not merely that this rank aborted */
        char why[512];
        snprintf(why, sizeof(why), "%s", rcoll_last_error());
        rcoll__close_transports(c, 1, why);
        return rcoll__set_error(st, "%s", why);
    }
    if (c->rank == 0 && rcoll_config.topo_dump_file &&
        rcoll_config.topo_dump_file[0])
        rcoll__topo_dump_once();
    if ((st = rcoll__placement_init(c)) != RCOLL_OK)
        rcoll__close_transports(c, 1, NULL);
    return st;
}

/* The diagnosis listener and the progress thread; then the communicator
 * is live. */
static rcoll_status_t init_start(struct rcoll_comm *c)
{
    rcoll_status_t st;
    if ((st = rcoll__diag_init(c)) != RCOLL_OK) {
        rcoll__close_transports(c, 1, NULL);
        return st;
    }
    int rc = pthread_create(&c->thread, NULL, rcoll__progress_thread, c);
    if (rc != 0) {
        rcoll__close_transports(c, 1, NULL);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "pthread_create: %s",
                                strerror(rc));
    }
    c->thread_started = 1;
    /* named for top -H, perf and gdb */
    pthread_setname_np(c->thread, "rcoll-progress");
    c->created = rcoll_time_sec();
    rcoll__live_add(c);
    rcoll__dump_signal_init();
    char names[128] = "";
    for (int i = 0; i < c->ntls; i++)
        snprintf(names + strlen(names), sizeof(names) - strlen(names),
                 "%s%s", i ? "," : "", c->tls[i]->name);
    rcoll_info(RCOLL_SUBSYS_INIT, "rank %d of %d ready: transports %s, "
               "chunk %zu bytes, %d slots", c->rank, c->nranks,
               c->ntls ? names : "none", c->env.chunk_size,
               rcoll_config.nslots);
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_init_rank_config(
    rcoll_comm_t *comm, int nranks, const rcoll_unique_id_t *id, int rank,
    const rcoll_comm_config_t *config)
{
    rcoll_sockaddr_t root;
    uint8_t secret[16];
    rcoll_status_t st;

    rcoll__clear_error();
    if ((st = init_check(comm, nranks, id, rank)) != RCOLL_OK)
        return st;
    if ((st = rcoll_boot_id_unpack(id, &root, secret)) != RCOLL_OK)
        return rcoll__set_error(st, "rcoll_comm_init_rank: %s",
                                rcoll_last_error());
    struct rcoll_comm *c = rcoll__live_alloc();
    if (!c)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                "rcoll_comm_init_rank: no memory");
    if ((st = init_local(c, nranks, rank, config)) != RCOLL_OK ||
        (st = init_wire(c, &root, secret)) != RCOLL_OK)
        goto err;
    init_env(c);
    if ((st = init_start(c)) != RCOLL_OK)
        goto err;
    *comm = c;
    return RCOLL_OK;
err:
    {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
        rcoll__comm_free(c);
        return rcoll__set_error(st, "rcoll_comm_init_rank (rank %d of %d): "
                                "%s", rank, nranks, msg);
    }
}

RCOLL_API rcoll_status_t rcoll_get_unique_id(rcoll_unique_id_t *id)
{
    rcoll_sockaddr_t addr;
    uint8_t secret[16];
    char ifname[64];
    int fd;
    rcoll_status_t st;

    rcoll__clear_error();
    if ((st = rcoll_config_init()) != RCOLL_OK)
        return st;
    if (!id)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_get_unique_id: id is NULL");
    if ((st = rcoll_random_bytes(secret, sizeof(secret))) != RCOLL_OK)
        return rcoll__set_error(st, "rcoll_get_unique_id: no random bytes");
    st = rcoll_sock_pick_addr(NULL, &addr, ifname, sizeof(ifname));
    if (st != RCOLL_OK)
        return st;
    st = rcoll_sock_listen(&addr, 0, &fd);
    if (st != RCOLL_OK)
        return st;
    rcoll_boot_id_pack(&addr, secret, id);
    return rcoll_boot_root_start(fd, secret, rcoll_config.timeout);
}

/* Called with a reference from rcoll__comm_get; drops it and the user's
 * handle reference. Only the first destroy or abort closes: a second one
 * (another thread) finds it closing and is an argument error. */
static rcoll_status_t comm_close(struct rcoll_comm *c, int abort)
{
    rcoll_status_t st;
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        rcoll__comm_release(c);
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_%s: comm %p is being destroyed "
                                "or aborted by another call",
                                abort ? "abort" : "destroy", (void *)c);
    }
    __atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
    c->stop = 1;
    if (abort) {
        char msg[256];
        snprintf(msg, sizeof(msg), "rank %d: rcoll_comm_abort was called",
                 c->rank);
        rcoll__comm_set_error_locked(c, RCOLL_ERR_ABORTED, msg);
    }
    pthread_mutex_unlock(&c->lock);
    rcoll__comm_wake(c);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    c->thread_started = 0;
    /* No thread may drive the engine while the transports go: a caller of
     * rcoll_wait in another thread finishes its turn first (after an abort
     * its request fails in that turn), and what is still queued then (an
     * operation another thread posted meanwhile) fails here. */
    pthread_mutex_lock(&c->engine);
    pthread_mutex_lock(&c->lock);
    int failed = c->error != RCOLL_OK;
    pthread_mutex_unlock(&c->lock);
    if (failed) {
        rcoll__comm_fail_all(c, RCOLL_OK, NULL);
    } else {
        char msg[256];
        snprintf(msg, sizeof(msg), "rank %d: the communicator was "
                 "destroyed with this operation in flight", c->rank);
        rcoll__comm_fail_all(c, RCOLL_ERR_INVALID_ARGUMENT, msg);
    }
    pthread_mutex_lock(&c->lock);
    st = c->error;
    pthread_mutex_unlock(&c->lock);
    rcoll__close_transports(c, abort || c->error != RCOLL_OK,
                     c->error != RCOLL_OK ? c->errmsg : NULL);
    pthread_mutex_unlock(&c->engine);
    if (st != RCOLL_OK && !abort)
        rcoll__set_error(st, "%s", c->errmsg);
    rcoll__comm_release(c); /* ours */
    rcoll__comm_release(c); /* the handle's */
    return abort ? RCOLL_OK : st;
}

/* The error of an API call given a handle that is not a live communicator
 * (never created, destroyed or aborted). */
static rcoll_status_t comm_not_live(const char *call, rcoll_comm_t comm)
{
    return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                            "%s: comm %p is not a live communicator "
                            "(destroyed or aborted already?)", call,
                            (void *)comm);
}

/* The body of an API entry that holds a reference on `comm` for the call
 * (see rcoll__comm_get: another thread may abort and free it meanwhile),
 * around its work in comm_do_<name>. */
#define COMM_HELD(call)                                                      \
    do {                                                                     \
        int held_ = comm && rcoll__comm_get(comm);                           \
        rcoll_status_t st_ = (call);                                         \
        if (held_)                                                           \
            rcoll__comm_release(comm);                                       \
        return st_;                                                          \
    } while (0)

RCOLL_API rcoll_status_t rcoll_comm_destroy(rcoll_comm_t comm)
{
    rcoll__clear_error();
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_destroy: comm is NULL");
    if (!rcoll__comm_get(comm))
        return comm_not_live("rcoll_comm_destroy", comm);
    return comm_close(comm, 0);
}

RCOLL_API rcoll_status_t rcoll_comm_abort(rcoll_comm_t comm)
{
    rcoll__clear_error();
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_abort: comm is NULL");
    if (!rcoll__comm_get(comm))
        return comm_not_live("rcoll_comm_abort", comm);
    return comm_close(comm, 1);
}

static rcoll_status_t comm_do_register(rcoll_comm_t comm, void *buf, size_t len, void **handle)
{
    rcoll__clear_error();
    if (!comm || !buf || len == 0 || !handle)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_register: %s is NULL or zero",
                                !comm ? "comm" : !buf ? "buf"
                                                      : !len ? "len" : "handle");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_register", comm);
    struct rcoll_mem_reg *m = calloc(1, sizeof(*m));
    if (!m)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rcoll_comm_register: "
                                "no memory");
    m->buf = buf;
    m->len = len;
    for (int i = 0; i < comm->ntls; i++) {
        if (!comm->tls[i]->mem_reg)
            continue;
        rcoll_status_t st = comm->tls[i]->mem_reg(comm->tl_ctxs[i], buf, len,
                                                  &m->tl[i]);
        if (st != RCOLL_OK) {
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
            rcoll__mem_reg_free(comm, m);
            return rcoll__set_error(st, "rcoll_comm_register: rank %d: %s",
                                    comm->rank, msg);
        }
    }
    pthread_mutex_lock(&comm->lock);
    m->next = comm->regs;
    comm->regs = m;
    pthread_mutex_unlock(&comm->lock);
    *handle = m;
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_register(rcoll_comm_t comm, void *buf,
                                             size_t len, void **handle)
{
    COMM_HELD(comm_do_register(comm, buf, len, handle));
}

static rcoll_status_t comm_do_deregister(rcoll_comm_t comm, void *handle)
{
    rcoll__clear_error();
    if (!comm || !handle)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_deregister: %s is NULL",
                                !comm ? "comm" : "handle");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_deregister", comm);
    pthread_mutex_lock(&comm->lock);
    struct rcoll_mem_reg **pp = &comm->regs;
    while (*pp && *pp != handle)
        pp = &(*pp)->next;
    struct rcoll_mem_reg *m = *pp;
    if (m)
        *pp = m->next;
    pthread_mutex_unlock(&comm->lock);
    if (!m)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_deregister: rank %d: not a "
                                "registration of this communicator (already "
                                "deregistered?)", comm->rank);
    rcoll__mem_reg_free(comm, m);
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_deregister(rcoll_comm_t comm,
                                               void *handle)
{
    COMM_HELD(comm_do_deregister(comm, handle));
}

static rcoll_status_t comm_do_rank(rcoll_comm_t comm, int *rank)
{
    if (!comm || !rank)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_rank: NULL argument");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_rank", comm);
    *rank = comm->rank;
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_rank(rcoll_comm_t comm, int *rank)
{
    COMM_HELD(comm_do_rank(comm, rank));
}

static rcoll_status_t comm_do_size(rcoll_comm_t comm, int *size)
{
    if (!comm || !size)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_size: NULL argument");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_size", comm);
    *size = comm->nranks;
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_size(rcoll_comm_t comm, int *size)
{
    COMM_HELD(comm_do_size(comm, size));
}

static rcoll_status_t comm_do_get_async_error(rcoll_comm_t comm,
                                              rcoll_status_t *err)
{
    if (!comm || !err)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_get_async_error: NULL argument");
    if (!rcoll__comm_live(comm))
        return comm_not_live("rcoll_comm_get_async_error", comm);
    pthread_mutex_lock(&comm->lock);
    *err = comm->error;
    if (comm->error != RCOLL_OK)
        rcoll__set_error_str(comm->errmsg);
    pthread_mutex_unlock(&comm->lock);
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_comm_get_async_error(rcoll_comm_t comm,
                                                    rcoll_status_t *err)
{
    COMM_HELD(comm_do_get_async_error(comm, err));
}
