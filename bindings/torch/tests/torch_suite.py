"""PyTorch's own distributed test suite (torch.testing._internal.
distributed.distributed_test, shipped in the torch wheel) run against the
rcoll backend, the way PyTorch's test/distributed/test_distributed_spawn.py
runs it for gloo. Not collected by the default pytest run (it takes long);
run it by hand:

    BACKEND=rcoll WORLD_SIZE=3 python -m pytest -q -rA torch_suite.py

docs/torch.md lists what passes, what is skipped and what fails, and why.
"""
import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "rcoll")
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="rcoll-suite-"))

import rcoll_torch  # noqa: E402,F401  (registers "rcoll" here and in children)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# What the suite may try with rcoll, said before distributed_test decorates
# its tests: a plugin backend (available), DDP on CPU; not CUDA subgroups,
# not any-source receives (rcoll has none)
DistTestCases.backend_feature["plugin"].add("rcoll")
DistTestCases.backend_feature["ddp"].add("rcoll")
DistTestCases.skip_collective["sendrecv anysource"].add("rcoll")
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    sys.exit(run_tests())
