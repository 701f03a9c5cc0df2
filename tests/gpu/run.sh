#!/bin/sh
# The GPU tests, all of them, on a machine with a GPU (one is enough: 2-4
# processes share it). Prints one PASS/FAIL/SKIP line per test and
# "N passed, M failed, K skipped"; exits 1 when anything failed, else 77
# when anything skipped (no GPU or driver, a build without CUDA, or a test
# that could not run here), else 0.
# Usage: tests/gpu/run.sh BUILDDIR (GPU_TEST_TIMEOUT: seconds a test may
# take, default 900)
B=${1:-build}
RUN="$B/tools/rcoll-run"
pass=0; fail=0; skip=0
L=$(mktemp -d)
t() { # t NAME CMD...
    name=$1; shift
    timeout -k 5 "${GPU_TEST_TIMEOUT:-900}" "$@" > "$L/out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %s\n' "$name"
        grep -E "GB/s|checks|wrong|: RCOLL" "$L/out" | sed 's/^/      /' | head -n 12
    elif [ $rc = 77 ]; then
        skip=$((skip + 1)); printf 'SKIP  %s: %s\n' "$name" "$(grep -m1 SKIP "$L/out" | sed 's/^SKIP: //')"
    else
        fail=$((fail + 1)); printf 'FAIL  %s (exit %d)\n' "$name" $rc
        tail -n 25 "$L/out" | sed 's/^/      | /'
    fi
}
N=0,1,7,1023,70001,1048577
t "gpu: reduction kernels, every type x op, bit-exact vs CPU" "$B/tests/gpu/test_gpu" kernels
t "gpu: reduction kernel bandwidth >= 80% of device copy" "$B/tests/gpu/test_gpu" bandwidth
t "gpu: stream order, kernel before and after, 2 ranks" "$RUN" -n 2 "$B/tests/gpu/test_gpu" stream
t "gpu: mixed host/GPU buffers and non-blocking are errors" "$RUN" -n 2 "$B/tests/gpu/test_gpu" errors
t "gpu: kernels' module loaded once per context, 2 contexts alternating" "$B/tests/gpu/test_gpu" contexts
for n in 2 3 4; do
    t "gpu: matrix with GPU buffers, shm, $n ranks on one GPU" env RCOLL_TRANSPORTS=shm \
        "$RUN" -n $n "$B/tests/test_coll" -g -q -N $N
done
t "gpu: matrix with GPU buffers, tcp, 2 ranks" env RCOLL_TRANSPORTS=tcp \
    "$RUN" -n 2 "$B/tests/test_coll" -g -q -N $N
t "gpu: hierarchical all-reduce, GPU buffers, 2 hosts x 2 (RCOLL_HOSTID)" \
    env RCOLL_ALGO=allreduce:hierarchical RCOLL_TRANSPORTS=shm,tcp \
    "$RUN" -n 4 sh -c "RCOLL_HOSTID=h\$((RCOLL_RANK % 2)) exec '$B/tests/test_coll' -g -q -C allreduce -N $N"
rm -rf "$L"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ] || exit 1
# a skip is never hidden behind the others' passes: the suite then counts
# as skipped, and its last line says how many of its tests ran
[ $skip -gt 0 ] && exit 77
exit 0
