/*
 * ProcessGroupRcoll: a c10d::Backend for torch.distributed on top of the
 * rcoll C API (include/rcoll.h).
 *
 * One rcoll communicator per backend instance (per process group). Each
 * collective becomes a RcollWork in the group's queue; the queue runs in
 * the order the collectives were issued, as every rank must issue them,
 * one blocking rcoll call at a time, by whichever thread holds the runner
 * role: a caller of Work::wait() runs the queue up to its own operation
 * itself (a synchronous collective then costs no thread hand-off), and the
 * worker thread runs what nobody waits for, at once for a work whose
 * future was asked for (DDP's hooks), else once it has waited
 * RCOLL_TORCH_DEFER_US (1000) in the queue (async_op=True still
 * overlaps). Point-to-point sends and receives are posted at once by the calling thread as non-blocking rcoll
 * requests (so isend/irecv in any order, batch_isend_irecv included, never
 * deadlock) and completed in posting order by a second thread. rcoll's own no-progress
 * timeout (RCOLL_TIMEOUT; the first group's timeout unless set) fails a
 * stuck operation naming the rank and step it waits for. A watchdog thread
 * also enforces each operation's timeout (the group's unless the operation
 * sets one): 1 s past it, it dumps the communicator's state to stderr and
 * aborts it, after which every operation fails with the timeout's message.
 * Work::wait(timeout) returns or throws within the timeout (the worker
 * runs the work meanwhile). shutdown() (destroy_process_group) lets
 * pending work finish for up to a second, then aborts it: it fails naming
 * the shutdown. The group's timeout is the communicator's own
 * (rcoll_comm_init_rank_config) unless RCOLL_TIMEOUT is set. The
 * rendezvous goes through the c10d Store handed to the creator: rank 0
 * publishes an rcoll unique id, the others read it.
 */
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <rcoll.h>

#if TORCH_VERSION_MAJOR < 2
#error "rcoll_torch needs torch 2.x (c10d::Backend)"
#endif

namespace rcoll_torch {

class RcollWork : public c10d::Work {
  public:
    RcollWork(int rank, c10d::OpType type, const char *title,
              std::vector<at::Tensor> outputs, std::function<void()> run,
              std::chrono::milliseconds timeout);

    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    std::vector<at::Tensor> result() override;
    std::chrono::milliseconds getTimeout() const override;

    /* called by the runner once `run` returned or threw */
    void complete(std::exception_ptr err);

    /* runs the group's queue up to this work in the calling thread, then
     * waits as c10d::Work does */
    bool wait(std::chrono::milliseconds timeout =
                  std::chrono::milliseconds(0)) override; /* kNoTimeout */
    bool isCompleted() override;

    const std::string title;
    std::function<void()> run;
    const std::chrono::milliseconds timeout;
    /* the group whose queue holds it (nullptr: point to point, or done) */
    std::atomic<class ProcessGroupRcoll *> pg{nullptr};
    std::chrono::steady_clock::time_point queued;
    bool wanted = false; /* its future was asked for (the group's mu_) */

  private:
    void settle(const c10::intrusive_ptr<c10::ivalue::Future> &f,
                std::exception_ptr err);

    std::vector<at::Tensor> outputs_;
    std::mutex fut_mu_; /* guards the three below */
    c10::intrusive_ptr<c10::ivalue::Future> future_; /* made on demand */
    bool done_ = false;                              /* complete() ran */
    std::exception_ptr err_;
};

class ProcessGroupRcoll : public c10d::Backend {
  public:
    ProcessGroupRcoll(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                      int size, std::chrono::milliseconds timeout);
    ~ProcessGroupRcoll() override;

    const std::string getBackendName() const override { return "rcoll"; }

    c10::intrusive_ptr<c10d::Work> broadcast(
        std::vector<at::Tensor> &tensors,
        const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(
        std::vector<at::Tensor> &tensors,
        const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &tensors,
        const c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(
        std::vector<at::Tensor> &tensors,
        const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(
        std::vector<std::vector<at::Tensor>> &outputs,
        std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(
        at::Tensor &output, at::Tensor &input,
        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather_coalesced(
        std::vector<std::vector<at::Tensor>> &outputs,
        std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
        std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> gather(
        std::vector<std::vector<at::Tensor>> &outputs,
        std::vector<at::Tensor> &inputs,
        const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(
        std::vector<at::Tensor> &outputs,
        std::vector<std::vector<at::Tensor>> &inputs,
        const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(
        std::vector<at::Tensor> &outputs,
        std::vector<std::vector<at::Tensor>> &inputs,
        const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &output, at::Tensor &input,
        const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
        std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(
        at::Tensor &output, at::Tensor &input,
        std::vector<int64_t> &outputSplits, std::vector<int64_t> &inputSplits,
        const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(
        std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> barrier(
        const c10d::BarrierOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors,
                                        int dst, int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors,
                                        int src, int tag) override;

    void shutdown() override;
    void abort() override;

    /* the rcoll communicator (for tests and diagnostics) */
    rcoll_comm_t comm() const { return comm_; }

    /* RcollWork's side of the queue: run it up to w; ask the worker to
     * run w now */
    void drive(RcollWork *w);
    void want(RcollWork *w);
    /* how long the worker leaves a work nobody waits for to its caller
     * (RCOLL_TORCH_DEFER_US, default 1000; 0: the worker starts every
     * work at once) */
    std::chrono::microseconds defer_{1000};

  private:
    c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type,
                                           const char *title,
                                           std::vector<at::Tensor> outputs,
                                           std::chrono::milliseconds timeout,
                                           std::function<void()> run);
    std::chrono::milliseconds op_timeout(std::chrono::milliseconds t) const;
    void worker_loop();
    void run_front(std::unique_lock<std::mutex> &lk);
    void watchdog_loop();
    void p2p_loop();
    c10::intrusive_ptr<c10d::Work> post_p2p(bool send, at::Tensor t, int peer,
                                            int tag);
    void check(rcoll_status_t st, const std::string &what);
    void stop(bool abort);
    void abort_locked(const std::string &reason);
    size_t pending();
    /* how long a shutdown lets pending operations finish before it
     * aborts them */
    static constexpr std::chrono::milliseconds kShutdownGrace{1000};

    rcoll_comm_t comm_ = nullptr;
    std::chrono::milliseconds timeout_;

    std::mutex mu_;
    std::condition_variable cv_;      /* queue and stop, for the worker */
    std::condition_variable run_cv_;  /* the runner role, for drive() */
    int drivers_waiting_ = 0;         /* drive() calls waiting on run_cv_ */
    std::condition_variable wd_cv_;   /* in-flight changes, for the watchdog */
    std::deque<c10::intrusive_ptr<RcollWork>> queue_;
    RcollWork *inflight_ = nullptr;
    bool running_ = false;            /* a thread runs the queue's front */
    bool worker_idle_ = false;        /* the worker waits with no deadline */
    bool wd_idle_ = false;            /* the watchdog sees nothing in flight */
    std::chrono::steady_clock::time_point inflight_deadline_;
    bool stopping_ = false;
    bool aborted_ = false;            /* comm_ aborted: never call into it */
    std::string abort_reason_;
    std::thread worker_;
    std::thread watchdog_;
    /* point to point: posted at once (non-blocking) by the calling thread,
     * completed in posting order by p2p_ */
    struct P2p {
        c10::intrusive_ptr<RcollWork> work;
        rcoll_request_t req;
        at::Tensor user, buf; /* buf: the contiguous copy rcoll uses */
        bool recv;
        std::string what;
    };
    std::mutex p2p_mu_;
    std::condition_variable p2p_cv_;
    std::deque<P2p> p2p_q_;
    bool p2p_busy_ = false; /* p2p_ waits for one it took from the queue */
    bool p2p_stop_ = false;
    std::thread p2p_;
};

} // namespace rcoll_torch
