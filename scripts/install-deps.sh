#!/bin/sh
# Installs what building and testing rcoll needs on Debian/Ubuntu, only if
# something is missing. Optional libraries (verbs, rdmacm, hwloc, PMIx) are
# included so configure finds them; Open MPI only launches tests; iproute2
# makes the network-namespace hosts of the tests; procps gives pgrep; QEMU,
# busybox, cpio, kmod and the rdma-core tools run the RDMA guest of
# `make check-rdma` (tests/rdma-vm; it fetches the guest kernel itself);
# valgrind and clang (libFuzzer) serve scripts/check-sanitizers.sh;
# python3-venv and python3-dev build the PyTorch backend (check-torch.sh);
# python3-mpi4py and python3-numpy run an mpi4py program under
# librcoll-mpi, and hpcc (HPC Challenge) under it (tests/test_mpi_preload.sh);
# doxygen makes the API man pages (docs/Doxyfile, tests/test_docs.sh).
set -e
PKGS="build-essential autoconf automake libtool pkg-config
      libpmix-dev openmpi-bin libopenmpi-dev
      libibverbs-dev librdmacm-dev libhwloc-dev iproute2 procps
      ibverbs-providers ibverbs-utils rdmacm-utils perftest
      qemu-system-x86 busybox-static cpio kmod xz-utils util-linux
      valgrind clang python3 python3-venv python3-dev python3-mpi4py
      python3-numpy hpcc doxygen"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing > /dev/null
