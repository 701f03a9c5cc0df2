"""Runs a function on N spawned ranks, each with the rcoll default group
and a gloo group over the same ranks (the reference).

run() starts fresh processes for each call. pooled() runs on a pool of
`world` processes kept for the whole pytest session (one per world size):
each call still gets a new store, a new rcoll default group and a new gloo
group, destroyed after it, but not a new interpreter and `import torch`,
which is most of a small test's time. A pool whose call failed or timed
out is killed, and the next call starts a new one; at the end of the
session (conftest.py) every pool is told to stop, and a rank that then
exits other than cleanly fails the session."""
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

    torch.set_num_threads(1)
    _call(rank, world, port, fn, args, timeout_s, queue)


def _call(rank, world, port, fn, args, timeout_s, queue):
    """One call of fn on this rank, with its own groups; reports on queue."""
    import torch.distributed as dist

    import rcoll_torch  # noqa: F401  (registers "rcoll")

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
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
    # to itself, or another socket take it, and the ranks would not reach
    # the store before the timeout.)
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


def _pool_entry(rank, world, tasks, queue):
    import torch

    torch.set_num_threads(1)
    while True:
        task = tasks.get()
        if task is None:
            return
        port, fn, args, timeout_s = task
        _call(rank, world, port, fn, args, timeout_s, queue)


_pools = {}


def _pool(world):
    if world not in _pools:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        tasks = [ctx.Queue() for _ in range(world)]
        procs = [ctx.Process(target=_pool_entry,
                             args=(r, world, tasks[r], queue))
                 for r in range(world)]
        for p in procs:
            p.start()
        _pools[world] = (procs, tasks, queue)
    return _pools[world]


def _kill_pool(world):
    procs, _, _ = _pools.pop(world)
    for p in procs:
        p.kill()
        p.join(timeout=10)


def pooled(fn, world, *args, timeout_s=120):
    """As run(fn, world, *args), on the session's pool of `world` ranks."""
    import torch.distributed as dist

    procs, tasks, queue = _pool(world)
    store = dist.TCPStore("127.0.0.1", 0, world, True,
                          timeout=datetime.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    for t in tasks:
        t.put((store.port, fn, args, timeout_s))
    results, errors = {}, []
    for _ in range(world):
        try:
            # (the first call also waits for the pool's import torch)
            rank, kind, val = queue.get(timeout=timeout_s + 60)
        except queue_mod.Empty:
            silent = sorted(set(range(world)) - set(results))
            errors.append(f"no report from rank(s) {silent} within "
                          f"{timeout_s + 60} s")
            break
        if kind == "ok":
            results[rank] = val
        else:
            errors.append(f"rank {rank}:\n{val}")
    dead = [r for r, p in enumerate(procs) if not p.is_alive()]
    if dead:
        errors.append(f"pool rank(s) {dead} exited: status "
                      f"{[procs[r].exitcode for r in dead]}")
    if errors:
        _kill_pool(world)
        raise AssertionError("\n".join(errors))
    return [results[r] for r in range(world)]


def stop_pools():
    """Ends every pool; returns the ranks that did not exit cleanly."""
    bad = []
    for world in list(_pools):
        procs, tasks, _ = _pools.pop(world)
        for t in tasks:
            t.put(None)
        for r, p in enumerate(procs):
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                bad.append(f"pool of {world}: rank {r} did not exit")
            elif p.exitcode != 0:
                bad.append(f"pool of {world}: rank {r} exited with status "
                           f"{p.exitcode}")
    return bad
