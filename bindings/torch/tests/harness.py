"""Runs a function on N spawned ranks, each with the rcoll default group
and a gloo group over the same ranks (the reference)."""
import datetime
import os
import queue as queue_mod
import socket
import traceback

import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, fn, args, timeout_s, queue):
    import torch
    import torch.distributed as dist

    import rcoll_torch  # noqa: F401  (registers "rcoll")

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    try:
        timeout = datetime.timedelta(seconds=timeout_s)
        # the parent's store (run): already listening when we start
        store = dist.TCPStore("127.0.0.1", port, world, False,
                              timeout=timeout)
        dist.init_process_group(
            "rcoll", store=store, rank=rank, world_size=world,
            timeout=timeout)
        gloo = dist.new_group(backend="gloo")
        res = fn(rank, world, gloo, *args)
        if dist.is_initialized():
            dist.destroy_process_group()
        queue.put((rank, "ok", res))
    except BaseException:  # noqa: BLE001  (reported to the parent)
        queue.put((rank, "error", traceback.format_exc()))


def run(fn, world, *args, timeout_s=120, dies=()):
    """fn(rank, world, gloo_group, *args) on `world` ranks; returns the list
    of their return values (None for the ranks in `dies`, which are expected
    to exit without reporting), or raises with every failing rank's
    traceback."""
    import torch.distributed as dist

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    # The store lives here, listening on a port the kernel picked before any
    # rank starts. (With free_port() and rank 0 binding it later, a rank's
    # retried connect could be given that very port as its own and connect
    # to itself, or another socket take it: CI saw a rank fail to reach the
    # store for 120 s once, in test_large[2].)
    store = dist.TCPStore("127.0.0.1", 0, world, True,
                          timeout=datetime.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    port = store.port
    procs = [ctx.Process(target=_entry,
                         args=(r, world, port, fn, args, timeout_s, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results, errors, reported = {}, [], set()
    try:
        for _ in range(world - len(dies)):
            try:
                rank, kind, val = queue.get(timeout=timeout_s + 60)
            except queue_mod.Empty:
                silent = sorted(set(range(world)) - set(dies) - reported)
                errors.append(f"no report from rank(s) {silent} within "
                              f"{timeout_s + 60} s")
                break
            reported.add(rank)
            if kind == "ok":
                results[rank] = val
            else:
                errors.append(f"rank {rank}:\n{val}")
    finally:
        for r, p in enumerate(procs):
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                errors.append(f"rank {r} did not exit")
            elif r not in dies and p.exitcode != 0:
                # a rank that reported ok and then crashed (in destroy,
                # at exit) is a failure too
                errors.append(f"rank {r} exited with status {p.exitcode}"
                              + (" after reporting ok" if r in results
                                 else ""))
    if errors:
        raise AssertionError("\n".join(errors))
    return [results.get(r) for r in range(world)]
