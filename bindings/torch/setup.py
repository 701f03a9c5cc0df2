"""The rcoll c10d backend for torch.distributed, as one wheel.

    pip wheel --no-build-isolation ./bindings/torch     # or pip install

builds librcoll from this source tree (configure + make, in the build
directory) and puts it next to the extension in the wheel, which finds it
through an rpath of $ORIGIN. librcoll loads libibverbs, librdmacm, hwloc
and PMIx at run time when a host has them (src/util/dl.c), so the wheel
runs on hosts with and without RDMA. Building needs a C compiler and, from
a git checkout, autoconf/automake/libtool (configure is generated); the
verbs/hwloc/PMIx headers, when present, enable those parts. Extra configure
arguments: RCOLL_CONFIGURE_FLAGS. The rcoll tree: RCOLL_SRC (default: two
levels up from this file). RCOLL_LIB_BUILD names a directory to configure
and build librcoll in, kept between builds (a wheel and an editable
install then share one librcoll build); by default it is a directory
under the build's own temporary directory.

Developers with an installed librcoll set RCOLL_HOME to its prefix: the
extension is then built against that library (its include/ and lib/, rpath
there) and nothing is bundled.

torch must be the one the extension will run with: build with
--no-build-isolation in the environment that holds it. The build reads
the rcoll tree in place (pip >= 21.3 builds a local directory in place;
from a copy, an sdist, set RCOLL_SRC), and the tree must not be
configured in place (configure runs out of tree, in the build directory).
"""
import glob
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, cwd):
    print("rcoll_torch:", " ".join(cmd), flush=True)
    subprocess.check_call(cmd, cwd=cwd)


def soname(path):
    """The DT_SONAME of a shared library (librcoll.so.0)."""
    out = subprocess.check_output(["readelf", "-d", path], text=True)
    for line in out.splitlines():
        if "(SONAME)" in line:
            return line.split("[", 1)[1].split("]", 1)[0]
    raise RuntimeError(f"{path} has no SONAME")


class BuildWithRcoll(BuildExtension):
    """Builds librcoll first (unless RCOLL_HOME names an installed one) and
    ships it in the package directory next to _C."""

    def mode_changed(self, mode):
        """Whether this build dir last built in another mode (RCOLL_HOME or
        bundled, the tree, the configure flags); records the new one."""
        os.makedirs(self.build_temp, exist_ok=True)
        stamp = os.path.join(self.build_temp, "rcoll-mode")
        old = open(stamp).read() if os.path.exists(stamp) else None
        with open(stamp, "w") as f:
            f.write(mode)
        return old is not None and old != mode

    def build_librcoll(self, changed):
        src = os.path.abspath(os.environ.get("RCOLL_SRC",
                                             os.path.join(HERE, "..", "..")))
        if not os.path.exists(os.path.join(src, "configure.ac")):
            raise RuntimeError(f"no rcoll source tree at {src} (set RCOLL_SRC)")
        if not os.path.exists(os.path.join(src, "configure")):
            run(["sh", "./autogen.sh"], src)
        bld = os.path.abspath(os.environ.get("RCOLL_LIB_BUILD") or
                              os.path.join(self.build_temp, "librcoll"))
        args = [os.path.join(src, "configure"), "--disable-static",
                "--without-mpi"] + shlex.split(
                    os.environ.get("RCOLL_CONFIGURE_FLAGS", ""))
        # a directory configured otherwise (another tree or other flags)
        # is configured again
        stamp = os.path.join(bld, "rcoll-configure")
        if changed or (os.path.exists(stamp) and
                       open(stamp).read() != " ".join(args)):
            shutil.rmtree(bld, ignore_errors=True)
        os.makedirs(bld, exist_ok=True)
        if not os.path.exists(os.path.join(bld, "Makefile")):
            run(args, bld)
            with open(stamp, "w") as f:
                f.write(" ".join(args))
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        run(["make", "-j" + jobs, "librcoll.la"], bld)
        real = os.path.realpath(os.path.join(bld, ".libs", "librcoll.so"))
        return os.path.join(src, "include"), bld, real

    def run(self):
        # setuptools clears self.inplace around build_extensions; an
        # in-place or editable build needs the library in the source tree
        inplace = self.inplace or getattr(self, "editable_mode", False)
        self.bundle = None
        super().run()
        if self.bundle and inplace:
            shutil.copy2(self.bundle, os.path.join(HERE, "rcoll_torch",
                                                   soname(self.bundle)))

    def build_extensions(self):
        home = os.environ.get("RCOLL_HOME")
        mode = (f"home {home}" if home else "bundled " +
                os.environ.get("RCOLL_SRC", "") + " " +
                os.environ.get("RCOLL_CONFIGURE_FLAGS", ""))
        changed = self.mode_changed(mode)
        if changed:
            self.force = True  # the extension's rpath changes too
        if home:
            inc, libdir = os.path.join(home, "include"), os.path.join(home, "lib")
            rpath = libdir
        else:
            inc, bld, self.bundle = self.build_librcoll(changed)
            # link against the name the loader will look for, in a
            # directory holding only it
            libdir = os.path.join(bld, "link")
            os.makedirs(libdir, exist_ok=True)
            for old in glob.glob(os.path.join(libdir, "librcoll.so*")):
                os.remove(old)
            shutil.copy2(self.bundle, os.path.join(libdir, soname(self.bundle)))
            os.symlink(soname(self.bundle), os.path.join(libdir, "librcoll.so"))
            rpath = "$ORIGIN"
        for ext in self.extensions:
            ext.include_dirs.append(inc)
            ext.library_dirs.append(libdir)
            ext.runtime_library_dirs.append(rpath)
        super().build_extensions()
        pkg = os.path.join(self.build_lib, "rcoll_torch")
        os.makedirs(pkg, exist_ok=True)
        for old in glob.glob(os.path.join(pkg, "librcoll.so*")):
            os.remove(old)  # from a build in the other mode
        if self.bundle:
            shutil.copy2(self.bundle, os.path.join(pkg, soname(self.bundle)))


setup(
    name="rcoll_torch",
    version="0.1.0",
    description="rcoll backend for torch.distributed (c10d)",
    packages=["rcoll_torch"],
    ext_modules=[
        CppExtension(
            "rcoll_torch._C",
            ["rcoll_torch/csrc/ProcessGroupRcoll.cpp"],
            libraries=["rcoll"],
            # -g0: no debug info (Python's own CFLAGS carry -g): the one
            # translation unit, torch's headers and all, compiles faster
            extra_compile_args=["-O2", "-g0", "-Wall"],
        )
    ],
    cmdclass={"build_ext": BuildWithRcoll},
    # init_process_group("rcoll") finds the backend without an import
    # (torch versions that read this entry-point group)
    entry_points={"torch.distributed.backends": [
        "rcoll = rcoll_torch:register_backend"]},
)
