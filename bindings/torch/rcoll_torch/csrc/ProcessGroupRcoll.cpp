/* See ProcessGroupRcoll.hpp for the design. */
#include "ProcessGroupRcoll.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/extension.h>
#include <pybind11/chrono.h>

namespace rcoll_torch {

namespace {

/* a failure of rcoll itself: DistBackendError in Python */
[[noreturn]] void throw_backend(const std::string &msg)
{
    C10_THROW_ERROR(DistBackendError, msg);
}

void check_cpu(const at::Tensor &t, const char *call)
{
    TORCH_CHECK(t.device().is_cpu(), "rcoll ", call,
                ": tensors on ", t.device().str(),
                " are not supported: this rcoll moves host memory only "
                "(use \"cpu:rcoll,cuda:nccl\" for GPU tensors)");
    TORCH_CHECK(t.layout() == at::kStrided, "rcoll ", call,
                ": only dense (strided) tensors are supported");
}

void check_same(const at::Tensor &a, const at::Tensor &b, const char *call,
                const char *what)
{
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), "rcoll ", call, ": ",
                what, " dtype ", b.scalar_type(), " differs from ",
                a.scalar_type());
}

/* A contiguous view of `t`, or a contiguous copy; `back` copies the
 * copy's contents back into `t` (no-op when `t` was contiguous). */
struct Dense {
    at::Tensor user, buf;
    explicit Dense(const at::Tensor &t)
        : user(t), buf(t.is_contiguous() ? t : t.contiguous()) {}
    void back() {
        if (!buf.is_same(user))
            user.copy_(buf);
    }
    void *ptr() const { return buf.numel() ? buf.data_ptr() : nullptr; }
};

/* The rcoll datatype, op and element count to reduce `t` (contiguous) with
 * `rop`; `t` may be replaced by a real view (complex). Throws for what rcoll
 * cannot reduce. */
struct Reduction {
    at::Tensor t;
    rcoll_datatype_t dt;
    rcoll_op_t op;
    size_t count() const { return (size_t)t.numel(); }
    void *ptr() const { return t.numel() ? t.data_ptr() : nullptr; }
};

/* rcoll's datatype and op for reducing a tensor of type `st` (the real
 * type of a complex one) with `rop`. Throws for what rcoll cannot reduce. */
void reduce_types(at::ScalarType st, const c10d::ReduceOp &rop,
                  const char *call, rcoll_datatype_t *dt, rcoll_op_t *op)
{
    using R = c10d::ReduceOp;
    const bool is_bool = st == at::kBool;
    if (at::isComplexType(st)) {
        TORCH_CHECK(rop.op_ == R::SUM || rop.op_ == R::AVG, "rcoll ", call,
                    ": complex tensors reduce with SUM or AVG only");
        st = c10::toRealValueType(st);
    }
    switch (st) {
    case at::kFloat: *dt = RCOLL_FLOAT32; break;
    case at::kDouble: *dt = RCOLL_FLOAT64; break;
    case at::kHalf: *dt = RCOLL_FLOAT16; break;
    case at::kBFloat16: *dt = RCOLL_BFLOAT16; break;
    case at::kChar: *dt = RCOLL_INT8; break;
    case at::kByte: *dt = RCOLL_UINT8; break;
    case at::kBool: *dt = RCOLL_UINT8; break;
    case at::kInt: *dt = RCOLL_INT32; break;
    case at::kLong: *dt = RCOLL_INT64; break;
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 3
    case at::kUInt32: *dt = RCOLL_UINT32; break;
    case at::kUInt64: *dt = RCOLL_UINT64; break;
#endif
    default:
        TORCH_CHECK(false, "rcoll ", call, ": dtype ", st,
                    " cannot be reduced (rcoll reduces int8, uint8, int32, "
                    "uint32, int64, uint64, float16, bfloat16, float32, "
                    "float64, bool and complex)");
    }
    switch (rop.op_) {
    case R::SUM: *op = is_bool ? RCOLL_MAX : RCOLL_SUM; break; /* or */
    case R::PRODUCT: *op = is_bool ? RCOLL_MIN : RCOLL_PROD; break; /* and */
    case R::MIN: *op = RCOLL_MIN; break;
    case R::MAX: *op = RCOLL_MAX; break;
    case R::AVG:
        TORCH_CHECK(!is_bool, "rcoll ", call, ": AVG of bool tensors");
        *op = RCOLL_AVG;
        break;
    case R::BAND:
        TORCH_CHECK(is_bool, "rcoll ", call,
                    ": BAND is supported for bool tensors only");
        *op = RCOLL_MIN;
        break;
    case R::BOR:
        TORCH_CHECK(is_bool, "rcoll ", call,
                    ": BOR is supported for bool tensors only");
        *op = RCOLL_MAX;
        break;
    case R::PREMUL_SUM:
        TORCH_CHECK(false, "rcoll ", call,
                    ": PREMUL_SUM is not supported; scale the tensor and "
                    "use SUM");
    default:
        TORCH_CHECK(false, "rcoll ", call, ": reduce op ",
                    static_cast<int>(rop.op_), " is not supported (SUM, AVG, "
                    "PRODUCT, MIN, MAX; BAND/BOR on bool)");
    }
}

Reduction reduction(const at::Tensor &contig, const c10d::ReduceOp &rop,
                    const char *call)
{
    Reduction r{contig, RCOLL_FLOAT32, RCOLL_SUM};
    reduce_types(contig.scalar_type(), rop, call, &r.dt, &r.op);
    if (contig.is_complex())
        r.t = at::view_as_real(contig);
    return r;
}

/* everything a reduction will need, checked when the call is made */
void check_reducible(const at::Tensor &t, const c10d::ReduceOp &rop,
                     const char *call)
{
    rcoll_datatype_t dt;
    rcoll_op_t op;
    reduce_types(t.scalar_type(), rop, call, &dt, &op);
}

} // namespace

/* ------------------------------------------------------------------ */

RcollWork::RcollWork(int rank, c10d::OpType type, const char *title_,
                     std::vector<at::Tensor> outputs, std::function<void()> fn,
                     std::chrono::milliseconds timeout_)
    : c10d::Work(rank, type, title_), title(title_), run(std::move(fn)),
      timeout(timeout_), outputs_(std::move(outputs))
{
}

/* The future is made when asked for: most works are only waited on, and
 * making, completing and freeing one per call cost more than the rest of
 * the backend's own part of a small call. */
void RcollWork::settle(const c10::intrusive_ptr<c10::ivalue::Future> &f,
                       std::exception_ptr err)
{
    if (err)
        f->setError(err);
    else
        f->markCompleted(c10::IValue(outputs_));
}

c10::intrusive_ptr<c10::ivalue::Future> RcollWork::getFuture()
{
    /* a future's callbacks (DDP's hooks) need the work run, not left to
     * a wait() that may never come */
    ProcessGroupRcoll *g = pg.load();
    if (g && !c10d::Work::isCompleted())
        g->want(this);
    static const c10::TypePtr type =
        c10::ListType::create(c10::TensorType::get());
    c10::intrusive_ptr<c10::ivalue::Future> f;
    bool settle_now = false;
    {
        std::lock_guard<std::mutex> lk(fut_mu_);
        if (!future_) {
            future_ = c10::make_intrusive<c10::ivalue::Future>(type);
            settle_now = done_; /* complete() has run: it saw no future */
        }
        f = future_;
    }
    if (settle_now)
        settle(f, err_);
    return f;
}

bool RcollWork::isCompleted()
{
    bool done = c10d::Work::isCompleted();
    ProcessGroupRcoll *g = pg.load();
    if (!done && g)
        g->want(this); /* polled: someone waits for it */
    return done;
}

bool RcollWork::wait(std::chrono::milliseconds t)
{
    ProcessGroupRcoll *g = pg.load();
    if (g && !c10d::Work::isCompleted()) {
        if (t == ::kNoTimeout)
            g->drive(this); /* runs the queue up to it here */
        else
            g->want(this); /* the worker runs it; we wait at most t */
    }
    /* with a timeout: returns, or throws once t has passed (c10d's own
     * wait); the operation goes on and fails or completes later */
    return c10d::Work::wait(t);
}

std::vector<at::Tensor> RcollWork::result()
{
    return outputs_;
}

std::chrono::milliseconds RcollWork::getTimeout() const
{
    return timeout;
}

void RcollWork::complete(std::exception_ptr err)
{
    run = nullptr; /* drops the tensors the closure held */
    c10::intrusive_ptr<c10::ivalue::Future> f;
    {
        std::lock_guard<std::mutex> lk(fut_mu_);
        done_ = true;
        err_ = err;
        f = future_;
    }
    finish(err);
    if (f) /* else getFuture() settles the one it makes */
        settle(f, err);
}

/* ------------------------------------------------------------------ */

ProcessGroupRcoll::ProcessGroupRcoll(
    const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
    std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout)
{
    /* rcoll's own no-progress bound must not be shorter than the group's:
     * unless the user set RCOLL_TIMEOUT, the group's timeout becomes this
     * communicator's (a setting of its own: no setenv, which would race
     * with getenv in other threads) */
    rcoll_comm_config_t cfg = RCOLL_COMM_CONFIG_INIT;
    if (!getenv("RCOLL_TIMEOUT"))
        cfg.timeout = timeout.count() / 1000.0;

    if (const char *d = getenv("RCOLL_TORCH_DEFER_US")) {
        char *end;
        long v = strtol(d, &end, 10);
        TORCH_CHECK(*d && !*end && v >= 0 && v <= 10000000,
                    "rcoll: RCOLL_TORCH_DEFER_US=\"", d, "\" is not a number "
                    "of microseconds from 0 to 10000000");
        defer_ = std::chrono::microseconds(v);
    }

    rcoll_unique_id_t id;
    const std::string key = "rcoll/unique_id";
    if (rank == 0) {
        rcoll_status_t st = rcoll_get_unique_id(&id);
        if (st != RCOLL_OK)
            throw_backend(std::string("rcoll: rcoll_get_unique_id failed: ") +
                          rcoll_last_error());
        std::vector<uint8_t> v((uint8_t *)&id, (uint8_t *)&id + sizeof(id));
        store->set(key, v);
    } else {
        std::vector<uint8_t> v = store->get(key);
        TORCH_CHECK(v.size() == sizeof(id), "rcoll: the store's ", key,
                    " has ", v.size(), " bytes, expected ", sizeof(id),
                    " (another rcoll version on rank 0?)");
        memcpy(&id, v.data(), sizeof(id));
    }
    rcoll_status_t st = rcoll_comm_init_rank_config(&comm_, size, &id, rank,
                                                    &cfg);
    if (st != RCOLL_OK)
        throw_backend(std::string("rcoll: rcoll_comm_init_rank (rank ") +
                      std::to_string(rank) + " of " + std::to_string(size) +
                      ") failed: " + rcoll_last_error());
    worker_ = std::thread(&ProcessGroupRcoll::worker_loop, this);
    watchdog_ = std::thread(&ProcessGroupRcoll::watchdog_loop, this);
    p2p_ = std::thread(&ProcessGroupRcoll::p2p_loop, this);
    /* named for top -H, perf and gdb */
    pthread_setname_np(worker_.native_handle(), "rcoll-worker");
    pthread_setname_np(watchdog_.native_handle(), "rcoll-watchdog");
    pthread_setname_np(p2p_.native_handle(), "rcoll-p2p");
}

ProcessGroupRcoll::~ProcessGroupRcoll()
{
    stop(false);
}

/* Aborts the communicator (mu_ held): what runs fails at once, what is
 * queued fails when its turn comes, with `reason`. */
void ProcessGroupRcoll::abort_locked(const std::string &reason)
{
    if (aborted_ || !comm_)
        return;
    aborted_ = true;
    if (abort_reason_.empty())
        abort_reason_ = reason;
    rcoll_comm_abort(comm_);
}

/* Operations not finished: queued or running collectives, and point to
 * point requests posted and not completed. */
size_t ProcessGroupRcoll::pending()
{
    size_t n;
    {
        std::unique_lock<std::mutex> lk(mu_);
        n = queue_.size() + (running_ ? 1 : 0);
    }
    std::unique_lock<std::mutex> lk(p2p_mu_);
    return n + p2p_q_.size() + (p2p_busy_ ? 1 : 0);
}

/* Shutdown (destroy_process_group, or the destructor) and abort. A
 * shutdown lets what is pending finish for up to kShutdownGrace (peers
 * that call the same operations finish them), then aborts the
 * communicator, so that it returns in about that time whatever the peers
 * do: pending work then fails naming the shutdown, as with gloo or NCCL's
 * abort. An abort does that at once. */
void ProcessGroupRcoll::stop(bool abort)
{
    {
        std::unique_lock<std::mutex> lk(mu_);
        if (abort)
            abort_locked("rcoll: the process group was aborted");
        stopping_ = true;
    }
    cv_.notify_all();
    run_cv_.notify_all();
    wd_cv_.notify_all();
    if (!abort) {
        const auto end = std::chrono::steady_clock::now() + kShutdownGrace;
        size_t left;
        while ((left = pending()) > 0 &&
               std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (left > 0) {
            std::unique_lock<std::mutex> lk(mu_);
            abort_locked("rcoll: the process group was shut down "
                         "(destroy_process_group) with " +
                         std::to_string(left) + " operation(s) not finished "
                         "after " +
                         std::to_string(kShutdownGrace.count()) +
                         " ms; they were aborted");
        }
    }
    if (worker_.joinable())
        worker_.join();
    /* nothing is in flight now: a watchdog asleep until the deadline of
     * what was leaves at once */
    wd_cv_.notify_all();
    if (watchdog_.joinable())
        watchdog_.join();
    {
        /* the point-to-point requests end too (an abort fails them) */
        std::unique_lock<std::mutex> lk(p2p_mu_);
        p2p_stop_ = true;
    }
    p2p_cv_.notify_all();
    if (p2p_.joinable())
        p2p_.join();
    std::unique_lock<std::mutex> lk(mu_);
    if (comm_ && !aborted_)
        rcoll_comm_destroy(comm_);
    comm_ = nullptr;
}

void ProcessGroupRcoll::shutdown()
{
    stop(false);
}

void ProcessGroupRcoll::abort()
{
    stop(true);
}

std::chrono::milliseconds
ProcessGroupRcoll::op_timeout(std::chrono::milliseconds t) const
{
    return t.count() < 0 ? timeout_ : t;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::enqueue(
    c10d::OpType type, const char *title, std::vector<at::Tensor> outputs,
    std::chrono::milliseconds timeout, std::function<void()> run)
{
    auto w = c10::make_intrusive<RcollWork>(rank_, type, title,
                                            std::move(outputs), std::move(run),
                                            op_timeout(timeout));
    w->pg = this;
    w->queued = std::chrono::steady_clock::now();
    bool wake;
    {
        std::unique_lock<std::mutex> lk(mu_);
        TORCH_CHECK(!stopping_, "rcoll ", title,
                    ": the process group was shut down or aborted");
        queue_.push_back(w);
        /* a worker that waits for an earlier work's deadline looks at
         * the queue then anyway: no wake-up per call */
        wake = worker_idle_;
        worker_idle_ = false;
    }
    if (wake)
        cv_.notify_all();
    return w;
}

/* Runs the queue's front in the calling thread, which holds `lk` on mu_
 * and returns holding it: the runner role is taken for the call, the
 * watchdog sees it in flight, waiters are told when it is done. */
void ProcessGroupRcoll::run_front(std::unique_lock<std::mutex> &lk)
{
    c10::intrusive_ptr<RcollWork> w = queue_.front();
    queue_.pop_front();
    running_ = true;
    const bool dead = aborted_;
    const std::string reason = dead ? abort_reason_ : std::string();
    bool wake_wd = false;
    if (!dead) {
        inflight_ = w.get();
        inflight_deadline_ = std::chrono::steady_clock::now() + w->timeout;
        /* a watchdog waiting for an earlier deadline looks again then */
        wake_wd = wd_idle_;
        wd_idle_ = false;
    }
    lk.unlock();
    if (wake_wd)
        wd_cv_.notify_all();
    std::exception_ptr err;
    if (dead) {
        err = std::make_exception_ptr(
            c10::DistBackendError({__func__, __FILE__, __LINE__}, reason));
    } else {
        try {
            w->run();
        } catch (...) {
            err = std::current_exception();
        }
    }
    lk.lock();
    inflight_ = nullptr;
    running_ = false;
    w->pg = nullptr;
    /* only who needs it is woken: a condition-variable wake-up per call
     * cost a context switch per call */
    const bool wake_drivers = drivers_waiting_ > 0;
    const bool wake_worker = worker_idle_ && (!queue_.empty() || stopping_);
    if (wake_worker)
        worker_idle_ = false;
    lk.unlock();
    w->complete(err);
    if (wake_drivers)
        run_cv_.notify_all();
    if (wake_worker)
        cv_.notify_all();
    lk.lock();
}

void ProcessGroupRcoll::drive(RcollWork *w)
{
    std::unique_lock<std::mutex> lk(mu_);
    while (!w->c10d::Work::isCompleted()) {
        if (running_) {
            drivers_waiting_++;
            run_cv_.wait(lk);
            drivers_waiting_--;
            continue;
        }
        if (queue_.empty())
            break; /* taken and being completed: Work::wait waits */
        run_front(lk);
    }
}

void ProcessGroupRcoll::want(RcollWork *w)
{
    {
        std::unique_lock<std::mutex> lk(mu_);
        if (w->pg != this || w->wanted)
            return;
        w->wanted = true;
        worker_idle_ = false;
    }
    cv_.notify_all();
}

/* Throws the error of a failed rcoll call, naming the call and the rank;
 * after a watchdog abort, the timeout that caused it. */
void ProcessGroupRcoll::check(rcoll_status_t st, const std::string &what)
{
    if (st == RCOLL_OK)
        return;
    std::string msg = rcoll_last_error();
    {
        std::unique_lock<std::mutex> lk(mu_);
        if (aborted_)
            throw_backend(abort_reason_);
    }
    throw_backend("rcoll " + what + " (rank " + std::to_string(rank_) +
                  " of " + std::to_string(size_) + ") failed: " +
                  rcoll_status_string(st) + ": " + msg);
}

/* Runs what no caller waits for: a work whose future was asked for at
 * once, any other once it has been defer_ at the queue's front (its
 * caller's wait() usually comes first and runs it); at shutdown,
 * everything left. */
void ProcessGroupRcoll::worker_loop()
{
    std::unique_lock<std::mutex> lk(mu_);
    bool linger = false;
    for (;;) {
        if (running_ || queue_.empty()) {
            if (stopping_ && !running_)
                return; /* everything queued is done */
            if (linger) {
                /* linger before going idle: a worker that went idle at
                 * once would be woken by every enqueue of callers that
                 * run their own works in a loop (also while a caller runs
                 * one: running_), a context switch per call that preempts
                 * the ranks' main threads. Not idle, it is not notified:
                 * it looks again after defer_, and only then waits to be
                 * woken. */
                linger = false;
                worker_idle_ = false;
                cv_.wait_for(lk, defer_);
                continue;
            }
            worker_idle_ = true;
            cv_.wait(lk);
            linger = true;
            continue;
        }
        linger = true;
        RcollWork *f = queue_.front().get();
        const auto due = f->queued + defer_;
        if (stopping_ || f->wanted || std::chrono::steady_clock::now() >= due) {
            run_front(lk);
            continue;
        }
        worker_idle_ = false;
        cv_.wait_until(lk, due);
    }
}

/* Aborts the communicator when the operation in flight outlives its
 * timeout: the worker's blocking call then returns, and this and every
 * later operation fail with the reason. */
void ProcessGroupRcoll::watchdog_loop()
{
    std::unique_lock<std::mutex> lk(mu_);
    while (!stopping_ || inflight_) {
        if (!inflight_ || aborted_) {
            wd_idle_ = true;
            wd_cv_.wait_for(lk, std::chrono::milliseconds(500));
            wd_idle_ = false;
            continue;
        }
        RcollWork *w = inflight_;
        auto deadline = inflight_deadline_;
        /* rcoll's own timeout (RCOLL_TIMEOUT, the group's by default)
         * fails the operation with the rank and step it waits for and the
         * root cause, after asking down the chain of waits (up to 2 s for
         * a silent rank, 1 s for an idle one): give it 3 s to do so
         * before aborting with less to say */
        const auto grace = std::chrono::seconds(3);
        if (std::chrono::steady_clock::now() < deadline + grace) {
            wd_cv_.wait_until(lk, deadline + grace);
            continue;
        }
        if (inflight_ != w)
            continue;
        rcoll_comm_dump(comm_); /* what it waits for, to stderr */
        aborted_ = true;
        abort_reason_ = "rcoll " + w->title + " (rank " +
                        std::to_string(rank_) + " of " +
                        std::to_string(size_) + ") timed out after " +
                        std::to_string(w->timeout.count()) +
                        " ms (the process group's timeout; its state is dumped "
                        "on stderr); the process group was aborted";
        rcoll_comm_abort(comm_);
    }
}

/* ------------------------------------------------------------------ */
/* collectives                                                          */

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::allreduce(
    std::vector<at::Tensor> &tensors, const c10d::AllreduceOptions &opts)
{
    static const char *call = "allreduce";
    for (auto &t : tensors) {
        check_cpu(t, call);
        check_reducible(t, opts.reduceOp, call);
    }
    auto rop = opts.reduceOp;
    std::vector<at::Tensor> ts = tensors;
    return enqueue(c10d::OpType::ALLREDUCE, call, tensors, opts.timeout,
                   [this, ts, rop]() {
                       for (auto &t : ts) {
                           Dense d(t);
                           Reduction r = reduction(d.buf, rop, call);
                           check(rcoll_allreduce(r.ptr(), r.ptr(), r.count(),
                                                 r.dt, r.op, comm_, nullptr),
                                 call);
                           d.back();
                       }
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::allreduce_coalesced(
    std::vector<at::Tensor> &tensors,
    const c10d::AllreduceCoalescedOptions &opts)
{
    static const char *call = "allreduce_coalesced";
    for (auto &t : tensors) {
        check_cpu(t, call);
        check_reducible(t, opts.reduceOp, call);
        check_same(tensors[0], t, call, "tensor");
    }
    auto rop = opts.reduceOp;
    std::vector<at::Tensor> ts = tensors;
    return enqueue(
        c10d::OpType::ALLREDUCE_COALESCED, call, tensors, opts.timeout,
        [this, ts, rop]() {
            if (ts.empty())
                return;
            /* one operation over the tensors laid end to end */
            std::vector<at::Tensor> flat;
            for (auto &t : ts)
                flat.push_back(t.reshape({-1}));
            at::Tensor buf = at::cat(flat);
            Reduction r = reduction(buf, rop, call);
            check(rcoll_allreduce(r.ptr(), r.ptr(), r.count(), r.dt, r.op,
                                  comm_, nullptr),
                  call);
            int64_t off = 0;
            for (auto &t : ts) {
                int64_t n = t.numel();
                t.copy_(buf.narrow(0, off, n).view(t.sizes()));
                off += n;
            }
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::broadcast(
    std::vector<at::Tensor> &tensors, const c10d::BroadcastOptions &opts)
{
    static const char *call = "broadcast";
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "rcoll ", call,
                ": root ", opts.rootRank, " is not a rank of this group of ",
                size_);
    for (auto &t : tensors)
        check_cpu(t, call);
    int root = (int)opts.rootRank;
    std::vector<at::Tensor> ts = tensors;
    return enqueue(c10d::OpType::BROADCAST, call, tensors, opts.timeout,
                   [this, ts, root]() {
                       for (auto &t : ts) {
                           Dense d(t);
                           check(rcoll_broadcast(d.ptr(), d.ptr(),
                                                 d.buf.nbytes(), RCOLL_UINT8,
                                                 root, comm_, nullptr),
                                 call);
                           d.back();
                       }
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::reduce(
    std::vector<at::Tensor> &tensors, const c10d::ReduceOptions &opts)
{
    static const char *call = "reduce";
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "rcoll ", call,
                ": root ", opts.rootRank, " is not a rank of this group of ",
                size_);
    for (auto &t : tensors) {
        check_cpu(t, call);
        check_reducible(t, opts.reduceOp, call);
    }
    int root = (int)opts.rootRank;
    auto rop = opts.reduceOp;
    std::vector<at::Tensor> ts = tensors;
    return enqueue(c10d::OpType::REDUCE, call, tensors, opts.timeout,
                   [this, ts, rop, root]() {
                       for (auto &t : ts) {
                           Dense d(t);
                           Reduction r = reduction(d.buf, rop, call);
                           check(rcoll_reduce(r.ptr(), r.ptr(), r.count(),
                                              r.dt, r.op, root, comm_,
                                              nullptr),
                                 call);
                           if (rank_ == root)
                               d.back();
                       }
                   });
}

/* all-gather of `in` into one contiguous buffer of size * in.nbytes() */
static void gather_bytes(ProcessGroupRcoll *pg, const at::Tensor &in,
                         at::Tensor &flat, int rank, const char *call,
                         const std::function<void(rcoll_status_t)> &check)
{
    (void)pg;
    size_t nb = in.nbytes();
    char *base = (char *)(flat.numel() ? flat.data_ptr() : nullptr);
    Dense d(in);
    const void *src = d.ptr();
    if (nb && base + (size_t)rank * nb != src)
        memmove(base + (size_t)rank * nb, src, nb); /* in place below */
    (void)call;
    check(rcoll_allgather(nb ? base + (size_t)rank * nb : nullptr, base, nb,
                          RCOLL_UINT8, pg->comm(), nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::allgather(
    std::vector<std::vector<at::Tensor>> &outputs,
    std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts)
{
    static const char *call = "allgather";
    TORCH_CHECK(outputs.size() == inputs.size(), "rcoll ", call, ": ",
                outputs.size(), " output lists for ", inputs.size(),
                " inputs");
    for (size_t i = 0; i < inputs.size(); i++) {
        check_cpu(inputs[i], call);
        TORCH_CHECK((int)outputs[i].size() == size_, "rcoll ", call,
                    ": the output list has ", outputs[i].size(),
                    " tensors, the group ", size_, " ranks");
        for (auto &o : outputs[i]) {
            check_cpu(o, call);
            check_same(inputs[i], o, call, "output");
            TORCH_CHECK(o.numel() == inputs[i].numel(), "rcoll ", call,
                        ": an output has ", o.numel(),
                        " elements, the input ", inputs[i].numel());
        }
    }
    std::vector<at::Tensor> outs;
    for (auto &l : outputs)
        outs.insert(outs.end(), l.begin(), l.end());
    auto os = outputs;
    auto is = inputs;
    return enqueue(
        c10d::OpType::ALLGATHER, call, outs, opts.timeout, [this, os, is]() {
            for (size_t i = 0; i < is.size(); i++) {
                at::Tensor flat = at::empty(
                    {(int64_t)size_ * is[i].numel()}, is[i].options());
                gather_bytes(this, is[i], flat, rank_, call,
                             [this](rcoll_status_t st) { check(st, call); });
                int64_t n = is[i].numel();
                for (int r = 0; r < size_; r++)
                    os[i][r].copy_(
                        flat.narrow(0, r * n, n).view(os[i][r].sizes()));
            }
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::_allgather_base(
    at::Tensor &output, at::Tensor &input, const c10d::AllgatherOptions &opts)
{
    static const char *call = "_allgather_base";
    check_cpu(input, call);
    check_cpu(output, call);
    check_same(input, output, call, "output");
    TORCH_CHECK(output.numel() == input.numel() * size_, "rcoll ", call,
                ": the output has ", output.numel(), " elements, not ",
                size_, " x ", input.numel());
    at::Tensor out = output, in = input;
    return enqueue(c10d::OpType::_ALLGATHER_BASE, call, {output},
                   opts.timeout, [this, out, in]() {
                       Dense d(out);
                       gather_bytes(this, in, d.buf, rank_, call,
                                    [this](rcoll_status_t st) {
                                        check(st, call);
                                    });
                       d.back();
                   });
}

/* outputs[r][i] = input i of rank r: the inputs' bytes are laid end to end
 * and gathered in one operation (they may differ in shape and dtype) */
c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputs,
    std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts)
{
    static const char *call = "allgather_coalesced";
    TORCH_CHECK((int)outputs.size() == size_, "rcoll ", call, ": ",
                outputs.size(), " output lists, the group has ", size_,
                " ranks");
    for (auto &t : inputs)
        check_cpu(t, call);
    std::vector<at::Tensor> outs;
    for (auto &l : outputs) {
        TORCH_CHECK(l.size() == inputs.size(), "rcoll ", call,
                    ": an output list has ", l.size(), " tensors for ",
                    inputs.size(), " inputs");
        for (size_t i = 0; i < l.size(); i++) {
            check_cpu(l[i], call);
            check_same(inputs[i], l[i], call, "output");
            TORCH_CHECK(l[i].numel() == inputs[i].numel(), "rcoll ", call,
                        ": output ", i, " has ", l[i].numel(),
                        " elements, input ", i, " ", inputs[i].numel());
        }
        outs.insert(outs.end(), l.begin(), l.end());
    }
    auto os = outputs;
    auto is = inputs;
    return enqueue(
        c10d::OpType::ALLGATHER_COALESCED, call, outs, opts.timeout,
        [this, os, is]() {
            int64_t total = 0;
            for (auto &t : is)
                total += (int64_t)t.nbytes();
            at::Tensor flat =
                at::empty({(int64_t)size_ * total}, at::dtype(at::kByte));
            char *base = (char *)(total ? flat.data_ptr() : nullptr);
            int64_t off = 0;
            for (auto &t : is) {
                at::Tensor c = t.contiguous();
                if (c.nbytes())
                    memcpy(base + (int64_t)rank_ * total + off, c.data_ptr(),
                           c.nbytes());
                off += (int64_t)c.nbytes();
            }
            check(rcoll_allgather(total ? base + (int64_t)rank_ * total
                                        : nullptr,
                                  base, (size_t)total, RCOLL_UINT8, comm_,
                                  nullptr),
                  call);
            for (int r = 0; r < size_; r++) {
                off = 0;
                for (size_t i = 0; i < is.size(); i++) {
                    int64_t nb = (int64_t)is[i].nbytes();
                    at::Tensor o = os[r][i];
                    if (nb)
                        o.copy_(flat.narrow(0, r * total + off, nb)
                                    .view(o.scalar_type())
                                    .view(o.sizes()));
                    off += nb;
                }
            }
        });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupRcoll::allgather_into_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &opts)
{
    static const char *call = "allgather_into_tensor_coalesced";
    TORCH_CHECK(outputs.size() == inputs.size(), "rcoll ", call, ": ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); i++) {
        check_cpu(inputs[i], call);
        check_cpu(outputs[i], call);
        check_same(inputs[i], outputs[i], call, "output");
        TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_,
                    "rcoll ", call, ": output ", i, " has ",
                    outputs[i].numel(), " elements, not ", size_, " x ",
                    inputs[i].numel());
    }
    auto os = outputs;
    auto is = inputs;
    return enqueue(c10d::OpType::COALESCED, call, outputs, opts.timeout,
                   [this, os, is]() {
                       for (size_t i = 0; i < is.size(); i++) {
                           Dense d(os[i]);
                           gather_bytes(this, is[i], d.buf, rank_, call,
                                        [this](rcoll_status_t st) {
                                            check(st, call);
                                        });
                           d.back();
                       }
                   });
}

/* gather and scatter: the root receives from (sends to) each rank in
 * turn; rcoll matches point-to-point messages in order per pair */
c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::gather(
    std::vector<std::vector<at::Tensor>> &outputs,
    std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts)
{
    static const char *call = "gather";
    int root = (int)opts.rootRank;
    TORCH_CHECK(root >= 0 && root < size_, "rcoll ", call, ": root ", root,
                " is not a rank of this group of ", size_);
    TORCH_CHECK(inputs.size() == 1, "rcoll ", call,
                ": takes one input tensor, got ", inputs.size());
    check_cpu(inputs[0], call);
    std::vector<at::Tensor> outs;
    if (rank_ == root) {
        TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                    "rcoll ", call, ": the root needs one list of ", size_,
                    " output tensors");
        for (auto &o : outputs[0]) {
            check_cpu(o, call);
            check_same(inputs[0], o, call, "output");
            TORCH_CHECK(o.numel() == inputs[0].numel(), "rcoll ", call,
                        ": an output has ", o.numel(), " elements, the input ",
                        inputs[0].numel());
        }
        outs = outputs[0];
    } else {
        TORCH_CHECK(outputs.empty() || outputs[0].empty(), "rcoll ", call,
                    ": only the root takes output tensors");
    }
    at::Tensor in = inputs[0];
    return enqueue(c10d::OpType::GATHER, call, outs, opts.timeout,
                   [this, outs, in, root]() {
                       Dense d(in);
                       size_t nb = d.buf.nbytes();
                       if (rank_ != root) {
                           check(rcoll_gather(d.ptr(), nullptr, nb,
                                              RCOLL_UINT8, root, comm_,
                                              nullptr), call);
                           return;
                       }
                       at::Tensor all = at::empty(
                           {(int64_t)nb * size_}, in.options().dtype(at::kByte));
                       check(rcoll_gather(d.ptr(), nb ? all.data_ptr() : nullptr,
                                          nb, RCOLL_UINT8, root, comm_,
                                          nullptr), call);
                       for (int r = 0; r < size_; r++)
                           outs[r].copy_(all.narrow(0, (int64_t)nb * r,
                                                    (int64_t)nb)
                                             .view(outs[r].scalar_type())
                                             .view(outs[r].sizes()));
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::scatter(
    std::vector<at::Tensor> &outputs,
    std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ScatterOptions &opts)
{
    static const char *call = "scatter";
    int root = (int)opts.rootRank;
    TORCH_CHECK(root >= 0 && root < size_, "rcoll ", call, ": root ", root,
                " is not a rank of this group of ", size_);
    TORCH_CHECK(outputs.size() == 1, "rcoll ", call,
                ": takes one output tensor, got ", outputs.size());
    check_cpu(outputs[0], call);
    std::vector<at::Tensor> ins;
    if (rank_ == root) {
        TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                    "rcoll ", call, ": the root needs one list of ", size_,
                    " input tensors");
        for (auto &t : inputs[0]) {
            check_cpu(t, call);
            check_same(outputs[0], t, call, "input");
            TORCH_CHECK(t.numel() == outputs[0].numel(), "rcoll ", call,
                        ": an input has ", t.numel(), " elements, the output ",
                        outputs[0].numel());
        }
        ins = inputs[0];
    } else {
        TORCH_CHECK(inputs.empty() || inputs[0].empty(), "rcoll ", call,
                    ": only the root takes input tensors");
    }
    at::Tensor out = outputs[0];
    return enqueue(c10d::OpType::SCATTER, call, outputs, opts.timeout,
                   [this, ins, out, root]() {
                       Dense d(out);
                       size_t nb = d.buf.nbytes();
                       at::Tensor all;
                       if (rank_ == root) {
                           std::vector<at::Tensor> flat;
                           for (auto &t : ins)
                               flat.push_back(
                                   t.contiguous().view({-1}).view(at::kByte));
                           all = at::cat(flat);
                       }
                       check(rcoll_scatter(rank_ == root && nb
                                               ? all.data_ptr()
                                               : nullptr,
                                           d.ptr(), nb, RCOLL_UINT8, root,
                                           comm_, nullptr), call);
                       d.back();
                   });
}

/* reduce-scatter of the contiguous `in` (size x out.numel()) into `out` */
static void reduce_scatter_dense(const at::Tensor &in, const at::Tensor &out,
                                 const c10d::ReduceOp &rop, rcoll_comm_t comm,
                                 const char *call,
                                 const std::function<void(rcoll_status_t)> &check)
{
    Dense d(out);
    Reduction ri = reduction(in, rop, call);
    Reduction ro = reduction(d.buf, rop, call);
    check(rcoll_reduce_scatter(ri.ptr(), ro.ptr(), ro.count(), ro.dt, ro.op,
                               comm, nullptr));
    d.back();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::reduce_scatter(
    std::vector<at::Tensor> &outputs,
    std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ReduceScatterOptions &opts)
{
    static const char *call = "reduce_scatter";
    TORCH_CHECK(outputs.size() == inputs.size(), "rcoll ", call, ": ",
                outputs.size(), " outputs for ", inputs.size(),
                " input lists");
    for (size_t i = 0; i < outputs.size(); i++) {
        check_cpu(outputs[i], call);
        check_reducible(outputs[i], opts.reduceOp, call);
        TORCH_CHECK((int)inputs[i].size() == size_, "rcoll ", call,
                    ": the input list has ", inputs[i].size(),
                    " tensors, the group ", size_, " ranks");
        for (auto &t : inputs[i]) {
            check_cpu(t, call);
            check_same(outputs[i], t, call, "input");
            TORCH_CHECK(t.numel() == outputs[i].numel(), "rcoll ", call,
                        ": an input has ", t.numel(),
                        " elements, the output ", outputs[i].numel());
        }
    }
    auto os = outputs;
    auto is = inputs;
    auto rop = opts.reduceOp;
    return enqueue(c10d::OpType::REDUCE_SCATTER, call, outputs, opts.timeout,
                   [this, os, is, rop]() {
                       for (size_t i = 0; i < os.size(); i++) {
                           std::vector<at::Tensor> flat;
                           for (auto &t : is[i])
                               flat.push_back(t.reshape({-1}));
                           at::Tensor in = at::cat(flat);
                           reduce_scatter_dense(in, os[i], rop, comm_, call,
                                                [this](rcoll_status_t st) {
                                                    check(st, call);
                                                });
                       }
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input,
    const c10d::ReduceScatterOptions &opts)
{
    static const char *call = "_reduce_scatter_base";
    check_cpu(input, call);
    check_cpu(output, call);
    check_same(output, input, call, "input");
    check_reducible(output, opts.reduceOp, call);
    TORCH_CHECK(input.numel() == output.numel() * size_, "rcoll ", call,
                ": the input has ", input.numel(), " elements, not ", size_,
                " x ", output.numel());
    at::Tensor out = output, in = input;
    auto rop = opts.reduceOp;
    return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, call, {output},
                   opts.timeout, [this, out, in, rop]() {
                       reduce_scatter_dense(in.contiguous(), out, rop, comm_,
                                            call, [this](rcoll_status_t st) {
                                                check(st, call);
                                            });
                   });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupRcoll::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::ReduceScatterOptions &opts)
{
    static const char *call = "reduce_scatter_tensor_coalesced";
    TORCH_CHECK(outputs.size() == inputs.size(), "rcoll ", call, ": ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    for (size_t i = 0; i < outputs.size(); i++) {
        check_cpu(inputs[i], call);
        check_cpu(outputs[i], call);
        check_same(outputs[i], inputs[i], call, "input");
        check_reducible(outputs[i], opts.reduceOp, call);
        TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_, "rcoll ",
                    call, ": input ", i, " has ", inputs[i].numel(),
                    " elements, not ", size_, " x ", outputs[i].numel());
    }
    auto os = outputs;
    auto is = inputs;
    auto rop = opts.reduceOp;
    return enqueue(c10d::OpType::COALESCED, call, outputs, opts.timeout,
                   [this, os, is, rop]() {
                       for (size_t i = 0; i < os.size(); i++)
                           reduce_scatter_dense(is[i].contiguous(), os[i], rop,
                                                comm_, call,
                                                [this](rcoll_status_t st) {
                                                    check(st, call);
                                                });
                   });
}

/* Byte counts and displacements of `splits` rows of `row` bytes each
 * (no splits: equal blocks of `total` rows). */
static void a2a_layout(const std::vector<int64_t> &splits, int64_t total,
                       size_t row, int size, const char *call,
                       std::vector<size_t> &cnt, std::vector<size_t> &dsp)
{
    cnt.assign((size_t)size, 0);
    dsp.assign((size_t)size, 0);
    if (splits.empty()) {
        TORCH_CHECK(total % size == 0, "rcoll ", call, ": dimension 0 (",
                    total, ") does not divide into ", size, " equal splits");
        for (int r = 0; r < size; r++) {
            cnt[r] = (size_t)(total / size) * row;
            dsp[r] = (size_t)r * cnt[r];
        }
        return;
    }
    TORCH_CHECK((int)splits.size() == size, "rcoll ", call, ": ",
                splits.size(), " split sizes for a group of ", size);
    int64_t off = 0;
    for (int r = 0; r < size; r++) {
        TORCH_CHECK(splits[r] >= 0, "rcoll ", call, ": negative split");
        cnt[r] = (size_t)splits[r] * row;
        dsp[r] = (size_t)off * row;
        off += splits[r];
    }
    TORCH_CHECK(off == total, "rcoll ", call, ": the splits add up to ", off,
                ", dimension 0 is ", total);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &outputSplits,
    std::vector<int64_t> &inputSplits, const c10d::AllToAllOptions &opts)
{
    static const char *call = "alltoall_base";
    check_cpu(input, call);
    check_cpu(output, call);
    check_same(input, output, call, "output");
    TORCH_CHECK(input.dim() >= 1 && output.dim() >= 1, "rcoll ", call,
                ": tensors need a dimension 0");
    size_t irow = input.size(0) ? input.nbytes() / (size_t)input.size(0) : 0;
    size_t orow = output.size(0) ? output.nbytes() / (size_t)output.size(0)
                                 : 0;
    std::vector<size_t> sc, sd, rc, rd;
    a2a_layout(inputSplits, input.size(0), irow, size_, call, sc, sd);
    a2a_layout(outputSplits, output.size(0), orow, size_, call, rc, rd);
    at::Tensor in = input, out = output;
    /* no splits given (on every rank, as NCCL's and gloo's backends
     * assume): rcoll_alltoall, whose algorithms need not reach every peer
     * at once (Bruck). Decided from the call, not from this rank's sizes:
     * equal splits on one rank and not on another would call different
     * collectives. */
    bool even = inputSplits.empty() && outputSplits.empty();
    TORCH_CHECK(!even || size_ == 0 || sc[0] == rc[0], "rcoll ", call,
                ": without split sizes, input and output must have the "
                "same size");
    return enqueue(c10d::OpType::ALLTOALL_BASE, call, {output}, opts.timeout,
                   [this, in, out, sc, sd, rc, rd, even]() {
                       Dense di(in), dout(out);
                       if (even)
                           check(rcoll_alltoall(di.ptr(), dout.ptr(),
                                                size_ ? sc[0] : 0,
                                                RCOLL_UINT8, comm_, nullptr),
                                 call);
                       else
                           check(rcoll_alltoallv(di.ptr(), sc.data(),
                                                 sd.data(), dout.ptr(),
                                                 rc.data(), rd.data(),
                                                 RCOLL_UINT8, comm_, nullptr),
                                 call);
                       dout.back();
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::alltoall(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllToAllOptions &opts)
{
    static const char *call = "alltoall";
    TORCH_CHECK((int)inputs.size() == size_ && (int)outputs.size() == size_,
                "rcoll ", call, ": needs ", size_, " input and output tensors");
    std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
    size_t so = 0, ro = 0;
    for (int r = 0; r < size_; r++) {
        check_cpu(inputs[r], call);
        check_cpu(outputs[r], call);
        check_same(inputs[0], inputs[r], call, "input");
        check_same(inputs[0], outputs[r], call, "output");
        sc[r] = inputs[r].nbytes();
        sd[r] = so;
        so += sc[r];
        rc[r] = outputs[r].nbytes();
        rd[r] = ro;
        ro += rc[r];
    }
    auto is = inputs;
    auto os = outputs;
    return enqueue(c10d::OpType::ALLTOALL, call, outputs, opts.timeout,
                   [this, is, os, sc, sd, rc, rd, ro]() {
                       std::vector<at::Tensor> flat;
                       for (auto &t : is)
                           flat.push_back(
                               t.contiguous().view({-1}).view(at::kByte));
                       at::Tensor in = at::cat(flat);
                       at::Tensor out = at::empty(
                           {(int64_t)ro}, in.options());
                       check(rcoll_alltoallv(in.numel() ? in.data_ptr()
                                                        : nullptr,
                                             sc.data(), sd.data(),
                                             ro ? out.data_ptr() : nullptr,
                                             rc.data(), rd.data(),
                                             RCOLL_UINT8, comm_, nullptr),
                             call);
                       for (size_t r = 0; r < os.size(); r++)
                           os[r].copy_(out.narrow(0, (int64_t)rd[r],
                                                  (int64_t)rc[r])
                                           .view(os[r].scalar_type())
                                           .view(os[r].sizes()));
                   });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupRcoll::barrier(const c10d::BarrierOptions &opts)
{
    static const char *call = "barrier";
    return enqueue(c10d::OpType::BARRIER, call, {}, opts.timeout,
                   [this]() { check(rcoll_barrier(comm_), call); });
}

/* ------------------------------------------------------------------ */
/* point to point: posted at once as non-blocking rcoll requests, matched
 * by (source, tag) in posting order (MPI's rules); completed in posting
 * order by p2p_loop */

static void check_p2p(std::vector<at::Tensor> &tensors, int peer, int tag,
                      int size, const char *call)
{
    TORCH_CHECK(tensors.size() == 1, "rcoll ", call,
                ": takes exactly one tensor, got ", tensors.size());
    check_cpu(tensors[0], call);
    TORCH_CHECK(peer >= 0 && peer < size, "rcoll ", call, ": peer ", peer,
                " is not a rank of this group of ", size);
    TORCH_CHECK(tag >= 0, "rcoll ", call, ": tag ", tag,
                " is negative (tags are >= 0)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::post_p2p(bool send,
                                                           at::Tensor t,
                                                           int peer, int tag)
{
    const char *call = send ? "send" : "recv";
    std::string what = std::string(call) + (send ? " to rank " : " from rank ") +
                       std::to_string(peer) + " (tag " + std::to_string(tag) +
                       ")";
    P2p p;
    p.user = t;
    p.buf = t.is_contiguous() ? t : t.contiguous();
    p.recv = !send;
    p.what = what;
    p.work = c10::make_intrusive<RcollWork>(
        rank_, send ? c10d::OpType::SEND : c10d::OpType::RECV, call,
        send ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{t},
        nullptr, timeout_);
    void *ptr = p.buf.numel() ? p.buf.data_ptr() : nullptr;
    {
        std::unique_lock<std::mutex> lk(mu_);
        TORCH_CHECK(!stopping_, "rcoll ", call,
                    ": the process group was shut down or aborted");
        if (aborted_)
            throw_backend(abort_reason_);
    }
    rcoll_status_t st =
        send ? rcoll_isend_tag(ptr, p.buf.nbytes(), RCOLL_UINT8, peer, tag,
                               comm_, nullptr, &p.req)
             : rcoll_irecv_tag(ptr, p.buf.nbytes(), RCOLL_UINT8, peer, tag,
                               comm_, nullptr, &p.req);
    check(st, what);
    auto w = p.work;
    {
        std::unique_lock<std::mutex> lk(p2p_mu_);
        p2p_q_.push_back(std::move(p));
    }
    p2p_cv_.notify_one();
    return w;
}

void ProcessGroupRcoll::p2p_loop()
{
    for (;;) {
        P2p p;
        {
            std::unique_lock<std::mutex> lk(p2p_mu_);
            p2p_cv_.wait(lk, [&] { return p2p_stop_ || !p2p_q_.empty(); });
            if (p2p_q_.empty())
                return;
            p = std::move(p2p_q_.front());
            p2p_q_.pop_front();
            p2p_busy_ = true;
        }
        std::exception_ptr err;
        try {
            check(rcoll_wait(p.req), p.what);
            if (p.recv && !p.buf.is_same(p.user))
                p.user.copy_(p.buf);
        } catch (...) {
            err = std::current_exception();
        }
        p.work->complete(err);
        std::unique_lock<std::mutex> lk(p2p_mu_);
        p2p_busy_ = false;
    }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::send(
    std::vector<at::Tensor> &tensors, int dst, int tag)
{
    check_p2p(tensors, dst, tag, size_, "send");
    return post_p2p(true, tensors[0], dst, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRcoll::recv(
    std::vector<at::Tensor> &tensors, int src, int tag)
{
    check_p2p(tensors, src, tag, size_, "recv");
    return post_p2p(false, tensors[0], src, tag);
}

} // namespace rcoll_torch

/* ------------------------------------------------------------------ */

namespace py = pybind11;

static c10::intrusive_ptr<rcoll_torch::ProcessGroupRcoll>
create(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
       const std::chrono::duration<float> &timeout)
{
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    if (ms.count() <= 0)
        ms = std::chrono::duration_cast<std::chrono::milliseconds>(
            kBackendDefaultTimeout);
    return c10::make_intrusive<rcoll_torch::ProcessGroupRcoll>(store, rank,
                                                               size, ms);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "rcoll c10d backend";
    py::class_<rcoll_torch::ProcessGroupRcoll, c10d::Backend,
               c10::intrusive_ptr<rcoll_torch::ProcessGroupRcoll>>(
        m, "ProcessGroupRcoll")
        .def(py::init(&create), py::arg("store"), py::arg("rank"),
             py::arg("size"), py::arg("timeout"),
             py::call_guard<py::gil_scoped_release>());
    m.def("rcoll_version", []() { return std::string(rcoll_version()); });
}
