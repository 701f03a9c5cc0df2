#!/bin/sh
# Every GPU test and benchmark, on a machine with an NVIDIA GPU. Run by hand
# there (CI machines have no GPU; `make check` runs tests/gpu/run.sh, which
# skips without one).
#
# Usage: scripts/check-gpu.sh [-t rcoll-X.tar.gz] [-d SECONDS] OUTDIR
#   -t  build from this `make dist` tarball (configure already generated:
#       for a machine without autotools); else from this source tree
#   -d  stop starting new stages after this many seconds (default 540);
#       a stage not started is listed as such in summary.txt
# Builds with --without-verbs --without-hwloc --without-pmix (a GPU machine
# may lack those libraries) in $TMPDIR, then writes to OUTDIR:
#   probe.txt      the machine: GPU, driver, toolkit, compilers, PyTorch
#   build.log      configure's summary and any build error
#   info.txt       rcoll-info (the driver found, the kernels built)
#   driver.json    tests/gpu/probe.py: stream memory operations, legacy IPC
#                  between processes, dma-buf, the attributes that decide
#   gpu-tests.log  tests/gpu/run.sh: kernels, bandwidth, stream order,
#                  errors, contexts, test_coll -g on 2/3/4 ranks (shm), tcp,
#                  hierarchical
#   torch.txt      gloo (CUDA tensors, staged) and NCCL on 2 and 4 ranks
#                  sharing the GPU: all-reduce time per size
#   sanitizer.log  compute-sanitizer memcheck and racecheck on the kernels
#   summary.txt    each stage's exit status and seconds
set -u
TARBALL=""; DEADLINE=540
while getopts t:d: o; do
    case $o in
    t) TARBALL=$(readlink -f "$OPTARG") ;;
    d) DEADLINE=$OPTARG ;;
    *) echo "usage: $0 [-t TARBALL] [-d SECONDS] OUTDIR" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# = 1 ] || { echo "usage: $0 [-t TARBALL] [-d SECONDS] OUTDIR" >&2; exit 2; }
mkdir -p "$1"
OUT=$(readlink -f "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/rcoll-gpu.XXXXXX")
B="$W/build"
START=$(date +%s)
: > "$OUT/summary.txt"

# stage NAME TIMEOUT CMD...: runs CMD (output to its own log by the caller)
# unless the deadline has passed; records the exit status and the time.
# TIMEOUT 0: none (CMD is a function of this script)
stage() {
    name=$1; lim=$2; shift 2
    now=$(date +%s)
    if [ $((now - START)) -ge "$DEADLINE" ]; then
        printf '%-10s not started (deadline %ss)\n' "$name" "$DEADLINE" | tee -a "$OUT/summary.txt"
        return 1
    fi
    if [ "$lim" = 0 ]; then "$@"; else timeout -k 5 "$lim" "$@"; fi
    rc=$?
    printf '%-10s exit %3d  %4ds\n' "$name" $rc $(($(date +%s) - now)) | tee -a "$OUT/summary.txt"
    return $rc
}

probe() {
    echo "== date"; date -u; echo "== commit"; (cd "$SRC" && git rev-parse HEAD 2>/dev/null) || echo "${RCOLL_COMMIT:-(no git)}"
    echo "== uname"; uname -a; echo "== cpus"; nproc; echo "== memory"; free -g
    echo "== /dev/shm"; df -h /dev/shm; echo "== ulimit -a"; ulimit -a
    echo "== nvidia-smi"; nvidia-smi 2>&1
    echo "== nvidia-smi topo"; nvidia-smi topo -m 2>&1
    echo "== nvcc"; nvcc --version 2>&1
    for t in gcc cc make autoconf automake libtool pkg-config compute-sanitizer ibv_devices python3; do
        printf '%-18s %s\n' "$t" "$(command -v $t || echo 'not found')"
    done
    gcc --version 2>&1 | head -1
    echo "== python3 torch"
    python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' 2>&1
    echo "== ldconfig: verbs, hwloc, pmix, cuda"
    ldconfig -p 2>/dev/null | grep -E 'libibverbs|librdmacm|libhwloc|libpmix|libcuda\.so' || echo "(none)"
}

build() {
    if [ -n "$TARBALL" ]; then
        tar -C "$W" -xzf "$TARBALL" || return 1
        S=$(ls -d "$W"/rcoll-*/ | head -1)
    else
        S=$SRC
        [ -x "$S/configure" ] || (cd "$S" && ./autogen.sh) || return 1
    fi
    mkdir -p "$B" && cd "$B" || return 1
    "$S/configure" --without-verbs --without-hwloc --without-pmix > configure.out 2>&1 ||
        { tail -40 configure.out; return 1; }
    grep -A12 'configuration summary' configure.out | sed 's/^configure: //'
    make -j"$(nproc)" > make.out 2>&1 && make -j"$(nproc)" check-programs >> make.out 2>&1 ||
        { tail -60 make.out; return 1; }
    echo "built in $B"
}

probe > "$OUT/probe.txt" 2>&1
stage build 0 build > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
stage info 30 "$B/tools/rcoll-info" > "$OUT/info.txt" 2>&1
stage driver 120 python3 "$SRC/tests/gpu/probe.py" > "$OUT/driver.json" 2>&1
GPU_TEST_TIMEOUT=150 stage gpu-tests 420 sh "$SRC/tests/gpu/run.sh" "$B" > "$OUT/gpu-tests.log" 2>&1
torch_bench() {
    for n in 2 4; do
        for be in gloo nccl; do
            echo "== $be, $n ranks on one GPU, all-reduce float32 sum (bytes time_us)"
            PERF_DEVICE=cuda PERF_BACKEND=$be NCCL_MULTI_RANK_GPU_ENABLE=1 timeout -k 5 60 \
                python3 "$SRC/benchmarks/gloo_perf.py" $n allreduce 4096 67108864 16 0 2 0.05 3 2>&1 |
                grep -vE '^\s*$' | tail -n 20
        done
    done
}
stage torch 0 torch_bench > "$OUT/torch.txt" 2>&1
if command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
        echo "== compute-sanitizer --tool $tool test_gpu contexts"
        stage "san-$tool" 90 compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/gpu/test_gpu" contexts 2>&1 | tail -n 15
    done > "$OUT/sanitizer.log" 2>&1
fi
echo "total $(($(date +%s) - START))s" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
grep -E '^(PASS|FAIL|SKIP)|passed' "$OUT/gpu-tests.log"
rm -rf "$W"
