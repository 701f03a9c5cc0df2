"""An mpi4py program (numpy buffers) that prints a digest of what its
collectives returned: run with and without LD_PRELOAD=librcoll-mpi.so,
the two outputs must be identical (integers, and floats whose sums are
exact in any order). Also asserts the results against numpy."""
import hashlib
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
digest = hashlib.sha256()
fails = 0


def note(name, arr, expect):
    global fails
    digest.update(name.encode())
    digest.update(np.ascontiguousarray(arr).tobytes())
    if not np.array_equal(arr, expect):
        fails += 1
        print(f"rank {rank}: FAIL {name}", file=sys.stderr)


for count in (1, 1000, 300001):
    base = np.arange(count, dtype=np.int64) % 1013
    a = base + rank * 7
    out = np.empty_like(a)
    comm.Allreduce(a, out, op=MPI.SUM)
    note(f"allreduce int64 {count}", out, base * n + 7 * n * (n - 1) // 2)
    f = a.astype(np.float64)
    comm.Allreduce(MPI.IN_PLACE, f, op=MPI.SUM)
    note(f"allreduce f64 in place {count}", f, (base * n + 7 * n * (n - 1) // 2).astype(np.float64))
    m = a.astype(np.float32)
    fo = np.empty_like(m)
    comm.Allreduce(m, fo, op=MPI.MAX)
    note(f"allreduce f32 max {count}", fo, (base + 7 * (n - 1)).astype(np.float32))
    b = a.copy() if rank == 1 % n else np.zeros_like(a)
    comm.Bcast(b, root=1 % n)
    note(f"bcast {count}", b, base + 7 * (1 % n))
    g = np.empty(count * n, dtype=np.int64)
    comm.Allgather(a, g)
    note(f"allgather {count}", g, np.concatenate([base + 7 * r for r in range(n)]))
    s = (np.arange(count * n, dtype=np.int32) + 100 * rank)
    t = np.empty_like(s)
    comm.Alltoall(s, t)
    expect = np.concatenate([np.arange(rank * count, (rank + 1) * count, dtype=np.int32) + 100 * q
                             for q in range(n)])
    note(f"alltoall {count}", t, expect)
    r = np.empty_like(a) if rank == 0 else None
    comm.Reduce(a, r, op=MPI.SUM, root=0)
    if rank == 0:
        note(f"reduce {count}", r, base * n + 7 * n * (n - 1) // 2)
# pickled objects go through MPI_Bcast / MPI_Allgather of bytes
obj = comm.bcast({"k": list(range(50)), "from": rank}, root=0)
note("bcast object", np.array(obj["k"] + [obj["from"]]), np.array(list(range(50)) + [0]))
objs = comm.allgather(rank * 3)
note("allgather object", np.array(objs), np.arange(n) * 3)
total = comm.allreduce(fails, op=MPI.SUM)
if rank == 0:
    print(f"mpi4py {n} ranks: {digest.hexdigest()} failures {total}")
sys.exit(1 if total else 0)
