/** @file rcoll.h
 * The public C API of rcoll, a collective communication library.
 *
 * Conventions
 *  - Every function returns an rcoll_status_t: RCOLL_OK (0) on success,
 *    RCOLL_INPROGRESS (> 0) where documented, a negative error otherwise.
 *    On error, rcoll_last_error() returns a message (thread-local) naming the
 *    call, the rank, the peer involved and the cause.
 *  - The library never aborts or exits the process.
 *  - Buffers are host memory, or GPU memory in the blocking calls of a build
 *    with CUDA: then the call waits for the work queued on `stream`, stages
 *    the data through host memory and copies the result back before it
 *    returns (docs/gpu.md). sendbuf and recvbuf must be of one kind. For
 *    host buffers `stream` is ignored (pass NULL).
 *  - Collectives on one communicator must be called in the same order on
 *    every rank (as in MPI and NCCL). Operations of one communicator are
 *    executed in the order they were posted; a mismatch (different
 *    collective, datatype or count between ranks) is detected and reported
 *    as RCOLL_ERR_MISMATCH naming both ranks.
 *  - Thread safety: functions taking different communicators may be called
 *    concurrently from different threads. Calls on one communicator may come
 *    from several threads; they are serialized internally, and their order
 *    on every rank must still match. rcoll_get_unique_id, rcoll_status_string
 *    and rcoll_last_error are thread-safe.
 *  - Progress: each communicator owns one progress thread, so non-blocking
 *    operations advance while the caller computes; a caller blocked in
 *    rcoll_wait (or a blocking collective) drives the progress itself.
 *    Waiting polls for RCOLL_SPIN_US microseconds, yielding the CPU, then
 *    blocks in epoll(7).
 */
#ifndef RCOLL_H
#define RCOLL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the library's exported functions (only they are visible). */
#if defined(__GNUC__)
#define RCOLL_API __attribute__((visibility("default")))
#else
#define RCOLL_API
#endif

#define RCOLL_VERSION_MAJOR 0 /**< major version of this header */
#define RCOLL_VERSION_MINOR 1 /**< minor version of this header */
#define RCOLL_VERSION_PATCH 0 /**< patch level of this header */

/** A communicator: a group of ranks that run collectives together. */
typedef struct rcoll_comm *rcoll_comm_t;
/** A non-blocking operation in flight; completed and freed by rcoll_wait. */
typedef struct rcoll_request *rcoll_request_t;
/** Rendezvous handle: where rank 0's bootstrap listens plus a 128-bit secret.
 *  Made by rcoll_get_unique_id on one process and passed to all others
 *  (it is a plain byte blob: send it over MPI, a file, a key-value store). */
typedef struct {
    char internal[128]; /**< opaque bytes */
} rcoll_unique_id_t;
/** A cudaStream_t for GPU buffers; NULL for host buffers. */
typedef void *rcoll_stream_t;

/** Status codes. Errors are negative and grouped by what broke. */
typedef enum {
    RCOLL_OK                    = 0,   /**< success */
    RCOLL_INPROGRESS            = 1,   /**< operation not finished yet */
    /* the caller's arguments */
    RCOLL_ERR_INVALID_ARGUMENT  = -1,  /**< bad pointer, enum, rank or size */
    RCOLL_ERR_NOT_SUPPORTED     = -2,  /**< valid but not available in this build */
    RCOLL_ERR_TRUNCATED         = -3,  /**< a receive's buffer is smaller than
                                            the message it matched (that
                                            receive alone fails; the
                                            communicator goes on) */
    /* this process / the system */
    RCOLL_ERR_NO_MEMORY         = -10, /**< allocation failed */
    RCOLL_ERR_SYSTEM            = -11, /**< a system call failed */
    RCOLL_ERR_NO_DEVICE         = -12, /**< no usable network interface/device */
    /* other ranks */
    RCOLL_ERR_REMOTE            = -20, /**< a peer died, closed or aborted */
    RCOLL_ERR_MISMATCH          = -21, /**< ranks called different operations */
    RCOLL_ERR_AUTH              = -22, /**< a connection failed authentication */
    RCOLL_ERR_PROTOCOL          = -23, /**< malformed message from a peer */
    RCOLL_ERR_CORRUPT           = -24, /**< data failed its checksum (RCOLL_CHECKSUM=1) */
    /* time */
    RCOLL_ERR_TIMEOUT           = -30, /**< no progress within RCOLL_TIMEOUT */
    /* the communicator */
    RCOLL_ERR_ABORTED           = -40, /**< rcoll_comm_abort was called */
    RCOLL_ERR_INTERNAL          = -50  /**< a bug in rcoll: please report */
} rcoll_status_t;

/** Element types. float16 is IEEE binary16, bfloat16 is the top half of a
 *  float32. Both are reduced in float32 and rounded (to nearest even) once
 *  per reduction step. */
typedef enum {
    RCOLL_INT8, RCOLL_UINT8, RCOLL_INT32, RCOLL_UINT32, RCOLL_INT64,
    RCOLL_UINT64, RCOLL_FLOAT16, RCOLL_BFLOAT16, RCOLL_FLOAT32,
    RCOLL_FLOAT64,
    RCOLL_DATATYPE_COUNT /**< number of datatypes; not a datatype */
} rcoll_datatype_t;

/** Reduction operations. Integers wrap on overflow (two's complement).
 *  MIN/MAX propagate NaN. AVG is the SUM divided by the number of ranks:
 *  integers divide (truncating toward zero) after the wrapped sum; floating
 *  types divide in double precision and round once to the datatype. */
typedef enum {
    RCOLL_SUM, RCOLL_PROD, RCOLL_MIN, RCOLL_MAX, RCOLL_AVG,
    RCOLL_OP_COUNT /**< number of operations; not an operation */
} rcoll_op_t;

/** @name Communicators
 */
/** @{ */

/** Create a rendezvous handle. Starts a small bootstrap thread in this
 *  process that serves the rendezvous of exactly one communicator and then
 *  exits (or gives up after RCOLL_TIMEOUT). Call it on one process only and
 *  hand the id to all ranks, including this process if it is a rank.
 *  @param[out] id  filled on success.
 *  @return RCOLL_OK, RCOLL_ERR_INVALID_ARGUMENT (NULL), RCOLL_ERR_NO_DEVICE,
 *          RCOLL_ERR_SYSTEM. */
RCOLL_API rcoll_status_t rcoll_get_unique_id(rcoll_unique_id_t *id);

/** Create a communicator of `nranks` ranks; this process is `rank`.
 *  Blocks until all ranks have joined or RCOLL_TIMEOUT passed. Collective.
 *  @param[out] comm  the new communicator (set only on success).
 *  @param[in] nranks >= 1.
 *  @param[in] id     the same id on every rank.
 *  @param[in] rank   0 <= rank < nranks, distinct on every process.
 *  @return RCOLL_OK, RCOLL_ERR_INVALID_ARGUMENT, RCOLL_ERR_TIMEOUT (a rank did
 *          not join), RCOLL_ERR_AUTH (wrong secret), RCOLL_ERR_SYSTEM. */
RCOLL_API rcoll_status_t rcoll_comm_init_rank(rcoll_comm_t *comm, int nranks,
                                              const rcoll_unique_id_t *id,
                                              int rank);

/** Settings of one communicator (rcoll_comm_init_rank_config). Start from
 *  RCOLL_COMM_CONFIG_INIT: a field left as it sets takes the process's
 *  setting (the RCOLL_* variable), and fields past `size` are not read, so
 *  the struct can grow. */
typedef struct {
    size_t size;      /**< sizeof(rcoll_comm_config_t) */
    double timeout;   /**< seconds without progress before this
                           communicator's operations (and its creation)
                           fail with RCOLL_ERR_TIMEOUT; <= 0:
                           RCOLL_TIMEOUT */
} rcoll_comm_config_t;
/** Initializer of rcoll_comm_config_t: every setting the process's. */
#define RCOLL_COMM_CONFIG_INIT {sizeof(rcoll_comm_config_t), 0}

/** rcoll_comm_init_rank with settings of this communicator's own
 *  (`config` may be NULL: the process's). Thread-safe: unlike setting
 *  RCOLL_* variables with setenv, it races with no other thread. */
RCOLL_API rcoll_status_t rcoll_comm_init_rank_config(
        rcoll_comm_t *comm, int nranks, const rcoll_unique_id_t *id,
        int rank, const rcoll_comm_config_t *config);

/** Create a communicator from the launcher's environment. Reads, in order:
 *  RCOLL_RANK/RCOLL_SIZE/RCOLL_ROOT (rcoll-run, or by hand), torchrun
 *  (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: rank 0 listens on
 *  MASTER_PORT+1 unless RCOLL_ROOT is set), Open MPI
 *  (OMPI_COMM_WORLD_RANK/SIZE) and Slurm (SLURM_PROCID/NTASKS), whose
 *  rendezvous comes from RCOLL_ROOT or, when built with PMIx, from PMIx.
 *  @param[out] comm  the new communicator.
 *  @return as rcoll_comm_init_rank; RCOLL_ERR_INVALID_ARGUMENT when no
 *          launcher environment is found (the message says what is missing). */
RCOLL_API rcoll_status_t rcoll_comm_init_env(rcoll_comm_t *comm);

/** This process's rank in `comm`. */
RCOLL_API rcoll_status_t rcoll_comm_rank(rcoll_comm_t comm, int *rank);
/** The number of ranks in `comm`. */
RCOLL_API rcoll_status_t rcoll_comm_size(rcoll_comm_t comm, int *size);

/** Destroy a communicator: waits for its posted operations (bounded by
 *  RCOLL_TIMEOUT), says goodbye to the peers, frees everything. Local: does
 *  not wait for other ranks. Requests still held must not be used after it.
 *  Not thread-safe with other calls on the same communicator.
 *  @return RCOLL_OK, or the communicator's error if an operation failed. */
RCOLL_API rcoll_status_t rcoll_comm_destroy(rcoll_comm_t comm);

/** Abort a communicator: fails every pending operation with
 *  RCOLL_ERR_ABORTED, tells the peers (whose operations then fail with
 *  RCOLL_ERR_REMOTE naming this rank) and frees it. Never blocks for long.
 *  May be called from another thread while a call on `comm` blocks; that call
 *  returns RCOLL_ERR_ABORTED, and `comm` must not be used afterwards. */
RCOLL_API rcoll_status_t rcoll_comm_abort(rcoll_comm_t comm);

/** Register [buf, buf + len) with the communicator's network transports,
 *  as ncclCommRegister does: chunks sent from registered memory skip the
 *  staging copy (over RDMA the NIC reads them in place). Optional; costs
 *  locked memory (ulimit -l). The memory must stay allocated and mapped,
 *  and no operation may use it once it is deregistered. rcoll does not
 *  watch for freed memory: deregister before free. Not thread-safe with
 *  other calls on the same communicator.
 *  @param[in] comm     the communicator.
 *  @param[in] buf      start of the range.
 *  @param[in] len      its length in bytes.
 *  @param[out] handle  for rcoll_comm_deregister. */
RCOLL_API rcoll_status_t rcoll_comm_register(rcoll_comm_t comm, void *buf,
                                             size_t len, void **handle);

/** Undo rcoll_comm_register (also done by destroy for what is left). */
RCOLL_API rcoll_status_t rcoll_comm_deregister(rcoll_comm_t comm,
                                               void *handle);

/** The communicator's asynchronous error: RCOLL_OK while healthy, else the
 *  first error (a peer died, a timeout...), which every later operation also
 *  returns. Non-blocking; rcoll_last_error() then holds the message.
 *  @param[in] comm  the communicator.
 *  @param[out] err  the error. */
RCOLL_API rcoll_status_t rcoll_comm_get_async_error(rcoll_comm_t comm,
                                                    rcoll_status_t *err);

/** Prints to stderr the state of `comm` (NULL: of every communicator of
 *  this process): rank, transports with their lanes' counters (messages,
 *  bytes, sends that waited for credit) and the registration cache's,
 *  error, and each operation in flight with its sequence number,
 *  algorithm, step and chunk, and the peer and what it waits for, for how
 *  long. Safe to call from any thread at any time; `kill -USR1 PID` does
 *  the same (RCOLL_DUMP_SIGNAL), and `rcoll-info -p PID` prints it. */
RCOLL_API rcoll_status_t rcoll_comm_dump(rcoll_comm_t comm);

/** @} */

/** @name Collectives (blocking)
 *  Semantics as in NCCL/MPI. Each returns RCOLL_OK,
 *  RCOLL_ERR_INVALID_ARGUMENT (NULL comm, NULL buffer with count > 0,
 *  unknown datatype/op, root out of range, count * size overflow), or the
 *  communicator's error (RCOLL_ERR_REMOTE, _TIMEOUT, _MISMATCH, _ABORTED).
 *  count == 0 is legal and moves nothing: all but all-to-allv and the
 *  barrier then return at once, without waiting for any peer (as Open MPI
 *  and NCCL do); a non-blocking one is done at once.
 */
/** @{ */

/** recvbuf[i] = op over all ranks of sendbuf[i], on every rank.
 *  In place when sendbuf == recvbuf. */
RCOLL_API rcoll_status_t rcoll_allreduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** recvbuf[r * sendcount + i] = sendbuf of rank r [i]. In place when
 *  sendbuf == recvbuf + rank * sendcount * size(dt). */
RCOLL_API rcoll_status_t rcoll_allgather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** recvbuf = root's sendbuf on every rank. sendbuf is read on the root only
 *  (may be NULL elsewhere); in place when sendbuf == recvbuf. */
RCOLL_API rcoll_status_t rcoll_broadcast(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** recvbuf[i] = op over ranks of sendbuf[rank * recvcount + i]. In place when
 *  recvbuf == sendbuf + rank * recvcount * size(dt). */
RCOLL_API rcoll_status_t rcoll_reduce_scatter(const void *sendbuf,
        void *recvbuf, size_t recvcount, rcoll_datatype_t dt, rcoll_op_t op,
        rcoll_comm_t comm, rcoll_stream_t stream);

/** On root: recvbuf[i] = op over all ranks of sendbuf[i]. recvbuf is not
 *  touched (may be NULL) on other ranks. In place when sendbuf == recvbuf. */
RCOLL_API rcoll_status_t rcoll_reduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, int root,
        rcoll_comm_t comm, rcoll_stream_t stream);

/** Returns once every rank has entered the barrier. */
RCOLL_API rcoll_status_t rcoll_barrier(rcoll_comm_t comm);

/** Block r of sendbuf (`count` elements at sendbuf + r * count) goes to
 *  rank r, and block r of recvbuf comes from rank r (MPI_Alltoall,
 *  ncclAlltoAll). In place when sendbuf == recvbuf. */
RCOLL_API rcoll_status_t rcoll_alltoall(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** As rcoll_alltoall with a block size and place per rank, in elements:
 *  sendcounts[r] elements at sendbuf + sdispls[r] go to rank r, and
 *  recvcounts[r] elements from rank r land at recvbuf + rdispls[r]
 *  (MPI_Alltoallv). Blocks may be in any order, with gaps, and empty;
 *  recvcounts[r] on rank p must equal sendcounts[p] on rank r. The arrays
 *  are copied: they may be reused once the call returns. In place when
 *  sendbuf == recvbuf (the input is copied aside first). */
RCOLL_API rcoll_status_t rcoll_alltoallv(const void *sendbuf,
        const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
        const size_t *recvcounts, const size_t *rdispls, rcoll_datatype_t dt,
        rcoll_comm_t comm, rcoll_stream_t stream);

/** On root: recvbuf[r * sendcount + i] = sendbuf of rank r [i]; recvbuf is
 *  not touched (may be NULL) elsewhere. In place on the root when sendbuf
 *  == recvbuf + root * sendcount * size(dt). */
RCOLL_API rcoll_status_t rcoll_gather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** recvbuf[i] = root's sendbuf[rank * recvcount + i]; sendbuf is read on
 *  the root only (may be NULL elsewhere). In place on the root when
 *  recvbuf == sendbuf + root * recvcount * size(dt). */
RCOLL_API rcoll_status_t rcoll_scatter(const void *sendbuf, void *recvbuf,
        size_t recvcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** Send `count` elements to `peer` with tag 0 (rcoll_send_tag). */
RCOLL_API rcoll_status_t rcoll_send(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** Receive `count` elements from `peer` with tag 0 (rcoll_recv_tag). */
RCOLL_API rcoll_status_t rcoll_recv(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** Send `count` elements to `peer` with `tag` (>= 0; negative is an
 *  argument error). Matched by the receive of `peer` from this rank with
 *  the same tag that was posted first; messages of one sender and tag are
 *  received in the order they were sent (MPI's non-overtaking rule). Like
 *  MPI's standard send: up to RCOLL_P2P_EAGER bytes it may complete before
 *  the receive is posted; larger messages are announced and move once it
 *  is (rendezvous), so two ranks that each send a large message to the
 *  other with blocking calls deadlock (until RCOLL_TIMEOUT) - use the
 *  non-blocking forms or a group. Non-blocking sends and receives always
 *  progress together and with other operations in flight: any set of them
 *  posted in any order completes once every one is posted. */
RCOLL_API rcoll_status_t rcoll_send_tag(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** Receive up to `count` elements from `peer` with `tag` (>= 0). The
 *  message may be shorter than `count` (rcoll_wait_status tells how many
 *  elements arrived; the rest of `buf` is untouched). A longer one is
 *  consumed and dropped, and this receive alone fails with
 *  RCOLL_ERR_TRUNCATED naming the peer, the tag and both sizes; the
 *  sender's side completes and the communicator goes on (MPI's
 *  MPI_ERR_TRUNCATE). The datatype must be the send's (else
 *  RCOLL_ERR_MISMATCH, which fails the communicator). */
RCOLL_API rcoll_status_t rcoll_recv_tag(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream);

/** @} */

/** @name Groups (NCCL's semantics)
 *  Per thread; they nest, and only the outermost rcoll_group_end acts.
 *  Operations called in between - blocking ones too - are only checked and
 *  recorded; rcoll_group_end posts them all in call order, so they progress
 *  together, and returns once the blocking ones have finished (their first
 *  error, if any). So blocking sends and receives round a ring inside a
 *  group are correct. A request of a non-blocking call in a group cannot be
 *  waited for before the group ends. Collectives inside a group must still
 *  be called in the same order on every rank. GPU buffers are not supported
 *  inside a group in this release.
 */
/** @{ */

/** Open a group (see above): operations until the matching
 *  rcoll_group_end are recorded and posted together. */
RCOLL_API rcoll_status_t rcoll_group_start(void);
/** @return RCOLL_OK, RCOLL_ERR_INVALID_ARGUMENT without an open group, or
 *          the first error of the group's operations. */
RCOLL_API rcoll_status_t rcoll_group_end(void);

/** @} */

/** @name Non-blocking forms
 *  The same arguments plus `req` last.
 *  They return RCOLL_OK once the operation is posted (buffers must stay
 *  valid and unmodified until it completes), or an error without setting
 *  *req.
 */
/** @{ */

/** Non-blocking rcoll_allreduce: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_iallreduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_allgather: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_iallgather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_broadcast: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_ibroadcast(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_reduce_scatter: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_ireduce_scatter(const void *sendbuf,
        void *recvbuf, size_t recvcount, rcoll_datatype_t dt, rcoll_op_t op,
        rcoll_comm_t comm, rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_reduce: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_ireduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, int root,
        rcoll_comm_t comm, rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_barrier: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_ibarrier(rcoll_comm_t comm,
        rcoll_request_t *req);
/** Non-blocking rcoll_send: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_isend(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_recv: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_irecv(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_send_tag: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_isend_tag(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_recv_tag: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_irecv_tag(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_alltoall: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_ialltoall(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_alltoallv: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_ialltoallv(const void *sendbuf,
        const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
        const size_t *recvcounts, const size_t *rdispls, rcoll_datatype_t dt,
        rcoll_comm_t comm, rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_gather: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_igather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);
/** Non-blocking rcoll_scatter: posts it and sets *req (complete it with
 *  rcoll_wait, rcoll_test or their _status forms). */
RCOLL_API rcoll_status_t rcoll_iscatter(const void *sendbuf, void *recvbuf,
        size_t recvcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req);

/** Non-blocking check. Sets *done to 1 once the operation has finished
 *  (successfully or not) and returns its status; *done = 0 and RCOLL_OK while
 *  it runs. Never frees the request: call rcoll_wait to free it.
 *  Thread-safe. */
RCOLL_API rcoll_status_t rcoll_test(rcoll_request_t req, int *done);

/** Block until the operation finishes (bounded by RCOLL_TIMEOUT of no
 *  progress), free the request and return the operation's status. Once it
 *  returns (with any status), the operation's buffers are the caller's:
 *  no transport reads or writes them any more, and no peer completes a
 *  receive with bytes written to them afterwards (docs/reliability.md). */
RCOLL_API rcoll_status_t rcoll_wait(rcoll_request_t req);

/** What a finished operation did (rcoll_wait_status, rcoll_test_status).
 *  Set `size` to sizeof(rcoll_req_status_t) before the call
 *  (RCOLL_REQ_STATUS_INIT does): fields past it are not written, so the
 *  struct can grow. */
typedef struct {
    size_t size;           /**< in: sizeof(rcoll_req_status_t) */
    rcoll_status_t error;  /**< out: the operation's status */
    size_t count;          /**< out: a receive: the elements of the message
                                it matched (on RCOLL_ERR_TRUNCATED: the
                                message's count, more than the buffer
                                holds); otherwise the count of the call */
    int source;            /**< out: a receive: the sending rank; else -1 */
    int tag;               /**< out: a receive: the message's tag; else -1 */
} rcoll_req_status_t;
/** Initializer of rcoll_req_status_t (sets `size`). */
#define RCOLL_REQ_STATUS_INIT {sizeof(rcoll_req_status_t), RCOLL_OK, 0, -1, -1}

/** rcoll_wait that also fills *status (may be NULL). */
RCOLL_API rcoll_status_t rcoll_wait_status(rcoll_request_t req,
                                           rcoll_req_status_t *status);

/** rcoll_test that also fills *status (may be NULL) once *done is 1. */
RCOLL_API rcoll_status_t rcoll_test_status(rcoll_request_t req, int *done,
                                           rcoll_req_status_t *status);

/** @} */

/** @name Errors and sizes
 */
/** @{ */

/** A constant string for a status ("invalid argument", ...). */
RCOLL_API const char *rcoll_status_string(rcoll_status_t status);

/** The message of the last error returned to this thread: names the call,
 *  the rank, the peer and the cause. Thread-local; "" if none. */
RCOLL_API const char *rcoll_last_error(void);

/** Size in bytes of one element of `dt`, 0 for an invalid datatype. */
RCOLL_API size_t rcoll_datatype_size(rcoll_datatype_t dt);

/** The version string, e.g. "0.1.0". */
RCOLL_API const char *rcoll_version(void);

/** @} */

#ifdef __cplusplus
}
#endif
#endif /* RCOLL_H */
