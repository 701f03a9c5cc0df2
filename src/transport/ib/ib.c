/* The RDMA verbs transport: RC queue pairs, RCOLL_IB_QPS_PER_PEER per peer,
 * messages striped round-robin over them (message i on QP i % nqps, so each
 * peer pair stays a FIFO). The same slot/credit protocol as TCP and shm:
 *
 * - Every QP owns a registered ring of nslots receive slots on the receiver
 *   (plus a small control area for an abort reason). A message is one RDMA
 *   WRITE of its header and payload straight into the next slot, signalled
 *   with a 32-bit word: type, credits handed back, slot. The word travels
 *   as the immediate of RDMA_WRITE_WITH_IMM, or - on iWARP devices without
 *   immediate data, such as siw - as a 4-byte inline SEND right after the
 *   WRITE (RC delivers it after the WRITE is placed). Both ends must agree:
 *   immediates are used only if both devices have them (RCOLL_IB_IMM).
 * - Credits ride on every message; alone (a zero-byte WRITE_WITH_IMM, or a
 *   SEND) only at half the slots or when the engine idles. No atomics, no
 *   SRQ, one receive SGE: the limits of eRDMA.
 * - Connections: librdmacm (RCOLL_IB_CONNECT=cm; the only way on iWARP),
 *   the ring's address and rkey in the connection's private data with a MAC
 *   of the job secret; or (oob: InfiniBand and RoCE) QP numbers exchanged
 *   through the authenticated bootstrap and the QPs moved to RTS by hand.
 * - Completions: polled by the engine each turn; before it sleeps the CQ is
 *   armed (ibv_req_notify_cq) and the completion channel's fd is in its
 *   epoll set. A failed completion or a disconnect fails the peer by name.
 *
 * Payloads are copied into a registered staging slot (or go inline when
 * small), except from memory the user registered (rcoll_comm_register):
 * then the WRITE gathers the header from staging and the payload in place,
 * and the send is done when its completion arrives.
 *
 * Receives in place (recv_place, from RCOLL_IB_PLACE_MIN bytes): the
 * receiver registers the destination and tells the sender where it is (a
 * PLACE notice through a slot, which the receiver's engine never sees:
 * the sender takes it when it arrives). The sender then RDMA-writes each
 * matching payload straight into the destination, followed by the header
 * alone into the slot, signalled as IMM_PLACED; RC ordering puts the data
 * there before the signal. Data sent before the notice arrived goes
 * through the slots as ever. Unposting deregisters the destination, so a
 * write that comes later (a failed operation's) fails on the sender's
 * queue pair instead of touching freed memory. There is no automatic
 * registration cache: without memory hooks rcoll cannot see a buffer
 * freed and its address reused. */
#include "transport/transport.h"
#include "transport/slots.h"
#include "proto/rcache.h"
#include "util/dl.h"
#include "util/params.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#define IB_HDR 64       /* slot bytes before the payload */
#define IB_HDR_OFF (IB_HDR - sizeof(rcoll_msg_hdr_t)) /* header ends there */
#define IB_CTRL 512     /* after the slots: an abort's reason */
#define IB_MAGIC 0x69627631U /* "ibv1" */
#define IB_CM_TRIES 8   /* rdma_connect redone on a local port collision */

/* the 32-bit word that signals a message */
#define IMM(t, c, a) ((uint32_t)(t) << 30 | (uint32_t)(c) << 16 | (uint32_t)(a))
#define IMM_TYPE(x) ((x) >> 30)
#define IMM_CREDITS(x) (((x) >> 16) & 0x3fffU)
#define IMM_ARG(x) ((x) & 0xffffU)
enum { IMM_PLACED = 0, IMM_DATA = 1, IMM_CREDIT = 2, IMM_CTRL = 3 };
/* a header kind of the transport's own (the class bits of
 * rcoll_msg_hdr_t.kind no operation uses): a PLACE notice */
#define IB_KIND_PLACE (0x7fu << 24)
#define IB_NPLACE 8   /* receives in place posted per peer at a time */
#define IB_NRPLACE 16 /* a peer's destinations remembered per peer */
/* slot flags (receive side) */
enum { SLOT_PLAIN = 0, SLOT_PLACED = 1, SLOT_TL = 2 };

/* A PLACE notice's payload: which messages, and where they go. */
typedef struct {
    uint64_t seq, total, chunk, addr, bytes;
    uint32_t kind, step, tag, rkey;
} ib_place_msg_t;
enum { CTRL_BYE = 1, CTRL_ABORT = 2 };
#define IB_MAX_CREDITS 0x3fff

/* what a work request was, in its wr_id (with the QP's index above) */
enum { WR_DATA = 1, WR_NOTE = 2, WR_RECV = 3 };
#define WRID(q, kind, i) ((uint64_t)(q)->gidx << 32 | (uint64_t)(i) << 4 | (kind))

typedef struct ib_ep ib_ep_t;

typedef struct {
    ib_ep_t *ep;
    int idx;                  /* among the peer's QPs */
    int gidx;                 /* in ctx->qps */
    struct rdma_cm_id *id;    /* cm mode */
    struct ibv_qp *qp;
    int up;                   /* connected */
    int ended;                /* error, flush or disconnect seen */
    int imm;                  /* signal with immediates (else WRITE+SEND) */
    int active;               /* we connected (cm): the reply has the ring */
    int heard;                /* a message from the peer arrived on it */
    int cm_tries;             /* connection attempts redone (cm, active) */
    /* receive side */
    char *rx;                 /* nslots slots + IB_CTRL */
    struct ibv_mr *rx_mr;
    uint32_t *rbuf;           /* a 4-byte SEND target per receive WR */
    struct ibv_mr *rbuf_mr;
    int nrecv;
    rcoll_slots_t sl;         /* the slot/credit state, both ways */
    unsigned char *rx_flag;   /* by slot: SLOT_* */
    int bye, aborted;         /* what the peer said on this QP */
    /* send side */
    char *tx;                 /* staging: nslots slots + IB_CTRL */
    struct ibv_mr *tx_mr;
    uint64_t raddr;           /* the peer's ring */
    uint32_t rkey;
    uint64_t tx_seq;          /* data messages posted (remote slot = % n) */
    uint64_t tx_done;         /* data messages completed (staging free) */
    void **tx_cookie;         /* by slot: a zero-copy send's cookie */
    rcoll_rcache_entry_t **tx_rent; /* by slot: the cached registration a
                                 zero-copy send reads through */
    int sq_free;              /* send queue entries */
    int cq_out;               /* its work requests not completed yet (each
                                 takes an entry of the CQ until polled) */
    /* oob mode */
    uint32_t psn;
} ib_qp_t;

struct ib_ep {
    struct rcoll_tl_ctx *ctx;
    int peer;
    ib_qp_t *qps;
    uint64_t tx_seq, rx_seq;
    int failed;
    int aborted;
    char abort_reason[IB_CTRL];
    char fail_msg[1024];
    /* the peeked slot's header, copied out of the ring: the peer can
     * RDMA-write the ring at any time, so the engine checks this copy */
    rcoll_msg_hdr_t rx_hdr;
    /* receives in place we posted: registered destinations */
    struct {
        rcoll_tl_place_t pl;
        struct ibv_mr *mr;
        rcoll_rcache_entry_t *rent; /* its registration (the cache's) */
        size_t landed;
    } place[IB_NPLACE];
    int nplace;
    /* the peer's: where its receives want our data */
    ib_place_msg_t rplace[IB_NRPLACE];
    int nrplace;
};

struct rcoll_tl_ctx {
    rcoll_tl_params_t p;
    int nqps;
    int oob;
    size_t stride;            /* slot bytes: IB_HDR + chunk, 64-aligned */
    size_t ring_bytes;
    int sq_depth;
    struct rdma_event_channel *ech;
    rcoll_ev_handler_t ech_h;
    struct rdma_cm_id *listen_id;
    struct ibv_context *verbs;
    uint8_t port;
    char devname[64];
    char addr_str[64];
    struct sockaddr_in addr;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cch;
    rcoll_ev_handler_t cch_h;
    struct ibv_cq *cq;
    int cq_armed;
    int cqe;                  /* the CQ's entries */
    int cq_used;              /* work requests posted, not yet completed:
                                 posting stays within cqe (ib_cq_room) */
    struct ib_async_dev *adev; /* the device's asynchronous events */
    unsigned async_seen;      /* how many of them this context handled */
    rcoll_ev_handler_t async_h;
    uint32_t max_inline;
    int imm_ok;               /* this device does WRITE_WITH_IMM */
    ib_ep_t **eps;            /* by rank */
    ib_qp_t **qps;            /* every QP, by gidx */
    int nq;
    int closing;
    /* rcoll_comm_register: sorted by address; the lock because the user
     * registers while the engine may send */
    pthread_mutex_t reg_lock;
    struct ib_ureg **regs;
    int nregs, regs_cap;
    uint64_t n_sent, n_zcopy, n_placed;
    /* buffers registered on use and kept (proto/rcache.c): receives in
     * place, zero-copy sends */
    rcoll_rcache_t *rcache;
};

typedef struct ib_ureg {
    char *buf;
    size_t len;
    struct ibv_mr *mr;
} ib_ureg_t;

/* ---- the connection's private data (cm) ---- */

typedef struct __attribute__((packed)) {
    uint32_t magic;
    int32_t from, to;
    uint16_t idx, nqps;
    uint32_t nslots;
    uint32_t chunk;
    uint32_t rkey;
    uint32_t imm;             /* 1: this end can take immediates */
    uint64_t addr;
    uint64_t mac;             /* siphash(secret, all of the above) */
} ib_conn_data_t;             /* 48 bytes: IB's REQ carries 56 */

static void conn_data_seal(struct rcoll_tl_ctx *ctx, ib_conn_data_t *d)
{
    d->mac = rcoll_siphash(ctx->p.secret, d, offsetof(ib_conn_data_t, mac));
}

static int conn_data_check(struct rcoll_tl_ctx *ctx, const void *pd,
                           size_t len, ib_conn_data_t *out)
{
    if (!pd || len < sizeof(*out))
        return -1;
    memcpy(out, pd, sizeof(*out));
    return out->magic == IB_MAGIC &&
                   out->mac == rcoll_siphash(ctx->p.secret, out,
                                             offsetof(ib_conn_data_t, mac))
               ? 0
               : -1;
}

/* ---- devices ---- */

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
static int ib_libs_loaded(char *why, size_t len)
{
    return rcoll_dl_open(RCOLL_DL_VERBS, why, len) == 0 &&
           rcoll_dl_open(RCOLL_DL_RDMACM, why, len) == 0;
}

static int ib_usable(char *why, size_t len)
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
 * kills it (seen in CI: a survivor of a killed peer died with status 141).
 * So on iWARP devices SIGPIPE is ignored when it is at its default; a
 * handler the program installed is left alone. Writes to a closed pipe or
 * socket then fail with EPIPE instead, as they do under Python. */
static void ib_sigpipe_guard(struct rcoll_tl_ctx *ctx)
{
    struct sigaction old, ign;
    if (ctx->verbs->device->transport_type != IBV_TRANSPORT_IWARP)
        return;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
        old.sa_handler != SIG_DFL)
        return;
    if (sigaction(SIGPIPE, &ign, NULL) == 0)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: SIGPIPE ignored (it was "
                   "at its default; %s sends from this process on kernel "
                   "TCP sockets)", ctx->p.rank, ctx->devname);
}

static const char *link_layer_str(uint8_t ll, struct ibv_context *v)
{
    if (v->device->transport_type == IBV_TRANSPORT_IWARP)
        return "iWARP";
    return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

/* Binds the listening id to an IPv4 address of an allowed device with an
 * active port: the bootstrap's address first, then every other one. */
static rcoll_status_t ib_pick_address(struct rcoll_tl_ctx *ctx)
{
    struct sockaddr_in cand[64];
    int nc = 0;
    const rcoll_sockaddr_t *boot = &ctx->p.bs->peers[ctx->p.rank].boot_addr;
    char tried[512] = "";
    size_t toff = 0;
    if (boot->sa.sa_family == AF_INET)
        cand[nc++] = boot->sin;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i && nc < 64; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
                cand[nc++] = *(struct sockaddr_in *)i->ifa_addr;
        freeifaddrs(ifa);
    }
    for (int i = 0; i < nc; i++) {
        struct sockaddr_in a = cand[i];
        char s[INET_ADDRSTRLEN];
        a.sin_port = 0;
        inet_ntop(AF_INET, &a.sin_addr, s, sizeof(s));
        if (i > 0 && cand[0].sin_addr.s_addr == a.sin_addr.s_addr)
            continue;
        struct rdma_cm_id *id;
        if (rdma_create_id(ctx->ech, &id, NULL, RDMA_PS_TCP) != 0)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_create_id: %s",
                                    strerror(errno));
        const char *why = NULL;
        if (rdma_bind_addr(id, (struct sockaddr *)&a) != 0 || !id->verbs)
            why = "no RDMA device";
        else if (!ib_device_allowed(ibv_get_device_name(id->verbs->device)))
            why = "device excluded by RCOLL_IB_HCA";
        else {
            struct ibv_port_attr pa;
            if (ibv_query_port(id->verbs, id->port_num, &pa) != 0 ||
                pa.state != IBV_PORT_ACTIVE)
                why = "port not active";
        }
        if (why) {
            toff += (size_t)snprintf(tried + toff, sizeof(tried) - RCOLL_MIN(toff, sizeof(tried)),
                                     "%s%s: %s", toff ? "; " : "", s, why);
            if (toff >= sizeof(tried))
                toff = sizeof(tried) - 1;
            rdma_destroy_id(id);
            continue;
        }
        ctx->listen_id = id;
        ctx->verbs = id->verbs;
        ctx->port = id->port_num;
        ctx->addr = a;
        snprintf(ctx->devname, sizeof(ctx->devname), "%s",
                 ibv_get_device_name(id->verbs->device));
        snprintf(ctx->addr_str, sizeof(ctx->addr_str), "%s", s);
        return RCOLL_OK;
    }
    return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                            "ib: rank %d found no IPv4 address on a usable "
                            "RDMA device (%s); check RCOLL_IB_HCA, or exclude "
                            "the transport with RCOLL_TRANSPORTS=^ib",
                            ctx->p.rank, tried[0] ? tried : "no addresses");
}

/* ---- registration ---- */

static struct ibv_mr *ib_reg(struct rcoll_tl_ctx *ctx, void *buf, size_t len,
                             int access, const char *what)
{
    struct ibv_mr *mr = ibv_reg_mr(ctx->pd, buf, len, access);
    if (mr)
        return mr;
    int err = errno;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(lim, sizeof(lim), "unlimited");
        else
            snprintf(lim, sizeof(lim), "%llu KiB",
                     (unsigned long long)rl.rlim_cur / 1024);
    }
    rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                     "ib: rank %d cannot register %zu bytes of %s with %s "
                     "(ibv_reg_mr: %s). Registered memory is locked memory: "
                     "the locked-memory limit is %s; raise it (ulimit -l "
                     "unlimited; LimitMEMLOCK=infinity for systemd; docker "
                     "--ulimit memlock=-1) or lower RCOLL_CHUNK_SIZE, "
                     "RCOLL_NSLOTS or RCOLL_IB_QPS_PER_PEER",
                     ctx->p.rank, len, what, ctx->devname, strerror(err), lim);
    return NULL;
}

/* the registration cache's (receives in place, zero-copy sends): local
 * and remote write, so that one registration serves both */
static void *ib_rc_reg(void *arg, void *addr, size_t len)
{
    return ib_reg(arg, addr, len,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                  "a buffer (registration cache)");
}

static void ib_rc_dereg(void *arg, void *h)
{
    (void)arg;
    ibv_dereg_mr(h);
}

/* ---- failures ---- */

static void ib_ep_fail(ib_ep_t *ep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void ib_ep_fail(ib_ep_t *ep, const char *fmt, ...)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    char what[512];
    va_list ap;
    if (ep->failed)
        return;
    ep->failed = 1;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (ep->aborted)
        snprintf(ep->fail_msg, sizeof(ep->fail_msg), "rank %d (%s pid %d) "
                 "aborted the communicator%s%s", ep->peer, pi->hostname,
                 pi->pid, ep->abort_reason[0] ? ": " : "", ep->abort_reason);
    else
        snprintf(ep->fail_msg, sizeof(ep->fail_msg), "rank %d (%s pid %d): "
                 "ib: %s", ep->peer, pi->hostname, pi->pid, what);
    ctx->p.ev->peer_failed(ctx->p.ev->arg, ep->peer, RCOLL_ERR_REMOTE,
                           ep->fail_msg);
}

static rcoll_status_t ib_ep_error(ib_ep_t *ep)
{
    ib_ep_fail(ep, "connection ended");
    return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
}

/* ---- posting ---- */

/* Each posted work request holds an entry of the CQ until its
 * completion is polled: room for n more? (The CQ may be smaller than
 * every queue pair's full depth: the device's max_cqe.) */
static int ib_cq_room(const struct rcoll_tl_ctx *ctx, int n)
{
    return ctx->cq_used + n <= ctx->cqe;
}

static void ib_cq_posted(ib_qp_t *q, int n)
{
    q->cq_out += n;
    q->ep->ctx->cq_used += n;
}

/* q's queue pair goes: what it had posted never completes here */
static void ib_cq_forget(ib_qp_t *q)
{
    q->ep->ctx->cq_used -= q->cq_out;
    q->cq_out = 0;
}

static int ib_post_recv(ib_qp_t *q, int i)
{
    struct ibv_sge sge = {(uintptr_t)&q->rbuf[i], sizeof(uint32_t),
                          q->rbuf_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WRID(q, WR_RECV, i), .sg_list = &sge,
                             .num_sge = 1}, *bad;
    int rc = ibv_post_recv(q->qp, &wr, &bad);
    if (rc == 0)
        ib_cq_posted(q, 1);
    return rc;
}

/* Posts a signal word alone (credits, goodbye, abort): a zero-byte
 * WRITE_WITH_IMM or a 4-byte inline SEND. */
static int ib_post_note(ib_qp_t *q, uint32_t word)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge = {(uintptr_t)&word, sizeof(word), 0};
    if (q->sq_free < 1 || !ib_cq_room(q->ep->ctx, 1))
        return -1;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WRID(q, WR_NOTE, 0);
    wr.send_flags = IBV_SEND_SIGNALED;
    if (q->imm) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(word);
        wr.wr.rdma.remote_addr = q->raddr;
        wr.wr.rdma.rkey = q->rkey;
    } else {
        wr.opcode = IBV_WR_SEND;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags |= IBV_SEND_INLINE;
    }
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc == 0) {
        q->sq_free--;
        ib_cq_posted(q, 1);
    }
    return rc;
}

static void ib_send_credits(ib_qp_t *q)
{
    if (q->sl.owed == 0 || !q->up || q->ended || q->bye || q->sq_free < 1)
        return;
    int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
    if (ib_post_note(q, IMM(IMM_CREDIT, c, 0)) == 0)
        rcoll_slots_take_owed(&q->sl, c);
}

/* ---- completions ---- */

static void ib_async_read(struct ib_async_dev *d);
static void ib_async_take(struct rcoll_tl_ctx *ctx);

static void ib_qp_ended(ib_qp_t *q, const char *why)
{
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    q->ended = 1;
    if (q->bye || ctx->closing)
        return; /* after a goodbye: the peer closed, as it should */
    if (ep->aborted) {
        ib_ep_fail(ep, "aborted");
        return;
    }
    /* A port that went down flushes the queue pairs, and their error
     * completions may come before its event: the device says why first
     * (ib_async_handle), else the port's state does. */
    if (ctx->adev) {
        ib_async_read(ctx->adev);
        ib_async_take(ctx);
    }
    struct ibv_port_attr pa;
    if (!ep->failed && ibv_query_port(ctx->verbs, ctx->port, &pa) == 0 &&
        pa.state != IBV_PORT_ACTIVE) {
        ib_ep_fail(ep, "this rank's device %s port %d went down (port "
                   "state %s)", ctx->devname, ctx->port,
                   ibv_port_state_str(pa.state));
        return;
    }
    ib_ep_fail(ep, "%s", why);
}

static void ib_handle_word(ib_qp_t *q, uint32_t w)
{
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (rcoll_slots_credit(&q->sl, IMM_CREDITS(w)) != 0) {
        ib_ep_fail(ep, "protocol error: %u credits, %d already held of %d",
                   IMM_CREDITS(w), q->sl.credits, ctx->p.nslots);
        return;
    }
    switch (IMM_TYPE(w)) {
    case IMM_CREDIT:
        return;
    case IMM_PLACED:
    case IMM_DATA: {
        int slot = rcoll_slots_next(&q->sl);
        const rcoll_msg_hdr_t *h = (const rcoll_msg_hdr_t *)(
            q->rx + (size_t)(slot < 0 ? 0 : slot) * ctx->stride + IB_HDR_OFF);
        if (slot < 0 || (int)IMM_ARG(w) != slot ||
            h->len > ctx->p.chunk_size) {
            ib_ep_fail(ep, "protocol error: message in slot %u, expected "
                       "%d (%d full), length %u", IMM_ARG(w), slot,
                       q->sl.count, h->len);
            return;
        }
        q->rx_flag[slot] = IMM_TYPE(w) == IMM_PLACED ? SLOT_PLACED
                                                     : SLOT_PLAIN;
        if (IMM_TYPE(w) == IMM_DATA && h->kind == IB_KIND_PLACE) {
            /* where the peer wants a receive's data: taken now, so that
             * what we send from here on goes there (the slot is skipped
             * when the engine reaches it) */
            if (h->len != sizeof(ib_place_msg_t)) {
                ib_ep_fail(ep, "protocol error: a %u-byte PLACE notice",
                           h->len);
                return;
            }
            if (ep->nrplace == IB_NRPLACE) /* stale ones: the oldest goes */
                memmove(&ep->rplace[0], &ep->rplace[1],
                        (IB_NRPLACE - 1) * sizeof(ep->rplace[0]));
            else
                ep->nrplace++;
            memcpy(&ep->rplace[ep->nrplace - 1], (const char *)h + sizeof(*h),
                   sizeof(ib_place_msg_t));
            q->rx_flag[slot] = SLOT_TL;
        }
        rcoll_slots_arrived(&q->sl);
        return;
    }
    case IMM_CTRL:
        if (IMM_ARG(w) == CTRL_BYE) {
            q->bye = 1;
            rcoll_debug(RCOLL_SUBSYS_NET, "ib: rank %d said goodbye on qp %d",
                        ep->peer, q->idx);
        } else {
            char *r = q->rx + (size_t)ctx->p.nslots * ctx->stride;
            r[IB_CTRL - 1] = '\0';
            snprintf(ep->abort_reason, sizeof(ep->abort_reason), "%s", r);
            ep->aborted = 1;
            q->aborted = 1;
            ib_ep_fail(ep, "aborted");
        }
        return;
    default:
        ib_ep_fail(ep, "protocol error: signal word 0x%08x", w);
    }
}

/* A message's last work request completed (or was flushed): its staging
 * slot is free, and a zero-copy send's memory is read no more. */
static void ib_tx_completed(ib_qp_t *q)
{
    struct rcoll_tl_ctx *ctx = q->ep->ctx;
    uint64_t slot = q->tx_done % (uint64_t)ctx->p.nslots;
    void **c = &q->tx_cookie[slot];
    q->tx_done++;
    if (q->tx_rent[slot]) {
        rcoll_rcache_put(ctx->rcache, q->tx_rent[slot]);
        q->tx_rent[slot] = NULL;
    }
    if (*c) {
        void *cookie = *c;
        *c = NULL;
        ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
    }
}

static int ib_poll(struct rcoll_tl_ctx *ctx)
{
    struct ibv_wc wc[32];
    int total = 0;
    for (;;) {
        int n = ibv_poll_cq(ctx->cq, 32, wc);
        if (n <= 0)
            return total;
        total += n;
        for (int i = 0; i < n; i++) {
            uint32_t gidx = (uint32_t)(wc[i].wr_id >> 32);
            int kind = (int)(wc[i].wr_id & 15);
            int idx = (int)((wc[i].wr_id >> 4) & 0xfffffff);
            if (gidx >= (uint32_t)ctx->nq)
                continue;
            ib_qp_t *q = ctx->qps[gidx];
            if (!q->qp || wc[i].qp_num != q->qp->qp_num)
                continue; /* a QP of a connection attempt redone */
            q->cq_out--;
            ctx->cq_used--;
            if (kind != WR_RECV)
                q->sq_free++;
            if (kind == WR_DATA) /* done, or flushed: the NIC let go */
                ib_tx_completed(q);
            if (wc[i].status != IBV_WC_SUCCESS) {
                char why[256];
                if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
                    snprintf(why, sizeof(why), "the connection closed without "
                             "goodbye (process died or was killed?)");
                else
                    snprintf(why, sizeof(why), "%s on queue pair %d: %s "
                             "(vendor error 0x%x)",
                             kind == WR_RECV ? "receive" : "RDMA write", q->idx,
                             ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
                ib_qp_ended(q, why);
                continue;
            }
            if (kind == WR_RECV) {
                q->heard = 1;
                uint32_t w = wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM
                                 ? ntohl(wc[i].imm_data)
                                 : q->rbuf[idx];
                if (!q->ended && ib_post_recv(q, idx) != 0)
                    ib_qp_ended(q, "cannot repost a receive");
                ib_handle_word(q, w);
            }
        }
    }
}

static int ib_progress(rcoll_tl_ctx_t *ctx)
{
    int n = ib_poll(ctx);
    ib_async_take(ctx);
    return n;
}

static void ib_cq_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_tl_ctx *ctx =
        (struct rcoll_tl_ctx *)((char *)h - offsetof(struct rcoll_tl_ctx, cch_h));
    struct ibv_cq *cq;
    void *cq_ctx;
    (void)events;
    while (ibv_get_cq_event(ctx->cch, &cq, &cq_ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        ctx->cq_armed = 0;
    }
    ib_poll(ctx);
}

/* The engine has nothing to do and may sleep: hand back owed credits, arm
 * the CQ, and look once more (a completion between the last poll and the
 * arming raises no event). */
static int ib_idle(rcoll_tl_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nq; i++)
        ib_send_credits(ctx->qps[i]);
    if (!ctx->cq_armed) {
        ibv_req_notify_cq(ctx->cq, 0);
        ctx->cq_armed = 1;
    }
    return ib_poll(ctx);
}

static void ib_cm_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_tl_ctx *ctx =
        (struct rcoll_tl_ctx *)((char *)h - offsetof(struct rcoll_tl_ctx, ech_h));
    struct rdma_cm_event *ev;
    (void)events;
    while (rdma_get_cm_event(ctx->ech, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        ib_qp_t *q = id ? id->context : NULL;
        enum rdma_cm_event_type t = ev->event;
        if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
            /* every peer connected at setup: this is not one of ours */
            rcoll_warn("ib: rank %d rejected a connection request after "
                       "setup (not from this job)", ctx->p.rank);
            rdma_reject(id, NULL, 0);
            rdma_ack_cm_event(ev);
            rdma_destroy_id(id);
            continue;
        }
        rdma_ack_cm_event(ev);
        if (!q || id == ctx->listen_id)
            continue;
        if (t == RDMA_CM_EVENT_DISCONNECTED ||
            t == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            ib_poll(ctx); /* what arrived before it counts */
            ib_qp_ended(q, t == RDMA_CM_EVENT_DISCONNECTED
                               ? "disconnected without goodbye (process died "
                                 "or was killed?)"
                               : "the RDMA device was removed");
        }
    }
}

/* ---- asynchronous events ---- */

/* A device's asynchronous events (a port gone down, a CQ overrun, a queue
 * pair in error) come through its context's async fd. rdma_cm opens each
 * device once per process, so every communicator on it shares that fd:
 * whichever engine finds events there reads them into the device's log
 * (under ib_async_lock), and every context takes what is new for it in
 * its own turn (ib_async_take: an atomic load per turn when nothing
 * happened). */
#define IB_ASYNC_LOG 64
#define IB_ASYNC_DEVS 16
typedef struct {
    enum ibv_event_type type;
    int port;
    const void *obj; /* the QP or CQ it names (compared, never used) */
} ib_async_ev_t;
typedef struct ib_async_dev {
    struct ibv_context *verbs;
    int users;
    unsigned gen; /* events logged */
    ib_async_ev_t log[IB_ASYNC_LOG];
} ib_async_dev_t;
static ib_async_dev_t ib_adevs[IB_ASYNC_DEVS];
static pthread_mutex_t ib_async_lock = PTHREAD_MUTEX_INITIALIZER;

/* Reads the events waiting on the device's fd into its log. */
static void ib_async_read(ib_async_dev_t *d)
{
    pthread_mutex_lock(&ib_async_lock);
    struct pollfd pf = {.fd = d->verbs->async_fd, .events = POLLIN};
    struct ibv_async_event ev;
    /* (the fd stays blocking: other users of the shared context may rely
     * on it; poll says an event is there before it is read) */
    while (poll(&pf, 1, 0) > 0 && (pf.revents & POLLIN) &&
           ibv_get_async_event(d->verbs, &ev) == 0) {
        ib_async_ev_t *e = &d->log[d->gen % IB_ASYNC_LOG];
        e->type = ev.event_type;
        e->port = 0;
        e->obj = NULL;
        switch (ev.event_type) {
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
            e->port = ev.element.port_num;
            break;
        case IBV_EVENT_CQ_ERR:
            e->obj = ev.element.cq;
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            e->obj = ev.element.qp;
            break;
        default:
            break;
        }
        ibv_ack_async_event(&ev);
        __atomic_store_n(&d->gen, d->gen + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ib_async_lock);
}

static void ib_fail_all(struct rcoll_tl_ctx *ctx, const char *what)
{
    for (int i = 0; i < ctx->p.nranks; i++)
        if (ctx->eps[i])
            ib_ep_fail(ctx->eps[i], "%s", what);
}

/* One event, as it concerns this context: a port of ours down, our CQ
 * overrun or the device lost fail every peer at once (not at the
 * deadline); a queue pair of ours in error fails its peer. */
static void ib_async_handle(struct rcoll_tl_ctx *ctx, const ib_async_ev_t *e)
{
    char what[256];
    const char *name = ibv_event_type_str(e->type);
    switch (e->type) {
    case IBV_EVENT_PORT_ERR:
        if (e->port != ctx->port)
            return;
        snprintf(what, sizeof(what), "this rank's device %s port %d went down "
                 "(asynchronous event %s)", ctx->devname, e->port, name);
        ib_fail_all(ctx, what);
        return;
    case IBV_EVENT_DEVICE_FATAL:
        snprintf(what, sizeof(what), "device %s failed (asynchronous event "
                 "%s)", ctx->devname, name);
        ib_fail_all(ctx, what);
        return;
    case IBV_EVENT_CQ_ERR:
        if (e->obj != ctx->cq)
            return;
        snprintf(what, sizeof(what), "device %s port %d: the completion "
                 "queue overran (asynchronous event %s)", ctx->devname,
                 ctx->port, name);
        ib_fail_all(ctx, what);
        return;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
        /* what arrived before it counts: a peer that aborts (its reason
         * is a message) and closes may raise this event before we have
         * polled its last messages */
        ib_poll(ctx);
        for (int i = 0; i < ctx->nq; i++) {
            ib_qp_t *q = ctx->qps[i];
            if (q->qp && (const void *)q->qp == e->obj && !q->ended) {
                snprintf(what, sizeof(what), "device %s port %d: queue pair "
                         "%d failed (asynchronous event %s)", ctx->devname,
                         ctx->port, q->idx, name);
                ib_qp_ended(q, what);
            }
        }
        return;
    default:
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: %s: asynchronous event %s"
                   " (port %d)", ctx->p.rank, ctx->devname, name, e->port);
        return;
    }
}

/* Takes the device's events this context has not seen. */
static void ib_async_take(struct rcoll_tl_ctx *ctx)
{
    ib_async_dev_t *d = ctx->adev;
    ib_async_ev_t evs[IB_ASYNC_LOG];
    if (!d || __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE) == ctx->async_seen)
        return;
    pthread_mutex_lock(&ib_async_lock);
    unsigned n = d->gen - ctx->async_seen, lost = 0;
    if (n > IB_ASYNC_LOG) {
        lost = n - IB_ASYNC_LOG;
        n = IB_ASYNC_LOG;
    }
    for (unsigned k = 0; k < n; k++)
        evs[k] = d->log[(d->gen - n + k) % IB_ASYNC_LOG];
    ctx->async_seen = d->gen;
    pthread_mutex_unlock(&ib_async_lock);
    if (lost)
        rcoll_warn("ib: rank %d: %u asynchronous events of %s were missed",
                   ctx->p.rank, lost, ctx->devname);
    for (unsigned k = 0; k < n; k++)
        ib_async_handle(ctx, &evs[k]);
}

static void ib_async_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_tl_ctx *ctx =
        (struct rcoll_tl_ctx *)((char *)h - offsetof(struct rcoll_tl_ctx,
                                                     async_h));
    (void)events;
    ib_async_read(ctx->adev);
    ib_async_take(ctx);
}

/* Joins the device's log and puts its fd in the engine's epoll set. */
static rcoll_status_t ib_async_attach(struct rcoll_tl_ctx *ctx)
{
    ib_async_dev_t *d = NULL;
    pthread_mutex_lock(&ib_async_lock);
    for (int i = 0; i < IB_ASYNC_DEVS && !d; i++)
        if (ib_adevs[i].users && ib_adevs[i].verbs == ctx->verbs)
            d = &ib_adevs[i];
    for (int i = 0; i < IB_ASYNC_DEVS && !d; i++)
        if (!ib_adevs[i].users) {
            d = &ib_adevs[i];
            d->verbs = ctx->verbs;
            d->gen = 0;
        }
    if (d) {
        d->users++;
        ctx->adev = d;
        ctx->async_seen = d->gen;
    }
    pthread_mutex_unlock(&ib_async_lock);
    if (!d)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: more than %d RDMA "
                                "devices in use in this process",
                                IB_ASYNC_DEVS);
    ctx->async_h.cb = ib_async_event;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &ctx->async_h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, ctx->verbs->async_fd, &e) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: epoll_ctl of %s's "
                                "event fd: %s", ctx->devname, strerror(errno));
    return RCOLL_OK;
}

static void ib_async_detach(struct rcoll_tl_ctx *ctx)
{
    if (!ctx->adev)
        return;
    epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ctx->verbs->async_fd, NULL);
    pthread_mutex_lock(&ib_async_lock);
    if (--ctx->adev->users == 0)
        ctx->adev->verbs = NULL;
    pthread_mutex_unlock(&ib_async_lock);
    ctx->adev = NULL;
}

/* ---- user registrations ---- */

static rcoll_status_t ib_mem_reg(rcoll_tl_ctx_t *ctx, void *buf, size_t len,
                                 void **h)
{
    ib_ureg_t *u = calloc(1, sizeof(*u));
    if (!u)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    u->buf = buf;
    u->len = len;
    if (!(u->mr = ib_reg(ctx, buf, len, IBV_ACCESS_LOCAL_WRITE,
                         "user memory (rcoll_comm_register)"))) {
        free(u);
        return RCOLL_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&ctx->reg_lock);
    if (ctx->nregs == ctx->regs_cap) {
        int cap = ctx->regs_cap ? 2 * ctx->regs_cap : 8;
        ib_ureg_t **r = realloc(ctx->regs, (size_t)cap * sizeof(*r));
        if (!r) {
            pthread_mutex_unlock(&ctx->reg_lock);
            ibv_dereg_mr(u->mr);
            free(u);
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        }
        ctx->regs = r;
        ctx->regs_cap = cap;
    }
    int i = ctx->nregs;
    __atomic_store_n(&ctx->nregs, i + 1, __ATOMIC_RELAXED);
    while (i > 0 && ctx->regs[i - 1]->buf > u->buf) {
        ctx->regs[i] = ctx->regs[i - 1];
        i--;
    }
    ctx->regs[i] = u;
    pthread_mutex_unlock(&ctx->reg_lock);
    *h = u;
    return RCOLL_OK;
}

static void ib_mem_dereg(rcoll_tl_ctx_t *ctx, void *h)
{
    ib_ureg_t *u = h;
    pthread_mutex_lock(&ctx->reg_lock);
    for (int i = 0; i < ctx->nregs; i++)
        if (ctx->regs[i] == u) {
            memmove(&ctx->regs[i], &ctx->regs[i + 1],
                    (size_t)(ctx->nregs - i - 1) * sizeof(*ctx->regs));
            __atomic_store_n(&ctx->nregs, ctx->nregs - 1, __ATOMIC_RELAXED);
            break;
        }
    pthread_mutex_unlock(&ctx->reg_lock);
    ibv_dereg_mr(u->mr);
    free(u);
}

/* The lkey of a registration that holds [p, p + len), or 0 (none). */
static uint32_t ib_reg_lookup(struct rcoll_tl_ctx *ctx, const void *p,
                              size_t len)
{
    const char *a = p;
    uint32_t key = 0;
    pthread_mutex_lock(&ctx->reg_lock);
    int lo = 0, hi = ctx->nregs - 1;
    while (lo <= hi) { /* the last registration starting at or below p */
        int mid = (lo + hi) / 2;
        if (ctx->regs[mid]->buf <= a)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    /* overlapping registrations: look back a few for one that covers it */
    for (int i = hi; i >= 0 && i > hi - 8; i--) {
        ib_ureg_t *u = ctx->regs[i];
        if (a >= u->buf && (size_t)(a - u->buf) + len <= u->len) {
            key = u->mr->lkey;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->reg_lock);
    return key;
}

/* ---- data path ---- */

/* The peer's receive in place that message h belongs to, or -1. */
static int ib_rplace_find(const ib_ep_t *ep, const rcoll_msg_hdr_t *h)
{
    for (int i = ep->nrplace - 1; i >= 0; i--) {
        const ib_place_msg_t *rp = &ep->rplace[i];
        if (rp->seq != h->seq || rp->step != h->step ||
            rp->kind != (h->kind & ~RCOLL_HDR_CSUM) || rp->tag != h->tag ||
            rp->total != h->total)
            continue;
        uint64_t off = (uint64_t)h->chunk * rp->chunk;
        if (off >= rp->bytes || h->len > rp->bytes - off)
            return -1; /* not its data: through the slot, the peer sees */
        return i;
    }
    return -1;
}

static rcoll_status_t ib_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                              const void *payload, void *cookie, int flags,
                              size_t xfer)
{
    (void)xfer;
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    ib_qp_t *q = &ep->qps[ep->tx_seq % (uint64_t)ctx->nqps];
    uint64_t ns = (uint64_t)ctx->p.nslots;
    (void)flags;
    if (ep->failed || q->ended)
        return ib_ep_error(ep);
    if (q->bye)
        return rcoll__set_error(RCOLL_ERR_REMOTE,
                                "rank %d already destroyed the communicator",
                                ep->peer);
    if (hdr->len > ctx->p.chunk_size)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "ib: a %u-byte message "
                                "to rank %d is larger than a slot (%zu)",
                                hdr->len, ep->peer, ctx->p.chunk_size);
    int rp = ep->nrplace && hdr->len ? ib_rplace_find(ep, hdr) : -1;
    int need = (q->imm ? 1 : 2) + (rp >= 0);
    if (!rcoll_slots_can_send(&q->sl) || q->tx_seq - q->tx_done >= ns ||
        q->sq_free < need || !ib_cq_room(ctx, need)) {
        ib_poll(ctx);
        rp = ep->nrplace && hdr->len ? ib_rplace_find(ep, hdr) : -1;
        need = (q->imm ? 1 : 2) + (rp >= 0);
        if (!rcoll_slots_can_send(&q->sl) || q->tx_seq - q->tx_done >= ns ||
            q->sq_free < need || !ib_cq_room(ctx, need))
            return RCOLL_INPROGRESS;
    }
    uint32_t slot = (uint32_t)(q->tx_seq % ns);
    char *s = q->tx + (size_t)slot * ctx->stride;
    size_t len = sizeof(rcoll_msg_hdr_t) + hdr->len;
    int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
    uint32_t word = IMM(rp >= 0 ? IMM_PLACED : IMM_DATA, c, slot);
    struct ibv_sge sge[3];
    struct ibv_send_wr wr[3], *bad, *m;
    uint32_t ukey = 0;
    memset(wr, 0, sizeof(wr));
    int inl = rp < 0 && len <= ctx->max_inline &&
              hdr->len <= rcoll_config.ib_inline;
    rcoll_rcache_entry_t *rent = NULL;
    if (!inl && hdr->len && __atomic_load_n(&ctx->nregs, __ATOMIC_RELAXED))
        ukey = ib_reg_lookup(ctx, payload, hdr->len);
    if (!inl && !ukey && ctx->rcache && rcoll_config.ib_zcopy_min &&
        hdr->len >= rcoll_config.ib_zcopy_min) {
        /* large: the NIC reads the caller's buffer through a cached
         * registration (a failure leaves it to the staging copy) */
        void *h;
        if ((rent = rcoll_rcache_get(ctx->rcache, (void *)payload, hdr->len,
                                     &h)))
            ukey = ((struct ibv_mr *)h)->lkey;
    }
    if (rp >= 0) {
        /* the payload straight into the peer's destination (from the
         * user's registered memory, else from staging), then the header
         * alone into the slot */
        const ib_place_msg_t *p = &ep->rplace[rp];
        uint64_t off = (uint64_t)hdr->chunk * p->chunk;
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        if (!ukey)
            memcpy(s + IB_HDR, payload, hdr->len);
        sge[2] = ukey ? (struct ibv_sge){(uintptr_t)payload, hdr->len, ukey}
                      : (struct ibv_sge){(uintptr_t)(s + IB_HDR), hdr->len,
                                         q->tx_mr->lkey};
        wr[2].wr_id = WRID(q, WR_NOTE, 0);
        wr[2].opcode = IBV_WR_RDMA_WRITE;
        wr[2].sg_list = &sge[2];
        wr[2].num_sge = 1;
        wr[2].send_flags = IBV_SEND_SIGNALED;
        wr[2].wr.rdma.remote_addr = p->addr + off;
        wr[2].wr.rdma.rkey = p->rkey;
        wr[2].next = &wr[0];
        sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF), sizeof(*hdr),
                                  q->tx_mr->lkey};
        wr[0].num_sge = 1;
        if (off + hdr->len >= p->bytes) /* its last: forget it */
            ep->rplace[rp] = ep->rplace[--ep->nrplace];
        ctx->n_placed++;
    } else if (ukey) {
        /* registered user memory: the NIC gathers the payload in place */
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF), sizeof(*hdr),
                                  q->tx_mr->lkey};
        sge[1] = (struct ibv_sge){(uintptr_t)payload, hdr->len, ukey};
        wr[0].num_sge = 2;
    } else if (inl) {
        /* inline: the data is copied into the work request now */
        sge[0] = (struct ibv_sge){(uintptr_t)hdr, sizeof(*hdr), 0};
        sge[1] = (struct ibv_sge){(uintptr_t)payload, hdr->len, 0};
        wr[0].num_sge = hdr->len ? 2 : 1;
        wr[0].send_flags = IBV_SEND_INLINE;
    } else {
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        if (hdr->len)
            memcpy(s + IB_HDR, payload, hdr->len);
        sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF), (uint32_t)len,
                                  q->tx_mr->lkey};
        wr[0].num_sge = 1;
    }
    wr[0].sg_list = sge;
    wr[0].wr.rdma.remote_addr = q->raddr + (uint64_t)slot * ctx->stride +
                                IB_HDR_OFF;
    wr[0].wr.rdma.rkey = q->rkey;
    wr[0].send_flags |= IBV_SEND_SIGNALED;
    struct ibv_sge wsge = {(uintptr_t)&word, sizeof(word), 0};
    if (q->imm) {
        wr[0].wr_id = WRID(q, WR_DATA, 0);
        wr[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr[0].imm_data = htonl(word);
    } else {
        wr[0].wr_id = WRID(q, WR_NOTE, 0);
        wr[0].opcode = IBV_WR_RDMA_WRITE;
        wr[0].next = &wr[1];
        wr[1].wr_id = WRID(q, WR_DATA, 0);
        wr[1].opcode = IBV_WR_SEND;
        wr[1].sg_list = &wsge;
        wr[1].num_sge = 1;
        wr[1].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    }
    m = rp >= 0 ? &wr[2] : &wr[0];
    int rc = ibv_post_send(q->qp, m, &bad);
    if (rc != 0) {
        rcoll_rcache_put(ctx->rcache, rent);
        ib_ep_fail(ep, "ibv_post_send on queue pair %d: %s", q->idx,
                   strerror(rc));
        return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
    }
    q->sq_free -= need;
    ib_cq_posted(q, need);
    rcoll_slots_take_owed(&q->sl, c);
    rcoll_slots_sent(&q->sl);
    q->tx_seq++;
    ep->tx_seq++;
    ctx->n_sent++;
    if (ukey) {
        /* done when the NIC has read it: at the completion */
        q->tx_cookie[slot] = cookie;
        q->tx_rent[slot] = rent;
        ctx->n_zcopy++;
    } else if (cookie) {
        /* the payload was copied (staging or inline): the buffer is free */
        ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
    }
    return RCOLL_OK;
}

/* 1 if a zero-copy send with this cookie is still posted on q */
static int ib_qp_holds(const ib_qp_t *q, const void *cookie)
{
    uint64_t ns = (uint64_t)q->ep->ctx->p.nslots;
    for (uint64_t k = q->tx_done; k < q->tx_seq; k++)
        if (q->tx_cookie[k % ns] == cookie)
            return 1;
    return 0;
}

/* Withdraws the zero-copy sends of a failed operation (transport op
 * send_revoke): the NIC may read registered user memory until their
 * completions. They get IB_REVOKE_WAIT seconds to complete; a queue pair
 * that still holds one then goes to the error state, which flushes its
 * work requests (the NIC reads nothing more of them), and fails its
 * peer. Sends from staging hold nothing of the caller's. */
#define IB_REVOKE_WAIT 1.0
static void ib_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                           const char *why)
{
    (void)why; /* a stopped queue pair fails its peer; the abort says why */
    double wait = RCOLL_MIN(IB_REVOKE_WAIT, ctx->p.timeout);
    double stop_at = rcoll_time_sec() + wait, give_up = stop_at + wait;
    for (;;) {
        int held = 0;
        double now = rcoll_time_sec();
        for (int i = 0; i < ctx->nq; i++) {
            ib_qp_t *q = ctx->qps[i];
            if (!q->qp || !ib_qp_holds(q, cookie))
                continue;
            held = 1;
            if (now >= stop_at && !q->ended) {
                struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
                int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
                ib_qp_ended(q, rc ? "a failed operation's zero-copy send "
                            "did not complete, and its queue pair could not "
                            "be stopped" : "a failed operation's zero-copy "
                            "send did not complete in time: its queue pair "
                            "was stopped");
            }
        }
        if (!held)
            return;
        if (now >= give_up)
            break;
        if (ib_poll(ctx) == 0)
            usleep(100);
    }
    /* a device that flushes nothing: nothing more can be done here */
    uint64_t ns = (uint64_t)ctx->p.nslots;
    for (int i = 0; i < ctx->nq; i++) {
        ib_qp_t *q = ctx->qps[i];
        for (uint64_t k = q->tx_done; q->qp && k < q->tx_seq; k++)
            if (q->tx_cookie[k % ns] == cookie) {
                rcoll_warn("ib: rank %d: %s did not flush a zero-copy send "
                           "to rank %d within %g s of stopping its queue "
                           "pair", ctx->p.rank, ctx->devname, q->ep->peer,
                           wait);
                q->tx_cookie[k % ns] = NULL;
                if (q->tx_rent[k % ns])
                    rcoll_rcache_invalidate(ctx->rcache, q->tx_rent[k % ns]);
                ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
            }
    }
}

/* ---- receives in place ---- */

static int ib_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (!rcoll_config.ib_place_min || pl->bytes < rcoll_config.ib_place_min ||
        ep->nplace == IB_NPLACE || ep->failed || !pl->chunk)
        return 0;
    void *mrh;
    rcoll_rcache_entry_t *rent =
        rcoll_rcache_get(ctx->rcache, pl->dst, pl->bytes, &mrh);
    if (!rent) {
        rcoll_debug(RCOLL_SUBSYS_NET, "ib: cannot register %zu bytes for a "
                    "receive in place from rank %d (%s): through the slots",
                    pl->bytes, ep->peer, rcoll_last_error());
        return 0;
    }
    struct ibv_mr *mr = mrh;
    ib_place_msg_t m = {.seq = pl->seq, .total = pl->total,
                        .chunk = pl->chunk, .addr = (uintptr_t)pl->dst,
                        .bytes = pl->bytes, .kind = pl->kind,
                        .step = pl->step, .tag = pl->tag, .rkey = mr->rkey};
    rcoll_msg_hdr_t h = {.kind = IB_KIND_PLACE, .len = sizeof(m)};
    char buf[sizeof(m)];
    memcpy(buf, &m, sizeof(m));
    if (ib_send(tep, &h, buf, NULL, 0, sizeof(m)) != RCOLL_OK) {
        /* no credit now (or the link failed: the next call says so) */
        rcoll_rcache_put(ctx->rcache, rent);
        return 0;
    }
    ep->place[ep->nplace].pl = *pl;
    ep->place[ep->nplace].mr = mr;
    ep->place[ep->nplace].rent = rent;
    ep->place[ep->nplace++].landed = 0;
    return 1;
}

static void ib_recv_unplace(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    for (int i = 0; i < ep->nplace; i++) {
        if (ep->place[i].pl.seq != pl->seq || ep->place[i].pl.step != pl->step ||
            ep->place[i].pl.dst != pl->dst)
            continue;
        rcoll_debug(RCOLL_SUBSYS_NET, "ib: %zu of %zu bytes from rank %d "
                    "(message %llu, transfer %u) landed in place",
                    ep->place[i].landed, pl->bytes, ep->peer,
                    (unsigned long long)pl->seq, pl->step);
        /* All of it landed: the registration stays cached for the
         * buffer's next use. Else (a failed operation's) it goes: a write
         * still to come then fails on the peer's queue pair, not in
         * memory that is the caller's again. */
        if (ep->place[i].landed < pl->bytes)
            rcoll_rcache_invalidate(ep->ctx->rcache, ep->place[i].rent);
        rcoll_rcache_put(ep->ctx->rcache, ep->place[i].rent);
        ep->place[i] = ep->place[--ep->nplace];
        return;
    }
}

static void ib_recv_release(rcoll_tl_ep_t *tep);

static rcoll_status_t ib_recv_peek(rcoll_tl_ep_t *tep,
                                   const rcoll_msg_hdr_t **hdr,
                                   const void **payload)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    ib_qp_t *q;
    for (;;) {
        q = &ep->qps[ep->rx_seq % (uint64_t)ctx->nqps];
        if (q->sl.count == 0) {
            if (ep->failed || q->ended)
                return ib_ep_error(ep);
            if (q->bye)
                return rcoll__set_error(RCOLL_ERR_REMOTE,
                                        "rank %d already destroyed the "
                                        "communicator", ep->peer);
            return RCOLL_INPROGRESS;
        }
        if (q->rx_flag[q->sl.head] != SLOT_TL)
            break;
        ib_recv_release(tep); /* a PLACE notice, taken when it came */
    }
    char *s = q->rx + (size_t)q->sl.head * ctx->stride;
    memcpy(&ep->rx_hdr, s + IB_HDR_OFF, sizeof(ep->rx_hdr));
    if (ep->rx_hdr.len > ctx->p.chunk_size) /* rewritten since: a mismatch */
        ep->rx_hdr.len = (uint32_t)ctx->p.chunk_size + 1;
    *hdr = &ep->rx_hdr;
    *payload = s + IB_HDR;
    if (q->rx_flag[q->sl.head] == SLOT_PLACED) {
        /* the payload is where our receive in place wanted it */
        const rcoll_msg_hdr_t *h = &ep->rx_hdr;
        for (int i = 0; i < ep->nplace; i++) {
            const rcoll_tl_place_t *pl = &ep->place[i].pl;
            size_t off = (size_t)h->chunk * pl->chunk;
            if (pl->seq != h->seq || pl->step != h->step ||
                pl->kind != (h->kind & ~RCOLL_HDR_CSUM) ||
                pl->tag != h->tag || pl->total != h->total ||
                h->chunk >= (pl->bytes + pl->chunk - 1) / pl->chunk ||
                h->len > pl->bytes - off)
                continue;
            *payload = pl->dst + off;
            ep->place[i].landed += h->len;
            return RCOLL_OK;
        }
        ib_ep_fail(ep, "protocol error: data written in place for a "
                   "receive not posted (transfer %u chunk %u of message "
                   "%llu)", h->step, h->chunk, (unsigned long long)h->seq);
        return ib_ep_error(ep);
    }
    return RCOLL_OK;
}

static void ib_recv_release(rcoll_tl_ep_t *tep)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    ib_qp_t *q = &ep->qps[ep->rx_seq % (uint64_t)ctx->nqps];
    q->rx_flag[q->sl.head] = SLOT_PLAIN;
    ep->rx_seq++;
    /* like TCP: credits go back with our next message, alone at half the
     * slots, or when the engine idles */
    if (rcoll_slots_release(&q->sl))
        ib_send_credits(q);
}

static int ib_recv_full(rcoll_tl_ep_t *tep)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    for (int k = 0; k < ep->ctx->nqps; k++)
        if (rcoll_slots_held(&ep->qps[k].sl))
            return 1;
    return 0;
}

/* ---- setup ---- */

static rcoll_status_t ib_qp_alloc(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    if (posix_memalign((void **)&q->rx, 4096, ctx->ring_bytes) ||
        posix_memalign((void **)&q->tx, 4096, ctx->ring_bytes) ||
        !(q->rbuf = calloc((size_t)q->nrecv, sizeof(uint32_t))) ||
        !(q->tx_cookie = calloc((size_t)ctx->p.nslots, sizeof(void *))) ||
        !(q->tx_rent = calloc((size_t)ctx->p.nslots, sizeof(*q->tx_rent))) ||
        !(q->rx_flag = calloc((size_t)ctx->p.nslots, 1)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory for "
                                "%zu-byte rings", ctx->ring_bytes);
    memset(q->rx, 0, ctx->ring_bytes);
    memset(q->tx, 0, ctx->ring_bytes);
    if (!(q->rx_mr = ib_reg(ctx, q->rx, ctx->ring_bytes,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                            "receive slots")) ||
        !(q->tx_mr = ib_reg(ctx, q->tx, ctx->ring_bytes,
                            IBV_ACCESS_LOCAL_WRITE, "send staging")) ||
        !(q->rbuf_mr = ib_reg(ctx, q->rbuf,
                              (size_t)q->nrecv * sizeof(uint32_t),
                              IBV_ACCESS_LOCAL_WRITE, "receive words")))
        return RCOLL_ERR_NO_MEMORY;
    return RCOLL_OK;
}

/* Creates the QP (on the cm id: then it is in INIT; or plain for oob). */
static rcoll_status_t ib_qp_create(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                   struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr a;
    /* the most inline data the device takes (siw: less than 256) */
    static const uint32_t inl[] = {256, 128, 64, 32, 16, 0};
    for (int attempt = 0; attempt < 6; attempt++) {
        memset(&a, 0, sizeof(a));
        a.send_cq = a.recv_cq = ctx->cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = (uint32_t)ctx->sq_depth;
        a.cap.max_recv_wr = (uint32_t)q->nrecv;
        a.cap.max_send_sge = 2;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = inl[attempt];
        int rc;
        if (id) {
            rc = rdma_create_qp(id, ctx->pd, &a);
            if (rc == 0)
                q->qp = id->qp;
        } else {
            q->qp = ibv_create_qp(ctx->pd, &a);
            rc = q->qp ? 0 : -1;
        }
        if (rc == 0)
            break;
        if (attempt == 5)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: creating a queue "
                                    "pair to rank %d on %s: %s", q->ep->peer,
                                    ctx->devname, strerror(errno));
    }
    if (ctx->max_inline == 0 || a.cap.max_inline_data < ctx->max_inline)
        ctx->max_inline = a.cap.max_inline_data;
    if (!ctx->imm_ok && a.cap.max_inline_data < sizeof(uint32_t))
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: %s has neither "
                                "immediate data nor inline sends: not "
                                "supported", ctx->devname);
    q->sq_free = ctx->sq_depth;
    return RCOLL_OK;
}

/* Posts every receive (the QP must be in INIT or later). */
static rcoll_status_t ib_qp_post_recvs(ib_qp_t *q)
{
    for (int i = 0; i < q->nrecv; i++)
        if (ib_post_recv(q, i) != 0)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: posting receives "
                                    "for rank %d: %s", q->ep->peer,
                                    strerror(errno));
    return RCOLL_OK;
}

static void ib_conn_data_fill(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                              ib_conn_data_t *d)
{
    memset(d, 0, sizeof(*d));
    d->magic = IB_MAGIC;
    d->from = ctx->p.rank;
    d->to = q->ep->peer;
    d->idx = (uint16_t)q->idx;
    d->nqps = (uint16_t)ctx->nqps;
    d->nslots = (uint32_t)ctx->p.nslots;
    d->chunk = (uint32_t)ctx->p.chunk_size;
    d->rkey = q->rx_mr->rkey;
    d->imm = (uint32_t)ctx->imm_ok;
    d->addr = (uint64_t)(uintptr_t)q->rx;
    conn_data_seal(ctx, d);
}

static rcoll_status_t ib_conn_data_apply(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                         const ib_conn_data_t *d)
{
    if (d->nqps != ctx->nqps || d->nslots != (uint32_t)ctx->p.nslots ||
        d->chunk != (uint32_t)ctx->p.chunk_size)
        return rcoll__set_error(
            RCOLL_ERR_INVALID_ARGUMENT,
            "ib: rank %d and rank %d disagree on RCOLL_IB_QPS_PER_PEER (%d vs "
            "%u), RCOLL_CHUNK_SIZE (%zu vs %u) or RCOLL_NSLOTS (%d vs %u): "
            "set them the same on every rank", ctx->p.rank, q->ep->peer,
            ctx->nqps, d->nqps, ctx->p.chunk_size, d->chunk, ctx->p.nslots,
            d->nslots);
    q->raddr = d->addr;
    q->rkey = d->rkey;
    q->imm = ctx->imm_ok && d->imm;
    return RCOLL_OK;
}

static const char *peer_str(struct rcoll_tl_ctx *ctx, int peer, char *b,
                            size_t l)
{
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[peer];
    snprintf(b, l, "rank %d (%s pid %d)", peer, pi->hostname, pi->pid);
    return b;
}

/* An active QP's connection attempt: a new cm_id, then address and route
 * resolution (the events continue it in ib_connect_cm). */
static rcoll_status_t ib_cm_start(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                  const struct sockaddr_in *addrs)
{
    char ps[128];
    if (rdma_create_id(ctx->ech, &q->id, q, RDMA_PS_TCP) != 0 ||
        rdma_resolve_addr(q->id, (struct sockaddr *)&ctx->addr,
                          (struct sockaddr *)&addrs[q->ep->peer], 5000) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: resolving the "
                                "address of %s: %s",
                                peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                strerror(errno));
    return RCOLL_OK;
}

/* cm mode: connect to every higher peer, accept every lower one, all at
 * once through the event channel.
 *
 * iWARP (MPA, RFC 5044) lets the initiator send first: the responder sees
 * ESTABLISHED as soon as its MPA reply is on the wire, and an FPDU it sends
 * then can reach the initiator before the initiator's kernel has read that
 * reply; siw then fails the connection (CONNECT_ERROR, -EINVAL) and the
 * responder's write fails. So the initiator greets each accepted QP with a
 * zero-credit note right after ESTABLISHED, and a QP we accepted counts as
 * ready only once something from the peer arrived on it: nothing of ours
 * goes out on it before that. */
static rcoll_status_t ib_connect_cm(struct rcoll_tl_ctx *ctx,
                                    const struct sockaddr_in *addrs)
{
    int r = ctx->p.rank, expected = 0, up = 0, ready = 0;
    double deadline = rcoll_time_sec() + ctx->p.timeout;
    char ps[128];
    rcoll_status_t st;
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        expected++;
        if (q->ep->peer < r)
            continue;
        q->active = 1;
        st = ib_cm_start(ctx, q, addrs);
        if (st != RCOLL_OK)
            return st;
    }
    while (ready < expected) {
        double left = deadline - rcoll_time_sec();
        if (left <= 0) {
            int silent = -1;
            for (int g = 0; g < ctx->nq && silent < 0; g++)
                if (ctx->qps[g]->up && !ctx->qps[g]->heard &&
                    !ctx->qps[g]->active)
                    silent = ctx->qps[g]->ep->peer;
            if (up == expected && silent >= 0)
                return rcoll__set_error(
                    RCOLL_ERR_TIMEOUT, "ib: rank %d: %d of %d connections "
                    "established, but nothing arrived from %s within "
                    "RCOLL_TIMEOUT", r, up, expected,
                    peer_str(ctx, silent, ps, sizeof(ps)));
            return rcoll__set_error(RCOLL_ERR_TIMEOUT, "ib: rank %d: only %d "
                                    "of %d connections came up within "
                                    "RCOLL_TIMEOUT", r, up, expected);
        }
        /* greetings arrive on the CQ, not the event channel: look often
         * while only they are missing */
        int wait_ms = up == expected ? 2 : 1000;
        struct pollfd pf = {.fd = ctx->ech->fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)RCOLL_MIN(left * 1000 + 1, wait_ms));
        ib_poll(ctx);
        ready = 0;
        for (int g = 0; g < ctx->nq; g++) {
            ib_qp_t *q = ctx->qps[g];
            if (q->ended && q->up)
                return rcoll__set_error(RCOLL_ERR_REMOTE, "ib: connecting "
                                        "rank %d and %s: %s", r,
                                        peer_str(ctx, q->ep->peer, ps,
                                                 sizeof(ps)),
                                        q->ep->fail_msg[0] ? q->ep->fail_msg
                                                           : "queue pair "
                                                             "failed");
            ready += q->up && (q->active || q->heard);
        }
        if (pr <= 0)
            continue;
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ctx->ech, &ev) != 0)
            continue;
        struct rdma_cm_id *id = ev->id;
        ib_qp_t *q = id->context, *redo = NULL;
        st = RCOLL_OK;
        switch (ev->event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(id, 5000) != 0)
                st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: resolving the "
                                      "route to %s: %s",
                                      peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                      strerror(errno));
            break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
            ib_conn_data_t d;
            st = ib_qp_create(ctx, q, id);
            if (st == RCOLL_OK)
                st = ib_qp_post_recvs(q);
            if (st != RCOLL_OK)
                break;
            ib_conn_data_fill(ctx, q, &d);
            struct rdma_conn_param cp = {
                .private_data = &d, .private_data_len = sizeof(d),
                .responder_resources = 1, .initiator_depth = 1,
                .retry_count = 7, .rnr_retry_count = 7};
            if (rdma_connect(id, &cp) != 0) {
                /* iWARP devices without a port mapper (siw) bind a kernel
                 * TCP socket to the port rdma_cm chose in its own port
                 * space, which a TCP socket of this host may hold: nothing
                 * reached the peer, so a new cm_id (a new port) may try */
                if ((errno == EADDRINUSE || errno == EADDRNOTAVAIL) &&
                    q->cm_tries < IB_CM_TRIES) {
                    rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: rdma_connect "
                               "to %s: %s; again with another port", r,
                               peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                               strerror(errno));
                    redo = q;
                    break;
                }
                st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_connect to "
                                      "%s: %s",
                                      peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                      strerror(errno));
            }
            break;
        }
        case RDMA_CM_EVENT_CONNECT_REQUEST: {
            ib_conn_data_t d;
            ib_qp_t *nq = NULL;
            if (conn_data_check(ctx, ev->param.conn.private_data,
                                ev->param.conn.private_data_len, &d) == 0 &&
                d.to == r && d.from >= 0 && d.from < r &&
                ctx->eps[d.from] && d.idx < ctx->nqps)
                nq = &ctx->eps[d.from]->qps[d.idx];
            if (!nq || nq->id) {
                rcoll_warn("ib: rank %d rejected a connection request: %s", r,
                           nq ? "duplicate" : "not from this job");
                rdma_reject(id, NULL, 0);
                rdma_ack_cm_event(ev);
                rdma_destroy_id(id);
                continue;
            }
            nq->id = id;
            id->context = nq;
            st = ib_conn_data_apply(ctx, nq, &d);
            if (st == RCOLL_OK)
                st = ib_qp_create(ctx, nq, id);
            if (st == RCOLL_OK)
                st = ib_qp_post_recvs(nq);
            if (st != RCOLL_OK)
                break;
            ib_conn_data_fill(ctx, nq, &d);
            d.imm = (uint32_t)nq->imm; /* the decision, for the other end */
            conn_data_seal(ctx, &d);
            struct rdma_conn_param cp = {
                .private_data = &d, .private_data_len = sizeof(d),
                .responder_resources = 1, .initiator_depth = 1,
                .retry_count = 7, .rnr_retry_count = 7};
            if (rdma_accept(id, &cp) != 0)
                st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_accept from "
                                      "%s: %s",
                                      peer_str(ctx, d.from, ps, sizeof(ps)),
                                      strerror(errno));
            break;
        }
        case RDMA_CM_EVENT_ESTABLISHED:
            if (q->active) {
                ib_conn_data_t d;
                if (conn_data_check(ctx, ev->param.conn.private_data,
                                    ev->param.conn.private_data_len, &d) != 0 ||
                    d.from != q->ep->peer || d.to != r) {
                    st = rcoll__set_error(RCOLL_ERR_PROTOCOL, "ib: the reply "
                                          "of %s carries no valid ring "
                                          "address (%u bytes of private data)",
                                          peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                          ev->param.conn.private_data_len);
                    break;
                }
                st = ib_conn_data_apply(ctx, q, &d);
                if (st != RCOLL_OK)
                    break;
                /* the first FPDU is ours (see above) */
                if (ib_post_note(q, IMM(IMM_CREDIT, 0, 0)) != 0) {
                    st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: greeting %s "
                                          "on a new connection: %s",
                                          peer_str(ctx, q->ep->peer, ps,
                                                   sizeof(ps)),
                                          strerror(errno));
                    break;
                }
            }
            q->up = 1;
            up++;
            ready += q->active;
            break;
        default:
            st = rcoll__set_error(RCOLL_ERR_REMOTE, "ib: connecting rank %d "
                                  "and %s: %s (status %d)", r,
                                  q ? peer_str(ctx, q->ep->peer, ps, sizeof(ps))
                                    : "a peer",
                                  rdma_event_str(ev->event), ev->status);
        }
        rdma_ack_cm_event(ev);
        if (st != RCOLL_OK)
            return st;
        if (redo) { /* its events are acked: the id may go */
            ib_cq_forget(redo);
            rdma_destroy_qp(redo->id);
            rdma_destroy_id(redo->id);
            redo->id = NULL;
            redo->qp = NULL;
            redo->cm_tries++;
            st = ib_cm_start(ctx, redo, addrs);
            if (st != RCOLL_OK)
                return st;
        }
    }
    return RCOLL_OK;
}

/* oob mode: QP numbers, PSNs, rings and GIDs through the bootstrap. */
typedef struct {
    uint32_t qpn, psn, rkey, imm;
    uint64_t addr;
} ib_oob_qp_t;

typedef struct {
    uint8_t gid[16];
    uint16_t lid;
    uint8_t link_layer;
    uint8_t pad;
    uint32_t mtu;
    int32_t gid_index;
    uint32_t pad2;
} ib_oob_hdr_t;

static int ib_pick_gid(struct rcoll_tl_ctx *ctx, struct ibv_port_attr *pa,
                       union ibv_gid *gid)
{
    const char *gi = rcoll_config.ib_gid_index;
    if (gi && gi[0] && strcmp(gi, "auto") != 0) {
        char *end;
        long v = strtol(gi, &end, 0);
        if (*end || v < 0 || v > 65535 ||
            ibv_query_gid(ctx->verbs, ctx->port, (int)v, gid) != 0)
            return -1;
        return (int)v;
    }
    if (pa->link_layer != IBV_LINK_LAYER_ETHERNET) {
        ibv_query_gid(ctx->verbs, ctx->port, 0, gid);
        return 0;
    }
    int best = -1, best_score = 0;
    for (int i = 0; i < pa->gid_tbl_len && i < 256; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx->verbs, ctx->port, (uint32_t)i, &e, 0) != 0)
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
                    (is_v4 && !memcmp(g + 12, &ctx->addr.sin_addr, 4) ? 8 : 0);
        if (score > best_score) {
            best_score = score;
            best = i;
            *gid = e.gid;
        }
    }
    return best;
}

static rcoll_status_t ib_connect_oob(struct rcoll_tl_ctx *ctx)
{
    int n = ctx->p.nranks, r = ctx->p.rank;
    size_t per = sizeof(ib_oob_hdr_t) +
                 (size_t)n * (size_t)ctx->nqps * sizeof(ib_oob_qp_t);
    char *all = calloc((size_t)n, per);
    struct ibv_port_attr pa;
    union ibv_gid gid;
    rcoll_status_t st = RCOLL_OK;
    char ps[128];
    unsigned seed = (unsigned)(rcoll_time_sec() * 1e6) ^ (unsigned)getpid();
    if (!all)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    if (ibv_query_port(ctx->verbs, ctx->port, &pa) != 0) {
        free(all);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: ibv_query_port: %s",
                                strerror(errno));
    }
    memset(&gid, 0, sizeof(gid));
    int gidx = ib_pick_gid(ctx, &pa, &gid);
    if (gidx < 0) {
        free(all);
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: no usable GID on %s "
                                "port %d (set RCOLL_IB_GID_INDEX)",
                                ctx->devname, ctx->port);
    }
    char gs[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, gs, sizeof(gs));
    rcoll_info(RCOLL_SUBSYS_NET, "ib: oob connect on %s port %d, GID index "
               "%d (%s), LID %u", ctx->devname, ctx->port, gidx, gs, pa.lid);
    ib_oob_hdr_t *me = (ib_oob_hdr_t *)(all + (size_t)r * per);
    memcpy(me->gid, gid.raw, 16);
    me->lid = pa.lid;
    me->link_layer = pa.link_layer;
    me->mtu = pa.active_mtu;
    me->gid_index = gidx;
    ib_oob_qp_t *mine = (ib_oob_qp_t *)(me + 1);
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        st = ib_qp_create(ctx, q, NULL);
        if (st != RCOLL_OK)
            goto out;
        struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
                                 .port_num = ctx->port,
                                 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
                                                    IBV_ACCESS_REMOTE_WRITE};
        if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                          IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
            st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: queue pair to INIT: "
                                  "%s", strerror(errno));
            goto out;
        }
        st = ib_qp_post_recvs(q);
        if (st != RCOLL_OK)
            goto out;
        q->psn = (uint32_t)rand_r(&seed) & 0xffffff;
        ib_oob_qp_t *e = &mine[q->ep->peer * ctx->nqps + q->idx];
        e->qpn = q->qp->qp_num;
        e->psn = q->psn;
        e->rkey = q->rx_mr->rkey;
        e->imm = (uint32_t)ctx->imm_ok;
        e->addr = (uint64_t)(uintptr_t)q->rx;
    }
    st = rcoll_bootstrap_allgather(ctx->p.bs, all, per);
    if (st != RCOLL_OK)
        goto out;
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        int peer = q->ep->peer;
        ib_oob_hdr_t *th = (ib_oob_hdr_t *)(all + (size_t)peer * per);
        ib_oob_qp_t *te = (ib_oob_qp_t *)(th + 1) + r * ctx->nqps + q->idx;
        ib_conn_data_t d = {.nqps = (uint16_t)ctx->nqps,
                            .nslots = (uint32_t)ctx->p.nslots,
                            .chunk = (uint32_t)ctx->p.chunk_size,
                            .rkey = te->rkey, .imm = te->imm,
                            .addr = te->addr};
        st = ib_conn_data_apply(ctx, q, &d);
        if (st != RCOLL_OK)
            goto out;
        struct ibv_qp_attr at;
        memset(&at, 0, sizeof(at));
        at.qp_state = IBV_QPS_RTR;
        at.path_mtu = RCOLL_MIN(pa.active_mtu, (enum ibv_mtu)th->mtu);
        at.dest_qp_num = te->qpn;
        at.rq_psn = te->psn;
        at.max_dest_rd_atomic = 1;
        at.min_rnr_timer = 12;
        at.ah_attr.port_num = ctx->port;
        at.ah_attr.dlid = th->lid;
        if (pa.link_layer == IBV_LINK_LAYER_ETHERNET || th->lid == 0) {
            at.ah_attr.is_global = 1;
            memcpy(at.ah_attr.grh.dgid.raw, th->gid, 16);
            at.ah_attr.grh.sgid_index = (uint8_t)gidx;
            at.ah_attr.grh.hop_limit = 64;
        }
        if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_AV |
                                          IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                          IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC |
                                          IBV_QP_MIN_RNR_TIMER)) {
            st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: queue pair to %s: "
                                  "RTR failed: %s",
                                  peer_str(ctx, peer, ps, sizeof(ps)),
                                  strerror(errno));
            goto out;
        }
        memset(&at, 0, sizeof(at));
        at.qp_state = IBV_QPS_RTS;
        at.timeout = 14;
        at.retry_cnt = 7;
        at.rnr_retry = 7;
        at.sq_psn = q->psn;
        at.max_rd_atomic = 1;
        if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT |
                                          IBV_QP_RETRY_CNT |
                                          IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                          IBV_QP_MAX_QP_RD_ATOMIC)) {
            st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: queue pair to %s: "
                                  "RTS failed: %s",
                                  peer_str(ctx, peer, ps, sizeof(ps)),
                                  strerror(errno));
            goto out;
        }
        q->up = 1;
    }
    /* every rank's QPs are ready to receive before anyone sends */
    st = rcoll_bootstrap_barrier(ctx->p.bs);
out:
    free(all);
    return st;
}

static void ib_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort, const char *reason);

static rcoll_status_t ib_ctx_create(const rcoll_tl_params_t *p,
                                    rcoll_tl_ctx_t **ctx_p,
                                    rcoll_tl_ep_t **eps)
{
    struct rcoll_tl_ctx *ctx = calloc(1, sizeof(*ctx));
    struct sockaddr_in *addrs = NULL;
    rcoll_status_t st;
    int n = p->nranks, r = p->rank;
    const char *mode = rcoll_config.ib_connect ? rcoll_config.ib_connect : "cm";

    char why[320];
    if (!ib_libs_loaded(why, sizeof(why))) {
        free(ctx);
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: %s", why);
    }
    if (!ctx)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    ctx->p = *p;
    pthread_mutex_init(&ctx->reg_lock, NULL);
    ctx->nqps = rcoll_config.ib_qps_per_peer;
    if (!strcmp(mode, "oob"))
        ctx->oob = 1;
    else if (strcmp(mode, "cm") != 0 && mode[0]) {
        free(ctx);
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "RCOLL_IB_CONNECT="
                                "%s: expected cm or oob", mode);
    }
    ctx->stride = (IB_HDR + p->chunk_size + 63) & ~(size_t)63;
    ctx->ring_bytes = (size_t)p->nslots * ctx->stride + IB_CTRL;
    /* data (2 WRs each without immediates) + notes (credits, goodbye) */
    ctx->sq_depth = 3 * p->nslots + 8;
    ctx->eps = calloc((size_t)n, sizeof(*ctx->eps));
    addrs = calloc((size_t)n, sizeof(*addrs));
    if (!ctx->eps || !addrs) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        goto err;
    }
    ctx->ech = rdma_create_event_channel();
    if (!ctx->ech) {
        st = rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: rdma_create_event_"
                              "channel: %s (is rdma_ucm loaded?)",
                              strerror(errno));
        goto err;
    }
    st = ib_pick_address(ctx);
    if (st != RCOLL_OK)
        goto err;
    struct ibv_port_attr pa;
    ibv_query_port(ctx->verbs, ctx->port, &pa);
    ctx->imm_ok = ib_dev_imm(ctx->verbs);
    ib_sigpipe_guard(ctx);
    if (!(ctx->pd = ibv_alloc_pd(ctx->verbs)) ||
        !(ctx->cch = ibv_create_comp_channel(ctx->verbs))) {
        st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: protection domain or "
                              "completion channel on %s: %s", ctx->devname,
                              strerror(errno));
        goto err;
    }
    static const rcoll_rcache_ops_t rc_ops = {.reg = ib_rc_reg,
                                              .dereg = ib_rc_dereg};
    if (!(ctx->rcache = rcoll_rcache_create(&rc_ops, ctx,
                                            rcoll_config.rcache_max))) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        goto err;
    }
    const uint8_t *use = p->pairs + (size_t)r * (size_t)n;
    int npeers = 0;
    for (int i = 0; i < n; i++)
        npeers += i != r && use[i];
    ctx->qps = calloc((size_t)(npeers * ctx->nqps) + 1, sizeof(*ctx->qps));
    /* The CQ holds an entry per work request not yet polled: every
     * receive posted, and up to sq_depth sends per queue pair. A device
     * whose max_cqe is smaller gets its max_cqe, and posting waits for
     * room (ib_cq_room): the receives must fit, and one message. */
    int nrecv = 2 * p->nslots + 8;
    long want = (long)(npeers * ctx->nqps) * (ctx->sq_depth + nrecv) + 16;
    long recvs = (long)(npeers * ctx->nqps) * nrecv;
    long cqe = want;
    struct ibv_device_attr da;
    if (ibv_query_device(ctx->verbs, &da) == 0 && cqe > da.max_cqe)
        cqe = da.max_cqe;
    if (rcoll_fault("ib_cq_small")) /* (tests) */
        cqe = RCOLL_MIN(cqe, recvs + 8);
    if (cqe < recvs + 3) {
        st = rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: %s's completion "
                              "queues hold at most %ld entries; %d queue "
                              "pairs with %d receives each need %ld: lower "
                              "RCOLL_NSLOTS or RCOLL_IB_QPS_PER_PEER",
                              ctx->devname, cqe, npeers * ctx->nqps, nrecv,
                              recvs + 3);
        goto err;
    }
    if (cqe < want)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: %s's completion queue "
                   "holds %ld entries, not the %ld that %d queue pairs could "
                   "post: sends wait for room", r, ctx->devname, cqe, want,
                   npeers * ctx->nqps);
    ctx->cqe = (int)cqe;
    if (!ctx->qps ||
        !(ctx->cq = ibv_create_cq(ctx->verbs, ctx->cqe, NULL, ctx->cch, 0))) {
        st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: completion queue of %d "
                              "entries on %s: %s", ctx->cqe, ctx->devname,
                              strerror(errno));
        goto err;
    }
    for (int i = 0; i < n; i++) {
        if (i == r || !use[i])
            continue;
        ib_ep_t *ep = calloc(1, sizeof(*ep));
        if (!ep || !(ep->qps = calloc((size_t)ctx->nqps, sizeof(ib_qp_t)))) {
            free(ep);
            st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
            goto err;
        }
        ctx->eps[i] = ep;
        ep->ctx = ctx;
        ep->peer = i;
        for (int k = 0; k < ctx->nqps; k++) {
            ib_qp_t *q = &ep->qps[k];
            q->ep = ep;
            q->idx = k;
            q->gidx = ctx->nq;
            q->nrecv = nrecv;
            rcoll_slots_init(&q->sl, p->nslots);
            ctx->qps[ctx->nq++] = q;
            st = ib_qp_alloc(ctx, q);
            if (st != RCOLL_OK)
                goto err;
        }
    }
    if (!ctx->oob) {
        int backlog = RCOLL_MAX(16, npeers * ctx->nqps), lrc;
        /* siw listens on a kernel TCP socket at the port rdma_cm chose in
         * its own port space: on a collision, another id, another port */
        for (int t = 0; (lrc = rdma_listen(ctx->listen_id, backlog)) != 0 &&
                        errno == EADDRINUSE && t < IB_CM_TRIES; t++) {
            struct rdma_cm_id *id;
            rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: rdma_listen on %s: %s; "
                       "again with another port", r, ctx->addr_str,
                       strerror(errno));
            if (rdma_create_id(ctx->ech, &id, NULL, RDMA_PS_TCP) != 0)
                break;
            if (rdma_bind_addr(id, (struct sockaddr *)&ctx->addr) != 0) {
                rdma_destroy_id(id);
                break;
            }
            rdma_destroy_id(ctx->listen_id);
            ctx->listen_id = id;
        }
        if (lrc != 0) {
            st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_listen on %s: "
                                  "%s", ctx->addr_str, strerror(errno));
            goto err;
        }
        addrs[r] = ctx->addr;
        addrs[r].sin_port = rdma_get_src_port(ctx->listen_id);
        st = rcoll_bootstrap_allgather(p->bs, addrs, sizeof(*addrs));
        if (st == RCOLL_OK)
            st = ib_connect_cm(ctx, addrs);
    } else {
        st = ib_connect_oob(ctx);
    }
    if (st != RCOLL_OK)
        goto err;
    rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d on %s port %d (%s, %s), %d "
               "queue pairs per peer, %s, inline up to %u bytes, %s connect",
               r, ctx->devname, ctx->port, link_layer_str(pa.link_layer,
                                                          ctx->verbs),
               ctx->addr_str, ctx->nqps,
               ctx->nq && ctx->qps[0]->imm ? "WRITE_WITH_IMM"
                                           : "WRITE + SEND signals",
               ctx->max_inline, ctx->oob ? "oob" : "rdma_cm");
    /* into the engine's epoll set: completions and connection events */
    int fl = fcntl(ctx->cch->fd, F_GETFL);
    fcntl(ctx->cch->fd, F_SETFL, fl | O_NONBLOCK);
    fl = fcntl(ctx->ech->fd, F_GETFL);
    fcntl(ctx->ech->fd, F_SETFL, fl | O_NONBLOCK);
    ctx->cch_h.cb = ib_cq_event;
    ctx->ech_h.cb = ib_cm_event;
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = &ctx->cch_h};
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = &ctx->ech_h};
    if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, ctx->cch->fd, &e1) != 0 ||
        epoll_ctl(p->epfd, EPOLL_CTL_ADD, ctx->ech->fd, &e2) != 0) {
        st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: epoll_ctl: %s",
                              strerror(errno));
        goto err;
    }
    if ((st = ib_async_attach(ctx)) != RCOLL_OK)
        goto err;
    ibv_req_notify_cq(ctx->cq, 0);
    ctx->cq_armed = 1;
    free(addrs);
    for (int i = 0; i < n; i++)
        eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
    *ctx_p = ctx;
    return RCOLL_OK;
err:
    free(addrs);
    return rcoll_tl_create_failed(ctx, ib_ctx_destroy, st);
}

static void ib_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort, const char *reason)
{
    double deadline = rcoll_time_sec() + RCOLL_MIN(2.0, ctx->p.timeout);
    /* goodbye (or the abort and its reason) on every live QP; wait for
     * those to complete: then they are in the peer's memory */
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (!q->up || q->ended || !q->qp)
            continue;
        if (!ctx->oob && !q->active && !q->heard)
            continue; /* iWARP: the initiator has not spoken yet */
        if (abort && reason) {
            char *s = q->tx + (size_t)ctx->p.nslots * ctx->stride;
            snprintf(s, IB_CTRL, "%s", reason);
            struct ibv_sge sge = {(uintptr_t)s, (uint32_t)strlen(s) + 1,
                                  q->tx_mr->lkey};
            struct ibv_send_wr wr = {
                .wr_id = WRID(q, WR_NOTE, 0), .sg_list = &sge, .num_sge = 1,
                .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
                *bad;
            wr.wr.rdma.remote_addr = q->raddr + (uint64_t)ctx->p.nslots *
                                                    ctx->stride;
            wr.wr.rdma.rkey = q->rkey;
            while (q->sq_free < 2 && rcoll_time_sec() < deadline &&
                   !q->ended)
                ib_poll(ctx);
            if (q->sq_free >= 2 && ib_cq_room(ctx, 2) &&
                ibv_post_send(q->qp, &wr, &bad) == 0) {
                q->sq_free--;
                ib_cq_posted(q, 1);
            }
        }
        while ((q->sq_free < 1 || !ib_cq_room(ctx, 1)) &&
               rcoll_time_sec() < deadline && !q->ended)
            ib_poll(ctx);
        ib_post_note(q, IMM(IMM_CTRL, 0, abort ? CTRL_ABORT : CTRL_BYE));
    }
    ctx->closing = 1;
    if (ctx->n_sent)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d sent %llu messages, %llu "
                   "zero-copy from registered memory, %llu written in place "
                   "into the receiver's memory", ctx->p.rank,
                   (unsigned long long)ctx->n_sent,
                   (unsigned long long)ctx->n_zcopy,
                   (unsigned long long)ctx->n_placed);
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        while (q->up && !q->ended && q->sq_free < ctx->sq_depth &&
               rcoll_time_sec() < deadline)
            if (ib_poll(ctx) == 0)
                usleep(100);
    }
    /* A clean close also waits until the peers have taken every message
     * we sent them: every slot credited back (or its goodbye, or the
     * connection gone). A send completion only says that the data left
     * this process (siw: into its kernel TCP socket). Tearing the
     * connection down before the peer has it can lose our last messages
     * while they are still being retransmitted (a TCP connection closed
     * with unread data is reset), and the peer, still waiting for our
     * last chunk, fails with "closed without goodbye" (seen in
     * check-rdma's 25%-loss connection test, about 1 job in 20). A peer
     * hands credits back once its engine idles, within a second of taking
     * the data; the wait is bounded by min(RCOLL_TIMEOUT, 30 s). */
    double drain = rcoll_time_sec() + RCOLL_MIN(30.0, ctx->p.timeout);
    while (!abort && rcoll_time_sec() < drain) {
        int waiting = 0;
        for (int g = 0; g < ctx->nq && !waiting; g++) {
            ib_qp_t *q = ctx->qps[g];
            waiting = q->up && !q->ended && !q->bye && !q->ep->failed &&
                      q->sl.credits < q->sl.n;
        }
        if (!waiting)
            break;
        if (ib_poll(ctx) == 0)
            usleep(100);
    }
    ib_async_detach(ctx);
    if (ctx->cch && ctx->p.epfd >= 0)
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ctx->cch->fd, NULL);
    if (ctx->ech && ctx->p.epfd >= 0)
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ctx->ech->fd, NULL);
    if (ctx->ech) { /* below, queued events are drained without blocking */
        int fl = fcntl(ctx->ech->fd, F_GETFL);
        fcntl(ctx->ech->fd, F_SETFL, fl | O_NONBLOCK);
    }
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (q->id) {
            if (q->up)
                rdma_disconnect(q->id);
            if (q->qp)
                rdma_destroy_qp(q->id);
            /* events still queued for the id must be acked first */
            struct rdma_cm_event *ev;
            while (rdma_get_cm_event(ctx->ech, &ev) == 0)
                rdma_ack_cm_event(ev);
            rdma_destroy_id(q->id);
        } else if (q->qp) {
            ibv_destroy_qp(q->qp);
        }
        if (q->rx_mr)
            ibv_dereg_mr(q->rx_mr);
        if (q->tx_mr)
            ibv_dereg_mr(q->tx_mr);
        if (q->rbuf_mr)
            ibv_dereg_mr(q->rbuf_mr);
        free(q->rx);
        free(q->tx);
        free(q->rbuf);
        free(q->tx_cookie);
        for (int k = 0; q->tx_rent && k < ctx->p.nslots; k++)
            rcoll_rcache_put(ctx->rcache, q->tx_rent[k]);
        free(q->tx_rent);
        free(q->rx_flag);
    }
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++)
        if (ctx->eps[i]) {
            for (int k = 0; k < ctx->eps[i]->nplace; k++)
                rcoll_rcache_put(ctx->rcache, /* not unposted */
                                 ctx->eps[i]->place[k].rent);
            free(ctx->eps[i]->qps);
            free(ctx->eps[i]);
        }
    /* the core deregisters first; any left would keep the PD busy */
    while (ctx->nregs > 0)
        ib_mem_dereg(ctx, ctx->regs[ctx->nregs - 1]);
    if (ctx->rcache) {
        rcoll_rcache_stats_t rs;
        rcoll_rcache_stats(ctx->rcache, &rs);
        if (rs.hits + rs.misses)
            rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: registration cache: "
                       "%lu hits, %lu misses, %lu invalidated by the memory "
                       "monitor, %lu evicted, %zu bytes pinned at most%s",
                       ctx->p.rank, rs.hits, rs.misses, rs.invalidations,
                       rs.evictions, rs.pinned_peak,
                       rs.monitored ? "" : " (no monitor: nothing kept)");
        rcoll_rcache_destroy(ctx->rcache);
    }
    if (ctx->cq) /* its events were acked as they came */
        ibv_destroy_cq(ctx->cq);
    if (ctx->cch)
        ibv_destroy_comp_channel(ctx->cch);
    if (ctx->pd)
        ibv_dealloc_pd(ctx->pd);
    if (ctx->listen_id)
        rdma_destroy_id(ctx->listen_id);
    if (ctx->ech)
        rdma_destroy_event_channel(ctx->ech);
    free(ctx->regs);
    pthread_mutex_destroy(&ctx->reg_lock);
    free(ctx->qps);
    free(ctx->eps);
    free(ctx);
}

/* rcoll-info -t: every device, its ports, the IPv4 addresses rdma_cm maps
 * to it, and the GID the oob mode would pick. */
static void ib_describe(FILE *f)
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
                    link_layer_str(pa.link_layer, v), 128 << pa.active_mtu);
            struct rcoll_tl_ctx tmp;
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

static size_t ib_peer_bytes(size_t chunk, int nslots, char *what, size_t len)
{
    size_t stride = (IB_HDR + chunk + 63) & ~(size_t)63;
    size_t ring = (size_t)nslots * stride + IB_CTRL;
    int q = rcoll_config.ib_qps_per_peer;
    snprintf(what, len, "%d QP(s) x (receive ring + send staging) of %zu "
             "bytes, registered (locked) memory", q, ring);
    return (size_t)q * 2 * ring;
}

const rcoll_tl_ops_t rcoll_tl_ib_ops = {
    .name = "ib",
    .doc = "RDMA verbs RC queue pairs (iWARP/eRDMA, RoCE, InfiniBand; "
           "RCOLL_IB_*)",
    .usable = ib_usable,
    .local_only = 0,
    .ctx_create = ib_ctx_create,
    .send = ib_send,
    .recv_peek = ib_recv_peek,
    .recv_release = ib_recv_release,
    .recv_full = ib_recv_full,
    .recv_place = ib_recv_place,
    .recv_unplace = ib_recv_unplace,
    .send_revoke = ib_send_revoke,
    .progress = ib_progress,
    .idle = ib_idle,
    .ctx_destroy = ib_ctx_destroy,
    .mem_reg = ib_mem_reg,
    .mem_dereg = ib_mem_dereg,
    .describe = ib_describe,
    .peer_bytes = ib_peer_bytes,
};
