"""The backend under torchrun and torch.multiprocessing.spawn, selected by
"rcoll" and by a device-to-backend string."""
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import harness

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = r'''
import os, sys, torch, torch.distributed as dist
import rcoll_torch
dist.init_process_group(sys.argv[1])
r, n = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "rcoll" or "rcoll" in str(dist.get_backend())
t = torch.full((1000,), float(r + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), float(n * (n + 1) // 2))), t[:4]
sub = dist.new_group(list(range(n)))
dist.all_reduce(t, group=sub)
dist.barrier()
print(f"rank {r} of {n} ok ({dist.get_backend()})", flush=True)
dist.destroy_process_group()
'''


@pytest.mark.parametrize("backend", ["rcoll", "cpu:rcoll"])
def test_torchrun(tmp_path, backend):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "3", str(script), backend]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in range(3):
        assert f"rank {r} of 3 ok" in out, out


def spawned(rank, world, port):
    import rcoll_torch  # noqa: F401
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("rcoll", rank=rank, world_size=world)
    t = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(t)
    assert t.item() == world * (world - 1) // 2
    assert dist.get_backend() == "rcoll"
    dist.destroy_process_group()


def test_mp_spawn():
    mp.spawn(spawned, args=(2, harness.free_port()), nprocs=2, join=True)
