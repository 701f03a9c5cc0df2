"""pip install ./bindings/torch: the rcoll c10d backend for torch.distributed.

Builds against an installed librcoll: the prefix in RCOLL_HOME (its
include/ and lib/), else pkg-config's rcoll, else /usr/local. The extension
is linked with an rpath to that lib/ directory. torch 2.x must already be
installed (the build uses its headers and ABI flags).
"""
import os
import shlex
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension


def rcoll_dirs():
    home = os.environ.get("RCOLL_HOME")
    if home:
        return [os.path.join(home, "include")], [os.path.join(home, "lib")]
    try:
        cflags = subprocess.check_output(
            ["pkg-config", "--cflags-only-I", "rcoll"], text=True)
        libs = subprocess.check_output(
            ["pkg-config", "--libs-only-L", "rcoll"], text=True)
        inc = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
        lib = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
        if lib:
            return inc, lib
    except (OSError, subprocess.CalledProcessError):
        pass
    return ["/usr/local/include"], ["/usr/local/lib"]


inc, lib = rcoll_dirs()
setup(
    name="rcoll_torch",
    version="0.1.0",
    description="rcoll backend for torch.distributed (c10d)",
    packages=["rcoll_torch"],
    ext_modules=[
        CppExtension(
            "rcoll_torch._C",
            ["rcoll_torch/csrc/ProcessGroupRcoll.cpp"],
            include_dirs=inc,
            library_dirs=lib,
            runtime_library_dirs=lib,
            libraries=["rcoll"],
            extra_compile_args=["-O2", "-Wall"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
