"""A rank that dies or goes silent: the others get an exception naming it,
within the timeout, never a hang."""
import os
import time

import pytest
import torch
import torch.distributed as dist

import harness


def fam_dies(rank, world, gloo, victim):
    t = torch.ones(1000)
    dist.all_reduce(t)
    dist.barrier()
    if rank == victim:
        os._exit(3)
    t0 = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(t)
            time.sleep(0.05)
        return ("no error", 0.0)
    except dist.DistBackendError as e:
        return (str(e), time.monotonic() - t0)
    finally:
        # the communicator is poisoned: leave without a goodbye collective
        dist.destroy_process_group()


def test_dead_rank_named():
    world, victim = 4, 2
    res = harness.run(fam_dies, world, victim, timeout_s=30, dies={victim})
    for r in range(world):
        if r == victim:
            continue
        msg, took = res[r]
        assert "rank 2" in msg, (r, msg)
        assert took < 15, (r, took, msg)
        print(f"rank {r}: {took:.1f} s: {msg.splitlines()[0][:200]}")


def fam_silent(rank, world, gloo):
    dist.barrier()
    if rank == 1:
        time.sleep(7)  # alive, but never joins the next collective
        return ("silent", 0.0)
    t0 = time.monotonic()
    w = dist.all_reduce(torch.ones(4), async_op=True)
    assert not w.is_completed()
    try:
        w.wait()
        return ("no error", 0.0)
    except dist.DistBackendError as e:
        msg, took = str(e), time.monotonic() - t0
    # a future asked for only now (the backend makes it on demand) holds
    # the same error
    try:
        w.get_future().wait()
        return ("the future of a failed work completed", 0.0)
    except Exception as e:  # the future's error type differs by version
        assert msg.splitlines()[0] in str(e), (msg, str(e))
    return (msg, took)


@pytest.mark.parametrize("who", ["rcoll", "watchdog"])
def test_silent_rank_times_out(who, monkeypatch):
    """rcoll's own timeout names the silent rank, the step and the root
    cause (rank 1, alive but not in the call); with RCOLL_TIMEOUT longer
    than the group's timeout, the backend's watchdog aborts 3 s past the
    group's timeout instead."""
    if who == "watchdog":
        monkeypatch.setenv("RCOLL_TIMEOUT", "60")
    res = harness.run(fam_silent, 2, timeout_s=3)
    msg, took = res[0]
    print(f"rank 0 ({who}): {took:.1f} s: {msg.splitlines()[0][:300]}")
    if who == "rcoll":
        assert "no progress" in msg and "waiting for" in msg, msg
        assert "rank 1" in msg, msg
        assert "root cause: rank 1 " in msg and "has not called" in msg, msg
        assert 2.5 < took < 6, (took, msg)
    else:
        assert "timed out after 3000 ms" in msg, msg
        assert 5.5 < took < 10, (took, msg)
