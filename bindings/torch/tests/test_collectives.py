"""Every override of the rcoll backend against gloo in the same job.

Inputs are small integers (in every dtype) so that sums, products, minima
and maxima are exact whatever the reduction order: rcoll and gloo must then
agree bit for bit. AVG (gloo has none) is checked against gloo's SUM
divided by the group size (exact for 2 and 4 ranks; integers truncate).
"""
import time

import pytest
import torch
import torch.distributed as dist

import harness

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32,
          torch.int64]
SIZES = [0, 1, 7, 1000, 65539]
BIG = 1 << 22
WORLDS = [2, 4]


def data(rank, n, dtype, seed, lo=-4, hi=5):
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    return torch.randint(lo, hi, (n,), generator=g).to(dtype)


def same(got, want, what):
    if got.dtype != want.dtype or not torch.equal(got, want):
        bad = (got != want).nonzero()
        first = bad[0].item() if bad.numel() else -1
        raise AssertionError(
            f"{what}: rcoll differs from the reference at {bad.numel()} "
            f"elements, first at {first}: {got.flatten()[:6].tolist()} vs "
            f"{want.flatten()[:6].tolist()}")


def finish(work, async_op, outputs=None):
    """Waits for an async work; checks its future holds the outputs."""
    if not async_op:
        assert work is None
        return
    work.wait()
    assert work.is_completed()
    fut = work.get_future().wait()
    if outputs is not None:
        assert len(fut) == len(outputs)
        for f, o in zip(fut, outputs):
            assert f.data_ptr() == o.data_ptr()


def reference_reduce(x, op, world, gloo):
    """op over the ranks of x, by gloo; AVG as gloo's SUM / world."""
    ref = x.clone()
    dist.all_reduce(ref, op=R.SUM if op == R.AVG else op, group=gloo)
    if op == R.AVG:
        if ref.is_floating_point():
            ref = (ref.double() / world).to(x.dtype)
        else:
            ref = torch.div(ref, world, rounding_mode="trunc")
    return ref


OPS = [R.SUM, R.MIN, R.MAX, R.PRODUCT, R.AVG]


def fam_allreduce(rank, world, gloo, sizes):
    seed = 0
    for dt in DTYPES:
        for n in sizes:
            for op in OPS:
                for async_op in (False, True):
                    seed += 1
                    lo, hi = (-2, 3) if op == R.PRODUCT else (-4, 5)
                    x = data(rank, n, dt, seed, lo, hi)
                    got = x.clone()
                    w = dist.all_reduce(got, op=op, async_op=async_op)
                    finish(w, async_op, [got])
                    same(got, reference_reduce(x, op, world, gloo),
                         f"all_reduce {op} {dt} n={n} async={async_op}")
    return seed


def fam_bcast_reduce(rank, world, gloo, sizes):
    seed = 0
    for dt in DTYPES:
        for n in sizes:
            for root in range(world):
                for async_op in (False, True):
                    seed += 1
                    x = data(rank, n, dt, seed)
                    got = x.clone()
                    finish(dist.broadcast(got, root, async_op=async_op),
                           async_op, [got])
                    ref = x.clone()
                    dist.broadcast(ref, root, group=gloo)
                    same(got, ref, f"broadcast {dt} n={n} root={root}")

                    got = x.clone()
                    finish(dist.reduce(got, root, op=R.SUM,
                                       async_op=async_op), async_op, [got])
                    ref = reference_reduce(x, R.SUM, world, gloo)
                    if rank == root:
                        same(got, ref, f"reduce {dt} n={n} root={root}")
    return seed


def fam_allgather(rank, world, gloo, sizes):
    seed = 0
    for dt in DTYPES:
        for n in sizes:
            for async_op in (False, True):
                seed += 1
                x = data(rank, n, dt, seed)
                outs = [torch.full((n,), -7).to(dt) for _ in range(world)]
                finish(dist.all_gather(outs, x, async_op=async_op),
                       async_op, outs)
                refs = [torch.empty(n, dtype=dt) for _ in range(world)]
                dist.all_gather(refs, x, group=gloo)
                for r in range(world):
                    same(outs[r], refs[r], f"all_gather {dt} n={n} [{r}]")

                flat = torch.full((world * n,), -7).to(dt)
                finish(dist.all_gather_into_tensor(flat, x,
                                                   async_op=async_op),
                       async_op, [flat])
                same(flat, torch.cat(refs), f"all_gather_into_tensor {dt} "
                     f"n={n}")
    return seed


def fam_reduce_scatter(rank, world, gloo, sizes):
    seed = 0
    for dt in DTYPES:
        for n in sizes:
            for op in (R.SUM, R.MIN, R.MAX, R.AVG):
                for async_op in (False, True):
                    seed += 1
                    x = data(rank, world * n, dt, seed)
                    ref = reference_reduce(x, op, world, gloo)
                    ref = ref[rank * n:(rank + 1) * n]
                    out = torch.full((n,), -7).to(dt)
                    finish(dist.reduce_scatter_tensor(
                        out, x, op=op, async_op=async_op), async_op, [out])
                    same(out, ref, f"reduce_scatter_tensor {op} {dt} n={n}")

                    out = torch.full((n,), -7).to(dt)
                    ins = list(x.clone().chunk(world)) if n else \
                        [torch.empty(0, dtype=dt) for _ in range(world)]
                    finish(dist.reduce_scatter(out, ins, op=op,
                                               async_op=async_op),
                           async_op, [out])
                    same(out, ref, f"reduce_scatter {op} {dt} n={n}")
    return seed


def fam_coalesced(rank, world, gloo, sizes):
    seed = 0
    for dt in DTYPES:
        for async_op in (False, True):
            seed += 1
            xs = [data(rank, n, dt, seed + i) for i, n in enumerate(sizes)]
            got = [x.clone() for x in xs]
            with dist._coalescing_manager(async_ops=async_op) as cm:
                for g in got:
                    dist.all_reduce(g)
            if async_op:
                cm.wait()
            for x, g in zip(xs, got):
                same(g, reference_reduce(x, R.SUM, world, gloo),
                     f"coalesced all_reduce {dt} n={x.numel()}")

            outs = [torch.full((world * x.numel(),), -7).to(dt) for x in xs]
            with dist._coalescing_manager(async_ops=async_op) as cm:
                for o, x in zip(outs, xs):
                    dist.all_gather_into_tensor(o, x)
            if async_op:
                cm.wait()
            for o, x in zip(outs, xs):
                refs = [torch.empty_like(x) for _ in range(world)]
                dist.all_gather(refs, x, group=gloo)
                same(o, torch.cat(refs), f"coalesced all_gather_into_tensor "
                     f"{dt} n={x.numel()}")

            ins = [data(rank, world * n, dt, seed + 50 + i)
                   for i, n in enumerate(sizes)]
            outs = [torch.full((n,), -7).to(dt) for n in sizes]
            with dist._coalescing_manager(async_ops=async_op) as cm:
                for o, i in zip(outs, ins):
                    dist.reduce_scatter_tensor(o, i)
            if async_op:
                cm.wait()
            for o, i, n in zip(outs, ins, sizes):
                ref = reference_reduce(i, R.SUM, world, gloo)
                same(o, ref[rank * n:(rank + 1) * n],
                     f"coalesced reduce_scatter_tensor {dt} n={n}")
    return seed


def fam_big(rank, world, gloo):
    for dt in (torch.float32, torch.bfloat16):
        x = data(rank, BIG, dt, 7)
        got = x.clone()
        dist.all_reduce(got)
        same(got, reference_reduce(x, R.SUM, world, gloo),
             f"all_reduce {dt} n=2^22")
        got = x.clone()
        dist.broadcast(got, world - 1)
        ref = x.clone()
        dist.broadcast(ref, world - 1, group=gloo)
        same(got, ref, f"broadcast {dt} n=2^22")
        part = x[:BIG // world].clone()
        flat = torch.empty(BIG, dtype=dt)
        w = dist.all_gather_into_tensor(flat, part, async_op=True)
        w.wait()
        refs = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(refs, part, group=gloo)
        same(flat, torch.cat(refs), f"all_gather_into_tensor {dt} n=2^22")
        out = torch.empty(BIG // world, dtype=dt)
        dist.reduce_scatter_tensor(out, x)
        ref = reference_reduce(x, R.SUM, world, gloo)
        same(out, ref.chunk(world)[rank], f"reduce_scatter_tensor {dt} 2^22")
    return True


def fam_misc(rank, world, gloo):
    # other dtypes: bytes moved for any dtype, reductions where mapped
    for dt in (torch.float64, torch.int8, torch.uint8, torch.complex64):
        x = data(rank, 33, torch.float64 if dt.is_complex else dt, 3)
        x = x.to(dt) if not dt.is_complex else torch.complex(
            x.float(), -x.float())
        got = x.clone()
        dist.all_reduce(got)
        ref = x.clone()
        dist.all_reduce(ref, group=gloo)
        same(got, ref, f"all_reduce {dt}")
    b = torch.tensor([rank == 0, False, True, rank == 1])
    got = b.clone()
    dist.all_reduce(got, op=R.SUM)           # logical or
    same(got, torch.tensor([True, False, True, True]), "all_reduce bool SUM")
    got = b.clone()
    dist.all_reduce(got, op=R.MIN)           # logical and
    same(got, torch.tensor([False, False, True, False]), "all_reduce bool MIN")

    # non-contiguous tensors, in and out
    base = data(rank, 64, torch.float32, 11).view(8, 8)
    t = base.t()
    assert not t.is_contiguous()
    got = t.clone(memory_format=torch.preserve_format)
    got = t.clone().t().contiguous().t()    # a transposed (strided) copy
    dist.all_reduce(got)
    same(got, reference_reduce(t.contiguous(), R.SUM, world, gloo),
         "all_reduce non-contiguous")
    col = torch.zeros(8, 8)
    view = col[:, 3]
    if rank == 0:
        view.copy_(torch.arange(8.0))
    dist.broadcast(view, 0)
    same(col[:, 3], torch.arange(8.0), "broadcast strided view")
    assert col.sum().item() == torch.arange(8.0).sum().item()
    outs = [torch.zeros(4, 4).t() for _ in range(world)]
    dist.all_gather(outs, torch.full((4, 4), float(rank)).t())
    for r in range(world):
        same(outs[r], torch.full((4, 4), float(r)), "all_gather strided out")

    # barrier, send/recv round a ring (even ranks send first)
    dist.barrier()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for n in (0, 5, 300000):
        s = data(rank, n, torch.float32, 21)
        r = torch.empty(n)
        if rank % 2 == 0:
            dist.send(s, nxt)
            dist.recv(r, prv)
        else:
            dist.recv(r, prv)
            dist.send(s, nxt)
        same(r, data(prv, n, torch.float32, 21), f"send/recv n={n}")
    reqs = [dist.isend(torch.full((3,), float(rank)), nxt),
            dist.irecv(r := torch.empty(3), prv)]
    for q in reqs:
        q.wait()
    same(r, torch.full((3,), float(prv)), "isend/irecv")
    r2 = torch.empty(4, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, torch.arange(4) * (rank + 1), nxt),
           dist.P2POp(dist.irecv, r2, prv)]
    if rank % 2:
        ops.reverse()
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    same(r2, torch.arange(4) * (prv + 1), "batch_isend_irecv")

    # all_gather_coalesced: outputs[r][i] = input i of rank r; inputs of
    # several shapes (one operation underneath; torch wants one dtype)
    ins = [data(rank, 5, torch.float32, 51).view(5),
           data(rank, 12, torch.float32, 52).view(3, 4),
           torch.empty(0, dtype=torch.float32),
           data(rank, 9, torch.float32, 53).view(3, 3).t()]
    outs = [[torch.full_like(t, -1) for t in ins] for _ in range(world)]
    w = dist.all_gather_coalesced(outs, ins, async_op=True)
    w.wait()
    for i, t in enumerate(ins):
        refs = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(refs, t.contiguous(), group=gloo)
        for r in range(world):
            same(outs[r][i], refs[r], f"all_gather_coalesced [{r}][{i}]")

    # gather and scatter (point to point underneath), each root
    for root in range(world):
        for n in (0, 3, 70000):
            x = data(rank, n, torch.int64, 31 + root)
            outs = [torch.full((n,), -1, dtype=torch.int64)
                    for _ in range(world)] if rank == root else None
            dist.gather(x, outs, dst=root)
            refs = [torch.empty(n, dtype=torch.int64) for _ in range(world)] \
                if rank == root else None
            dist.gather(x, refs, dst=root, group=gloo)
            if rank == root:
                for r in range(world):
                    same(outs[r], refs[r], f"gather n={n} root={root} [{r}]")
            ins = [data(r, n, torch.float32, 41 + root) for r in
                   range(world)] if rank == root else None
            out = torch.full((n,), -1.0)
            w = dist.scatter(out, ins, src=root, async_op=True)
            w.wait()
            same(out, data(rank, n, torch.float32, 41 + root),
                 f"scatter n={n} root={root}")
    got = [None]
    dist.scatter_object_list(got, [f"to {r}" for r in range(world)]
                             if rank == 1 else None, src=1)
    assert got == [f"to {rank}"], got
    got = [None] * world if rank == 0 else None
    dist.gather_object(("obj", rank), got, dst=0)
    if rank == 0:
        assert got == [("obj", r) for r in range(world)], got

    # object collectives ride on all_gather / broadcast
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    assert objs == [{"rank": r, "s": "x" * r} for r in range(world)], objs
    lst = [f"from {rank}", rank] if rank == 1 else [None, None]
    dist.broadcast_object_list(lst, src=1)
    assert lst == ["from 1", 1], lst

    # clear errors, raised when the call is made
    errs = []
    for f in (lambda: dist.all_reduce(torch.ones(2), op=R.BXOR),
              lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool),
                                      op=R.AVG),
              lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)),
              lambda: dist.all_to_all_single(torch.ones(world + 1),
                                             torch.ones(world + 1)),
              lambda: dist.send(torch.ones(1), nxt, tag=-3)):
        try:
            f()
            errs.append("no error")
        except (RuntimeError, ValueError) as e:
            errs.append(str(e).splitlines()[0])
    for e in errs:
        assert e.startswith("rcoll "), errs

    # a new group of a subset gets its own communicator
    sub = dist.new_group([0, world - 1], backend="rcoll")
    if rank in (0, world - 1):
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=sub)
        same(t, torch.tensor([float(world + 1)]), "all_reduce on a subgroup")
    dist.barrier()
    return errs


def fam_alltoall_p2p(rank, world, gloo):
    # all_to_all_single, equal splits, every dtype, against gloo
    for dt in DTYPES + [torch.float64, torch.uint8]:
        for rows in (0, 1, 3, 5000):
            x = data(rank, world * rows * 2, dt, 61).view(world * rows, 2)
            got = torch.full_like(x, -1)
            w = dist.all_to_all_single(got, x, async_op=True)
            w.wait()
            ref = torch.empty_like(x)
            dist.all_to_all_single(ref, x, group=gloo)
            same(got, ref, f"all_to_all_single {dt} rows={rows}")
    # uneven splits (zeros included), the same on every rank as gloo's;
    # then splits equal and in order on rank 0 only (1 row to and from
    # everyone), 3 rows between the others: every rank must still call
    # the same collective
    def split(src, dst):
        return (src * 3 + dst * 5 + 1) % 4 * 7  # 0, 7, 14 or 21 rows
    def split2(src, dst):
        return 1 if src == 0 or dst == 0 else 3
    for fn, cols, seed, what in ((split, 3, 62, "uneven splits"),
                                 (split2, 2, 65, "equal splits on rank 0 only")):
        ins = [fn(rank, d) for d in range(world)]
        outs = [fn(s_, rank) for s_ in range(world)]
        x = data(rank, sum(ins) * cols, torch.float32, seed).view(sum(ins), cols)
        got = torch.full((sum(outs), cols), -1.0)
        dist.all_to_all_single(got, x, outs, ins)
        ref = torch.empty_like(got)
        dist.all_to_all_single(ref, x, outs, ins, group=gloo)
        same(got, ref, f"all_to_all_single, {what}")
    # all_to_all (lists of tensors, shapes by pair; gloo has no list form:
    # the expected value is what each sender put there)
    def blk(src, dst):
        return data(src * world + dst, split(src, dst) + 1, torch.int64, 63)
    outs_l = [torch.full((split(s_, rank) + 1,), -1, dtype=torch.int64)
              for s_ in range(world)]
    dist.all_to_all(outs_l, [blk(rank, d) for d in range(world)])
    for s_ in range(world):
        same(outs_l[s_], blk(s_, rank), f"all_to_all from {s_}")

    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # tags: rank 0 sends tags 1, 2, 3; rank 1 receives them as 3, 2, 1
    if rank < 2:
        peer = 1 - rank
        sizes = {1: 10, 2: 200000, 3: 0}
        if rank == 0:
            ws = [dist.isend(data(10 + t, n, torch.float32, 64), peer, tag=t)
                  for t, n in sizes.items()]
        else:
            bufs = {t: torch.full((n,), -1.0) for t, n in sizes.items()}
            ws = [dist.irecv(bufs[t], peer, tag=t) for t in (3, 2, 1)]
        for w in ws:
            w.wait()
        if rank == 1:
            for t, n in sizes.items():
                same(bufs[t], data(10 + t, n, torch.float32, 64),
                     f"recv tag {t} (posted out of order)")
        dist.send(torch.tensor([7.0]), peer, tag=9) if rank == 0 else None
        if rank == 1:
            r = torch.zeros(1)
            dist.recv(r, 0, tag=9)
            same(r, torch.tensor([7.0]), "blocking send/recv with a tag")
    # every rank sends 16 MiB round the ring before receiving: isend/irecv
    # and batch_isend_irecv (pipeline parallelism) must not deadlock
    n = 4 << 20
    s_ = data(rank, n, torch.float32, 65)
    r = torch.empty(n)
    ws = [dist.isend(s_, nxt, tag=5)]
    ws.append(dist.irecv(r, prv, tag=5))
    for w in ws:
        w.wait()
    same(r, data(prv, n, torch.float32, 65), "ring of 16 MiB isend/irecv")
    r2 = torch.empty(n)
    ops = [dist.P2POp(dist.isend, s_, nxt), dist.P2POp(dist.irecv, r2, prv)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    same(r2, data(prv, n, torch.float32, 65), "batch_isend_irecv 16 MiB ring")
    # an asynchronous collective must not hold up its caller: rank 0's
    # async all-reduce is followed by a send that rank 1 waits for before
    # it joins the all-reduce (run in the caller's thread, as a faster
    # path for small calls might, it would deadlock)
    x = data(rank, 3, torch.float32, 66)
    got = x.clone()
    if rank == 0:
        w = dist.all_reduce(got, async_op=True)
        dist.send(torch.tensor([3.0]), 1, tag=11)
        w.wait()
    elif rank == 1:
        r = torch.zeros(1)
        dist.recv(r, 0, tag=11)
        dist.all_reduce(got)
    else:
        dist.all_reduce(got)
    same(got, reference_reduce(x, R.SUM, world, gloo), "async all_reduce "
         "before a send its peer waits for")
    # a blocking small call after a queued asynchronous one waits its turn
    # (the same order on every rank, or rcoll reports a mismatch)
    big, small = data(rank, 1 << 18, torch.float32, 67), x.clone()
    gb, gs = big.clone(), small.clone()
    w = dist.all_reduce(gb, async_op=True)
    dist.all_reduce(gs, op=R.MAX)
    w.wait()
    same(gb, reference_reduce(big, R.SUM, world, gloo), "queued async 1 MiB")
    same(gs, reference_reduce(small, R.MAX, world, gloo), "blocking after it")
    dist.barrier()


def fam_run_order(rank, world, gloo):
    """Who runs a queued collective: a caller's wait() runs the queue up to
    its own work; the worker runs what nobody waits for."""
    # an async collective that nobody waits for before a receive whose
    # sender sends after the collective: the worker must start it (run
    # only inside wait(), rank 0 would wait in recv for rank 1, rank 1 in
    # the all-reduce for rank 0: a deadlock)
    a = data(rank, 1000, torch.float32, 21)
    got = a.clone()
    x = torch.zeros(4)
    if rank == 0:
        w = dist.all_reduce(got, async_op=True)
        dist.recv(x, 1)
        w.wait()
        same(x, torch.arange(4.0), "recv while the all-reduce runs")
    else:
        dist.all_reduce(got)
        if rank == 1:
            dist.send(torch.arange(4.0), 0)
    same(got, reference_reduce(a, R.SUM, world, gloo), "async, then send")
    # completed through its future only (DDP's hooks): no Work.wait()
    b = data(rank, 77, torch.float64, 22)
    got = b.clone()
    fut = dist.all_reduce(got, async_op=True).get_future().then(
        lambda f: f.value()[0] * 2)
    same(fut.wait(), reference_reduce(b, R.SUM, world, gloo) * 2,
         "future callback without wait")
    # waiting for the later of two runs the earlier first, in order; the
    # ranks wait in different orders
    c, d = data(rank, 5000, torch.int32, 23), data(rank, 3, torch.int64, 24)
    gc, gd = c.clone(), d.clone()
    w1 = dist.all_reduce(gc, op=R.MAX, async_op=True)
    w2 = dist.all_reduce(gd, op=R.MIN, async_op=True)
    if rank % 2:
        w1.wait()
        w2.wait()
    else:
        w2.wait()
        assert w1.is_completed(), "the earlier work did not run first"
        w1.wait()
    same(gc, reference_reduce(c, R.MAX, world, gloo), "first of two")
    same(gd, reference_reduce(d, R.MIN, world, gloo), "second of two")
    # many synchronous calls (run by their callers) between async ones
    e = data(rank, 9, torch.float32, 25)
    ws, outs = [], []
    for i in range(200):
        t = e.clone() + i
        if i % 7 == 0:
            ws.append(dist.all_reduce(t, async_op=True))
        else:
            dist.all_reduce(t)
        outs.append(t)
    for w in ws:
        w.wait()
    for i, t in enumerate(outs):
        same(t, reference_reduce(e + i, R.SUM, world, gloo), f"call {i}")
    dist.barrier()


# default: callers run their works; 0: the worker starts each at once and
# races the callers' wait() for it
@pytest.mark.parametrize("defer", [None, "0"])
def test_run_order(defer, monkeypatch):
    if defer is not None:
        monkeypatch.setenv("RCOLL_TORCH_DEFER_US", defer)
    harness.run(fam_run_order, 3)


def worker_wakeups():
    """Voluntary context switches of this process's rcoll worker threads."""
    import glob
    n = 0
    for t in glob.glob("/proc/self/task/*"):
        try:
            if open(t + "/comm").read().strip() != "rcoll-worker":
                continue
            st = open(t + "/status").read()
        except OSError:
            continue
        n += int(st.split("\nvoluntary_ctxt_switches:")[1].split()[0])
    return n


def fam_worker_quiet(rank, world, gloo):
    """Synchronous collectives run by their callers leave the worker
    asleep: it looks at the queue at most about once per
    RCOLL_TORCH_DEFER_US (1 ms). A worker that went idle at once when it
    found a caller running a work would be woken by every next call's
    enqueue, a context switch per call: the wake-ups are counted."""
    a = data(rank, 8192, torch.float32, 31)
    want = reference_reduce(a, R.SUM, world, gloo)
    got = a.clone()
    for _ in range(50):
        got.copy_(a)
        dist.all_reduce(got)
    # phases of as many calls on every rank (a worker that wakes per call
    # may do so in some phases and not in others)
    worst, calls = None, 4000
    for phase in range(5):
        w0, t0 = worker_wakeups(), time.monotonic()
        for _ in range(calls):
            got.copy_(a)
            dist.all_reduce(got)
        ms = (time.monotonic() - t0) * 1e3
        wakes = worker_wakeups() - w0
        same(got, want, "all-reduce while counting wake-ups")
        if worst is None or wakes - 3 * ms > worst[0] - 3 * worst[2]:
            worst = (wakes, calls, ms)
    wakes, calls, ms = worst
    print(f"rank {rank}: worst phase: {wakes} worker wake-ups in {calls} "
          f"calls, {ms:.0f} ms", flush=True)
    # at most two per defer period (the look, then the enqueue that ends
    # its idle wait), with room for a slow machine
    assert wakes <= 3 * ms + 20, (
        f"rank {rank}: the worker woke {wakes} times in {calls} "
        f"synchronous calls ({ms:.0f} ms)")
    dist.barrier()


def test_worker_quiet():
    harness.run(fam_worker_quiet, 2)


@pytest.mark.parametrize("world", WORLDS)
def test_alltoall_p2p(world):
    harness.pooled(fam_alltoall_p2p, world)


@pytest.mark.parametrize("world", WORLDS)
def test_allreduce(world):
    harness.pooled(fam_allreduce, world, SIZES)


@pytest.mark.parametrize("world", WORLDS)
def test_broadcast_reduce(world):
    harness.pooled(fam_bcast_reduce, world, SIZES)


@pytest.mark.parametrize("world", WORLDS)
def test_allgather(world):
    harness.pooled(fam_allgather, world, SIZES)


@pytest.mark.parametrize("world", WORLDS)
def test_reduce_scatter(world):
    harness.pooled(fam_reduce_scatter, world, SIZES)


@pytest.mark.parametrize("world", WORLDS)
def test_coalesced(world):
    harness.pooled(fam_coalesced, world, SIZES)


@pytest.mark.parametrize("world", WORLDS)
def test_large(world):
    harness.pooled(fam_big, world)


@pytest.mark.parametrize("world", WORLDS)
def test_misc(world):
    errs = harness.pooled(fam_misc, world)[0]
    print("\n".join(errs))
