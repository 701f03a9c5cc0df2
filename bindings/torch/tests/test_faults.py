"""A rank that dies or goes silent: the others get an exception naming it,
within the timeout, never a hang."""
import datetime
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


def fam_destroy_pending(rank, world, gloo, what):
    """Rank 0 leaves an operation its peer never joins pending (an
    unmatched irecv, or an async all-reduce), then destroys the group;
    rank 1 stays alive and silent, then destroys it too."""
    t = torch.zeros(1000)
    w = None
    if rank == 0:
        if what == "irecv":
            w = dist.irecv(t, src=1, tag=7)
        else:
            w = dist.all_reduce(t, async_op=True)
        time.sleep(0.2)
    else:
        time.sleep(6.0)  # alive and silent while rank 0 destroys
    t0 = time.monotonic()
    dist.destroy_process_group()
    took = time.monotonic() - t0
    err = ""
    if w is not None:
        try:
            w.wait()
            err = "the pending work completed"
        except Exception as e:  # noqa: BLE001  (its type is checked below)
            err = f"{type(e).__name__}: {e}"
    return (took, err)


@pytest.mark.parametrize("what", ["irecv", "allreduce"])
def test_destroy_with_pending_work(what):
    """destroy_process_group returns in about a second on every rank,
    whatever the peer does; the pending work fails with a clear error (as
    with gloo, or NCCL's abort), not after the group's timeout."""
    res = harness.run(fam_destroy_pending, 2, what, timeout_s=60)
    for r, (took, err) in enumerate(res):
        print(f"rank {r}: destroy took {took:.2f} s {err[:200]}")
        assert took < 5, (r, took)
    took, err = res[0]
    assert "shut down" in err or "destroyed" in err, err


def fam_wait_timeout(rank, world, gloo):
    t = torch.full((1000,), float(rank + 1))
    if rank == 1:
        time.sleep(4)  # late: joins after rank 0's wait gave up
        dist.all_reduce(t)
        time.sleep(4)  # alive and silent while rank 0's irecv waits
        return ("late", 0.0, 0.0)
    w = dist.all_reduce(t, async_op=True)
    t0 = time.monotonic()
    try:
        w.wait(timeout=datetime.timedelta(seconds=2))
        msg = "no timeout"
    except Exception as e:  # noqa: BLE001  (c10d's timeout error)
        msg = str(e)
    took = time.monotonic() - t0
    # the operation goes on: once rank 1 joins, a plain wait completes it
    w.wait()
    # a point-to-point receive nobody answers: the same bound
    r = dist.irecv(torch.zeros(4), src=1, tag=3)
    t1 = time.monotonic()
    try:
        r.wait(timeout=datetime.timedelta(seconds=2))
        pmsg = "no timeout"
    except Exception as e:  # noqa: BLE001
        pmsg = str(e)
    ptook = time.monotonic() - t1
    assert torch.equal(t, torch.full((1000,), 3.0)), t[:4]
    return (msg + " | " + pmsg, took, ptook)


def test_wait_timeout():
    """work.wait(timeout) returns or raises within the timeout (c10d's
    contract), for a collective and for a receive; the collective still
    completes later."""
    res = harness.run(fam_wait_timeout, 2, timeout_s=60)
    msg, took, ptook = res[0]
    print(f"rank 0: wait(2 s) raised after {took:.2f} s, irecv's after "
          f"{ptook:.2f} s: {msg[:200]}")
    assert "no timeout" not in msg, msg
    assert took < 3 and ptook < 3, (took, ptook)
