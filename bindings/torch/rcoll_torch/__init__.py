"""rcoll backend for torch.distributed.

    torch.distributed.init_process_group("rcoll")
    torch.distributed.init_process_group("cpu:rcoll,cuda:nccl")

torch finds the backend through the torch.distributed.backends entry point
where it reads that group; `import rcoll_torch` registers it everywhere.

Every process group (and every new_group) gets its own rcoll communicator,
whose rendezvous goes through the group's c10d Store.
"""
import torch
import torch.distributed as dist

from . import _C

__version__ = "0.1.0"
ProcessGroupRcoll = _C.ProcessGroupRcoll


def rcoll_version():
    """The version of the librcoll the backend runs on."""
    return _C.rcoll_version()


def _create_backend(store, rank, world_size, timeout):
    return _C.ProcessGroupRcoll(store, rank, world_size, timeout)


def register_backend():
    """Registers the backend "rcoll" with torch.distributed (importing this
    module does it; torch calls it through the torch.distributed.backends
    entry point when init_process_group("rcoll") comes without an import).
    Registering again is harmless."""
    dist.Backend.register_backend("rcoll", _create_backend,
                                  devices=["cpu", "cuda"])


register_backend()
