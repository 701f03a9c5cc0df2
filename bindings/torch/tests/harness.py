"""Runs a function on N spawned ranks, each with the rcoll default group
and a gloo group over the same ranks (the reference)."""
import datetime
import os
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
        dist.init_process_group(
            "rcoll", rank=rank, world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s))
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
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry,
                         args=(r, world, port, fn, args, timeout_s, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results, errors = {}, []
    try:
        for _ in range(world - len(dies)):
            rank, kind, val = queue.get(timeout=timeout_s + 60)
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
