"""The backend under torchrun and torch.multiprocessing.spawn, selected by
"rcoll" and by a device-to-backend string, found through the entry point
without an import, on the librcoll it was built with, and on a host
without the RDMA, hwloc and PMIx libraries."""
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
if sys.argv[2] == "import":
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


def torchrun(tmp_path, backend, how, nproc=3, wrap=()):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = list(wrap) + [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", str(nproc), str(script), backend, how]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in range(nproc):
        assert f"rank {r} of {nproc} ok" in out, out


@pytest.mark.parametrize("backend", ["rcoll", "cpu:rcoll"])
def test_torchrun(tmp_path, backend):
    torchrun(tmp_path, backend, "import")


@pytest.mark.skipif(not hasattr(dist.Backend, "_ensure_backend_registered"),
                    reason="this torch does not read the "
                    "torch.distributed.backends entry points")
@pytest.mark.parametrize("backend", ["rcoll", "cpu:rcoll"])
def test_torchrun_entry_point(tmp_path, backend):
    """init_process_group("rcoll") with no import of rcoll_torch"""
    torchrun(tmp_path, backend, "entry point")


def loaded_librcoll():
    """(the librcoll file the extension loaded, the package directory)"""
    code = ("import os, rcoll_torch\n"
            "print(os.path.dirname(os.path.realpath(rcoll_torch.__file__)))\n"
            "for l in open('/proc/self/maps'):\n"
            "    if 'librcoll.so' in l: print(l.split()[-1])\n")
    out = subprocess.check_output([sys.executable, "-c", code], text=True,
                                  cwd="/")
    lines = out.splitlines()
    return sorted(set(lines[1:])), lines[0]


def test_librcoll_location():
    """The wheel runs on the librcoll inside it; a build against an installed
    librcoll (RCOLL_HOME) runs on that one (RCOLL_EXPECT_LIBDIR)"""
    libs, pkg = loaded_librcoll()
    assert len(libs) == 1, libs
    want = os.environ.get("RCOLL_EXPECT_LIBDIR")
    if want:
        assert os.path.dirname(libs[0]) == os.path.realpath(want), libs
    elif any(f.startswith("librcoll.so") for f in os.listdir(pkg)):
        assert os.path.dirname(libs[0]) == pkg, (libs, pkg)
    else:
        pytest.skip("neither a bundled librcoll nor RCOLL_EXPECT_LIBDIR")


def hidden_libraries():
    """The real files of the optional libraries this host has"""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True,
                         text=True).stdout
    want = ("libibverbs.so.1", "librdmacm.so.1", "libhwloc.so.15",
            "libpmix.so.2")
    found = {}
    for line in out.splitlines():
        name = line.strip().split(" ")[0]
        if name in want and name not in found:
            found[name] = os.path.realpath(line.split("=>")[-1].strip())
    return sorted(set(found.values()))


def test_without_rdma_libraries(tmp_path):
    """A host without libibverbs, librdmacm, hwloc and PMIx (hidden by
    bind-mounting /dev/null over them in a private mount namespace): the
    backend loads and its collectives run over shm/tcp"""
    if os.geteuid() != 0 or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("hiding libraries needs root and a mount namespace")
    libs = hidden_libraries()
    if not libs:
        pytest.skip("this host has none of the optional libraries to hide")
    mounts = "; ".join(f"mount --bind /dev/null {f}" for f in libs)
    torchrun(tmp_path, "rcoll", "import", nproc=2,
             wrap=("unshare", "-m", "sh", "-c", mounts + '; exec "$@"', "sh"))


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
