#!/usr/bin/env python3
"""Where a small all-reduce's time goes through torch.distributed, in a
1-rank group (no peer to wait for): per call, the median of TRIALS trials
of >= TARGET_S each (calls per trial doubled until a trial lasts that long).

usage: torch_overhead.py BACKEND [TARGET_S TRIALS]
  BACKEND: rcoll | gloo | fake (torch's backend that does nothing; it
  overrides the ProcessGroup, so it skips torch's dispatcher)
Prints "BACKEND PATH us" for three paths:
  dist     dist.all_reduce(t)
  pg       the ProcessGroup's allreduce([t], opts).wait() (torch's dispatcher)
  backend  the backend's own allreduce([t]).wait()
Run it once per backend and round, interleaved (docs/torch.md).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def per_call(f, target, trials):
    for _ in range(100):
        f()
    n = 1
    while True:
        s = time.perf_counter()
        for _ in range(n):
            f()
        if time.perf_counter() - s >= target:
            break
        n *= 2
    res = []
    for _ in range(trials):
        s = time.perf_counter()
        for _ in range(n):
            f()
        res.append((time.perf_counter() - s) / n * 1e6)
    return statistics.median(res)


def main():
    be = sys.argv[1]
    target = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    trials = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    if be == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0,
                                world_size=1)
    else:
        if be == "rcoll":
            import rcoll_torch  # noqa: F401  (registers the backend)
        dist.init_process_group(be, rank=0, world_size=1)
    t = torch.ones(2, dtype=torch.float32)
    pg = dist.group.WORLD
    bk = pg._get_backend(torch.device("cpu"))
    opts = dist.AllreduceOptions()
    for name, f in (("dist", lambda: dist.all_reduce(t)),
                    ("pg", lambda: pg.allreduce([t], opts).wait()),
                    ("backend", lambda: bk.allreduce([t]).wait())):
        print(f"{be} {name} {per_call(f, target, trials):.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
