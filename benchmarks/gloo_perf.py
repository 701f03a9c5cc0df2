#!/usr/bin/env python3
"""The same measurement as rcoll-perf, done with PyTorch's gloo backend
(torch.distributed over loopback TCP): a reference for benchmarks/compare.

usage: gloo_perf.py NRANKS COLL MINBYTES MAXBYTES FACTOR ITERS WARMUP
                   [TARGET_S TRIALS]
  COLL: allreduce | allgather | broadcast | reduce_scatter | alltoall
ITERS 0: time-targeted, as rcoll-perf -T TARGET_S -R TRIALS (defaults 0.1
and 5): per size, calls per trial doubled from 1 until a trial lasts
TARGET_S on the slowest rank, and the median of TRIALS trials.
Prints "bytes time_us" per size, like mpi_ref_perf: the slowest rank's
average time; for allgather, reduce_scatter and alltoall the size is the
whole gathered / scattered / sent buffer, as in nccl-tests. Float32, sum. gloo has no
reduce_scatter: that collective prints nothing.

PERF_RANK=r runs rank r alone (the caller starts every rank, e.g. each in
its network namespace) with torch.distributed's MASTER_ADDR, MASTER_PORT
and GLOO_SOCKET_IFNAME (a comma-separated list uses every interface) from
the environment; rank 0 prints.

PERF_BACKEND=rcoll measures rcoll's c10d backend (bindings/torch, the
rcoll_torch package must be importable) with the same calls instead;
it does reduce_scatter (reduce_scatter_tensor). PERF_DEVICE=cuda puts the
tensors on the first GPU (every rank shares it; gloo then stages them
through host memory) and times up to the GPU's completion of the calls;
PERF_BACKEND=nccl measures NCCL that way.
"""
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, n, port, coll, minb, maxb, factor, iters, warm, out,
           target=0.1, trials=5):
    import torch
    import torch.distributed as dist

    if port:  # (0: launched by hand, the environment says where)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    backend = os.environ.get("PERF_BACKEND", "gloo")
    if backend == "rcoll":
        import rcoll_torch  # noqa: F401  (registers the backend)
    dev = os.environ.get("PERF_DEVICE", "cpu")
    if dev == "cuda":
        torch.cuda.set_device(0)  # every rank on the first GPU
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    dist.init_process_group(backend, rank=rank, world_size=n)
    lines = []
    size = minb
    while size <= maxb:
        count = size // 4
        per = count // n
        if coll in ("allgather", "alltoall") and per == 0:
            size *= factor  # less than one element per rank
            continue
        if coll == "allgather":
            count = per * n
            a = torch.ones(per, dtype=torch.float32, device=dev)
            outs = [torch.empty(per, dtype=torch.float32, device=dev)
                    for _ in range(n)]
            op = lambda: dist.all_gather(outs, a)
        elif coll == "reduce_scatter":
            count = per * n
            a = torch.ones(count, dtype=torch.float32, device=dev)
            o = torch.empty(per, dtype=torch.float32, device=dev)
            op = lambda: dist.reduce_scatter_tensor(o, a)
        elif coll == "alltoall":
            count = per * n
            a = torch.ones(count, dtype=torch.float32, device=dev)
            o = torch.empty(count, dtype=torch.float32, device=dev)
            op = lambda: dist.all_to_all_single(o, a)
        elif coll == "broadcast":
            a = torch.ones(count, dtype=torch.float32, device=dev)
            op = lambda: dist.broadcast(a, 0)
        else:
            a = torch.ones(count, dtype=torch.float32, device=dev)
            op = lambda: dist.all_reduce(a)
        for _ in range(warm):
            op()

        def trial(k):  # the slowest rank's time of k calls
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                op()
            sync()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                             device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.item()

        if iters > 0:
            per_call = trial(iters) / iters
        else:
            k = 1
            t = trial(k)
            while t < target and k < (1 << 28):
                g = target / t * 1.1 if t > 0 else 2
                k = min(int(k * min(max(g, 2), 16)), 1 << 28)
                t = trial(k)
            v = sorted([t / k] + [trial(k) / k for _ in range(trials - 1)])
            per_call = v[trials // 2] if trials % 2 else \
                (v[trials // 2 - 1] + v[trials // 2]) / 2
        if rank == 0:
            lines.append("%d %.2f" % (count * 4, per_call * 1e6))
        size *= factor
    dist.destroy_process_group()
    if rank == 0:
        out.put(lines) if out else print("\n".join(lines), flush=True)


def main():
    if len(sys.argv) not in (8, 10):
        sys.stderr.write(__doc__)
        return 2
    n = int(sys.argv[1])
    coll = sys.argv[2]
    minb, maxb, factor, iters, warm = (int(x) for x in sys.argv[3:8])
    target, trials = 0.1, 5
    if len(sys.argv) == 10:
        target, trials = float(sys.argv[8]), int(sys.argv[9])
    if coll == "reduce_scatter" and \
            os.environ.get("PERF_BACKEND", "gloo") == "gloo":
        return 0  # gloo does not implement it
    if "PERF_RANK" in os.environ:  # one rank, started by the caller
        worker(int(os.environ["PERF_RANK"]), n, 0, coll, minb, maxb, factor,
               iters, warm, None, target, trials)
        return 0
    import queue
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    for attempt in range(3):  # a rendezvous can fail (port taken, reset)
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=worker,
                             args=(r, n, port, coll, minb, maxb, factor,
                                   iters, warm, q, target, trials))
                 for r in range(n)]
        for p in procs:
            p.start()
        lines = None
        while lines is None:
            try:
                lines = q.get(timeout=1)
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs) or \
                        all(not p.is_alive() for p in procs):
                    break
        if lines is None:
            sys.stderr.write("gloo_perf: a worker failed (attempt %d)\n"
                             % (attempt + 1))
            for p in procs:
                p.kill()
                p.join()
            continue
        for p in procs:
            p.join()
        print("\n".join(lines))
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
