/* Communicators, requests and the progress engine. */
#ifndef RCOLL_CORE_H
#define RCOLL_CORE_H

#include "coll/sched.h"
#include <pthread.h>

#define RCOLL_MAX_TLS 8

struct rcoll_request {
    struct rcoll_comm *comm;
    coll_sched_t sched;
    rcoll_status_t status;
    int done;
    int started;
    int grouped;                  /* posted in a group not ended yet */
    int refs;                     /* atomic: the caller's */
    int released;                 /* the transports let go of its buffers
                                     (req_release_tl) */
    double last_progress;
    struct rcoll_request *next, *prev; /* in the communicator's queue */
    struct rcoll_request *group_next;  /* in the thread's open group */
    int group_wait;               /* a blocking call in the group */
    /* last: post_req zeroes the fields above and only the first byte of
     * this, which is read only once written */
    char errmsg[1024];
};

struct rcoll_comm {
    int rank;
    int nranks;
    rcoll_bootstrap_t bs;
    /* the transports this communicator opened, in preference order */
    int ntls;
    const rcoll_tl_ops_t *tls[RCOLL_MAX_TLS];
    rcoll_tl_ctx_t *tl_ctxs[RCOLL_MAX_TLS];
    int wait_tl;                  /* index of a transport with wait(), -1 */
    unsigned spin_turns;          /* engine turns while polling */
    int spin_budget;              /* pause loops of an inline call before
                                     it turns the engine (comm.c) */
    double yield_s;               /* how long the engine's last yield
                                     took; < 0: it did not yield */
    const rcoll_tl_ops_t **peer_tl; /* by peer: its transport */
    rcoll_tl_ep_t **eps;          /* by peer: its endpoint */
    rcoll_tl_events_t tl_events;
    coll_env_t env;
    int *ring;                    /* ring order: position -> rank */
    int *ring_pos;                /* rank -> position */
    int *chan_rings;              /* channels 1..: ring and positions each
                                     (env.chan_ring, env.chan_pos) */
    coll_tune_cache_t tune_cache[COLL_TUNE_CACHE_N];
    int epfd;
    int evfd;
    rcoll_ev_handler_t ev_wakeup;

    pthread_t thread;
    int thread_started;
    pthread_mutex_t engine;       /* held by whoever drives the transport
                                     and the head request (progress thread
                                     or a caller in rcoll_wait) */
    int waiters;                  /* callers in rcoll_wait (under lock) */
    int in_epoll;                 /* progress thread may block in epoll */
    pthread_cond_t idle_cond;     /* the progress thread waits here while
                                     callers drive */
    pthread_mutex_t lock;         /* guards everything below */
    struct rcoll_request *qhead, *qtail; /* posted and not finished, in
                                     posting order; all of them progress */
    uint64_t coll_seq;            /* collectives posted */
    uint64_t *p2p_tx;             /* by peer: sends posted to it */
    struct coll_match *match;     /* messages set aside (engine) */
    double last_progress;         /* when an operation last moved */
    unsigned long unblocks;       /* stalls that set messages aside
                                     (coll_match_unblock; dumps) */
    double unblock_at;            /* last_progress at the last one */
    coll_sched_t *inline_s;       /* a blocking call running through the
                                     shared area in its caller's thread,
                                     without a request (engine) */
    struct rcoll_request **snap;  /* the engine's view of the queue for
                                     one turn (engine) */
    int snap_cap;
    double timeout;               /* RCOLL_TIMEOUT, or the creator's own
                                     (rcoll_comm_init_rank_config) */
    int refs;                     /* atomic: user handle + live requests
                                     + API calls in progress */
    int stop;
    int closed;                   /* destroy/abort ran: no new posts
                                     (set under lock, read atomically by
                                     live_lookup) */
    rcoll_status_t error;         /* sticky: the first failure */
    char errmsg[1024];
    int announced;                /* the transports told the peers why
                                     (fail_notify; engine) */
    struct rcoll_mem_reg *regs;   /* rcoll_comm_register, not yet undone */
    struct rcoll_comm *next_live; /* the process's live communicators */
    double created;
    struct rcoll_diag *diag;      /* timeout diagnosis (core/diag.c) */
    int diag_walking;             /* a diagnosis is under way (engine) */
};

/* A user registration: one transport handle per open transport. */
struct rcoll_mem_reg {
    struct rcoll_mem_reg *next;
    void *buf;
    size_t len;
    void *tl[RCOLL_MAX_TLS];
};

/* Posts a built-but-not-started request; takes ownership of req. */
/* will_wait: the caller calls rcoll_wait at once (it drives the engine,
 * so the progress thread is not woken). */
rcoll_status_t rcoll__comm_post(struct rcoll_comm *comm,
                                struct rcoll_request *req, int will_wait);
void rcoll__comm_release(struct rcoll_comm *comm);
/* Drops a reference to a request (the caller's, or the engine's hold);
 * the last one frees it. */
void rcoll__req_put(struct rcoll_request *r);
/* The operation a diagnosis reports: the first running one that waits for
 * a peer, else the first running one, else NULL (c->lock held). */
struct rcoll_request *rcoll__comm_stalled_req(struct rcoll_comm *c);
/* A blocking collective through the shared area, run in the calling
 * thread when nothing else is in flight (no request, no hand-off).
 * RCOLL_INPROGRESS: it does not apply now (nothing was done: post it);
 * otherwise its result. s holds the call (kind, buffers, count, dt, op,
 * root), with seq, nsteps, the step and chunk cursors, area, nchan and
 * waiting_for zero and waiting_peer -1; nothing else is read. */
rcoll_status_t rcoll__comm_run_inline(struct rcoll_comm *c, coll_sched_t *s);
/* What a collective with nothing to move returns (count 0 of one whose
 * count every rank passes alike): RCOLL_OK, or the error of a communicator
 * that failed or was destroyed, as any call on it would. */
rcoll_status_t rcoll__comm_noop(struct rcoll_comm *c, coll_kind_t kind);
/* 1 if c is a communicator of this process not yet freed (API calls check
 * it, so a destroyed or aborted handle is an argument error, not a crash;
 * an address reused by a newer communicator cannot be told apart) */
int rcoll__comm_live(const struct rcoll_comm *c);
/* 1 and a reference taken if c is a live communicator not being destroyed
 * or aborted; every API call that takes a comm holds one for its whole
 * length (rcoll__comm_release), so a rcoll_comm_abort from another thread
 * cannot free the communicator under it. */
int rcoll__comm_get(struct rcoll_comm *c);
/* A reference more on a communicator the caller already holds one of. */
void rcoll__comm_ref(struct rcoll_comm *c);

/* ---- live.c: the process's communicators ---- */
/* A zeroed communicator (a parked one's memory, or new); NULL: no memory */
struct rcoll_comm *rcoll__live_alloc(void);
void rcoll__live_add(struct rcoll_comm *c);
/* Frees what c holds and parks its memory (the last reference went) */
void rcoll__comm_free(struct rcoll_comm *c);
/* Calls fn on every live communicator (under the list's lock); returns
 * how many. */
int rcoll__live_foreach(void (*fn)(struct rcoll_comm *c, void *arg),
                        void *arg);

/* ---- dump.c ---- */
/* Installs the dump signal's handler once per process (RCOLL_DUMP_SIGNAL) */
void rcoll__dump_signal_init(void);

/* ---- engine.c ---- */
/* an inline call's spin budget (inline.c: spin_adapt) */
#define RCOLL_SPIN_MAX 2048
#define RCOLL_SPIN_MIN 16
#define RCOLL_SPIN_BUSY_S 2e-6
/* Records the communicator's first error (c->lock held). */
void rcoll__comm_set_error_locked(struct rcoll_comm *c, rcoll_status_t st,
                                  const char *msg);
/* One turn of the engine (the caller holds c->engine): runs every
 * request's schedule, then waits for I/O up to idle_ms with nothing
 * queued, never longer than max_ms. 1 if the communicator is stopping and
 * has nothing left to do. */
int rcoll__engine_turn(struct rcoll_comm *c, double *spin_until, int idle_ms,
                       int max_ms);
void *rcoll__progress_thread(void *arg);
/* Makes the progress thread leave epoll_wait (or a transport's wait) */
void rcoll__comm_kick(struct rcoll_comm *c);
/* Makes the progress thread look at the queue, wherever it waits */
void rcoll__comm_wake(struct rcoll_comm *c);
/* Completes every queued request with st and msg (msg NULL: with the
 * communicator's error); the engine's holder, without c->lock */
void rcoll__comm_fail_all(struct rcoll_comm *c, rcoll_status_t st,
                          const char *msg);
/* The epoll handler of the wake-up eventfd */
void rcoll__engine_wakeup(rcoll_ev_handler_t *h, uint32_t events);
/* Fills c->tl_events: the transports' calls back into the engine */
void rcoll__engine_tl_events(struct rcoll_comm *c);

/* ---- setup.c ---- */
/* The transports RCOLL_TRANSPORTS allows and that can run here (a mask) */
uint32_t rcoll__usable_transports(void);
rcoll_status_t rcoll__config_agree(struct rcoll_comm *c);
rcoll_status_t rcoll__open_transports(struct rcoll_comm *c,
                                      const uint8_t secret[16]);
rcoll_status_t rcoll__placement_init(struct rcoll_comm *c);
/* What the pairs of ranks need, from each rank's host and transport mask
 * (bit t: rcoll_transports[t]), in O(n log n): a pair's transport is the
 * first both offer that reaches (shared memory only on one host). */
typedef struct {
    int local_size;   /* the most ranks on one host */
    uint32_t used;    /* bit t: some pair uses transport t */
    int local_net;    /* some pair on one host uses a network transport */
    int most_shm;     /* the most shared-memory peers of one rank */
    int bad_a, bad_b; /* a pair no transport connects (bad_a < bad_b, the
                         same on every rank), or -1 */
} rcoll_pairs_t;
int rcoll__pair_tl_masks(uint32_t a, uint32_t b, int same_host);
int rcoll__pairs_summary(int n, const uint64_t *host, const uint32_t *mask,
                         rcoll_pairs_t *out);
void rcoll__close_transports(struct rcoll_comm *c, int abort,
                             const char *reason);
void rcoll__mem_reg_free(struct rcoll_comm *c, struct rcoll_mem_reg *m);
/* RCOLL_TOPO_DUMP_FILE: written once per process */
void rcoll__topo_dump_once(void);

/* Timeout diagnosis (core/diag.c): the question a timed-out rank sends
 * to the rank it waits for, and the answer, over the bootstrap listener. */
enum { RCOLL_DIAG_QUERY = 1, RCOLL_DIAG_ANSWER = 2 };
enum { /* an answer's state */
    RCOLL_DIAG_WAITING = 1, /* in an operation, waiting for `peer` */
    RCOLL_DIAG_IDLE,        /* no operation in progress; seq = posted */
    RCOLL_DIAG_FAILED,      /* failed already: text; peer = its root cause */
    RCOLL_DIAG_BUSY         /* in an operation, waiting for no peer */
};
typedef struct {
    uint32_t magic;
    uint32_t type;
    int32_t from, to;
    uint64_t nonce;        /* the question's; echoed by the answer */
    uint32_t state;
    int32_t peer;
    uint64_t seq;
    uint32_t stalled_ms;   /* WAITING/BUSY: time since its last progress */
    uint32_t pad;
    char what[64];         /* WAITING/BUSY: "allreduce #12 step 3" */
    char text[384];        /* FAILED: its error message */
    uint64_t mac;          /* SipHash(secret) of everything before */
} rcoll_diag_msg_t;
#define RCOLL_DIAG_MAGIC 0x52434451u /* "RCDQ" */
uint64_t rcoll__diag_mac(const uint8_t secret[16], const rcoll_diag_msg_t *m);
/* 0 if buf is a well-formed message of this job (MAC checked) to rank me
 * of nranks; fills *out with its strings NUL-terminated. */
int rcoll__diag_msg_check(const void *buf, size_t len,
                          const uint8_t secret[16], int nranks, int me,
                          rcoll_diag_msg_t *out);
/* After the bootstrap: serves questions on the bootstrap listener. */
rcoll_status_t rcoll__diag_init(struct rcoll_comm *c);
void rcoll__diag_fini(struct rcoll_comm *c);
/* Called (engine held) while an operation waiting for `waiting_peer` is
 * past RCOLL_TIMEOUT: starts or continues the walk; 0 while it goes on,
 * 1 when done, with the root cause (or "") in `cause`. */
int rcoll__diag_walk(struct rcoll_comm *c, int waiting_peer, char *cause,
                     size_t len);
/* The operation moved again: forget the walk. */
void rcoll__diag_cancel(struct rcoll_comm *c);

/* Init helpers (core/launch.c). */
rcoll_status_t rcoll__root_listen(const rcoll_sockaddr_t *want,
                                  const uint8_t secret[16]);

#endif
