#!/bin/sh
# The sanitizer and memcheck jobs (run by scripts/test.sh after make check,
# and by CI): three extra builds out of tree, each runs a part of the suite.
#   build-asan  --enable-asan: AddressSanitizer + UBSan (leaks on) over the
#               multi-process suite's core: units, api, the protocol test,
#               the collective matrix on shm at 3 ranks (tcp's runs with 1
#               slot), slots/credits, single copy, non-blocking,
#               registration, failure tests (zero-copy sends in flight at
#               a failure included), SIGKILL fault trials over tcp, the
#               point-to-point patterns on 3 ranks, TCP failover and
#               failback over loopback. RCOLL_TEST_SANITIZER=1
#               sizes the protocol test (10 rounds a seed) and the matrix
#               (counts to 131073, not 8 MiB) for the slowdown.
#   build-tsan  --enable-tsan: ThreadSanitizer over the threaded tests
#               (non-blocking + 2 threads, abort from a second thread,
#               point-to-point and operations in flight together, the
#               unit tests that start threads)
#   valgrind    memcheck on the unit tests and on 2 ranks of collectives
#               (0 errors, 0 definite/indirect leaks)
#   build-fuzz  the libFuzzer targets (tests/fuzz/run.sh): each replays its
#               seed corpus (past findings included), then fuzzes for
#               RCOLL_FUZZ_SECONDS (default 5)
# Prints "N passed, M failed, K skipped" over the four as its last line
# (the parts' own summaries are prefixed "  [part]"). Usage: check-sanitizers.sh
set -u
cd "$(dirname "$0")/.."
S=$(pwd)
tmp=$(mktemp -d)
p=0; f=0; k=0
# sum LOG: adds its part's summary - the last line of LOG, "N passed, M
# failed[, K skipped]" - to the totals; a missing or different last line
# (a part that died) is a failure. The parts' own summaries are shown as
# "  [part] N passed, ..." so that only this script's closing line reads
# as a summary to scripts/test.sh.
sum() {
    line=$(tail -n 1 "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed')
    if [ -z "$line" ]; then echo "  (no closing summary in this part: counted as a failure)"; f=$((f + 1)); return; fi
    p=$((p + $(echo "$line" | sed 's/ passed.*//')))
    f=$((f + $(echo "$line" | sed 's/.* \([0-9]*\) failed.*/\1/')))
    ks=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    k=$((k + ${ks:-0}))
}
# show PART: a part's filtered output, its summary prefixed
show() { sed -E "s/^([0-9]+ passed, [0-9]+ failed.*)/  [$1] \1/"; }
# (without the CUDA kernels: nvcc adds half a minute per build, and no GPU
# code runs here; the C side of GPU buffers is built either way)
build() { # build DIR CONFIGURE-FLAG
    mkdir -p "$1" && (cd "$1" && "$S/configure" "$2" --without-cuda > configure.out 2>&1 &&
        make -j"$(nproc)" > make.out 2>&1) ||
        { echo "build $1 ($2) failed"; tail -n 20 "$1/make.out" "$1/configure.out" 2> /dev/null; return 1; }
}
[ -x configure ] || ./autogen.sh > /dev/null 2>&1

t0=$(date +%s)
echo "== ASan + UBSan (build-asan)"
if build build-asan --enable-asan; then
    (cd build-asan &&
     ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 RCOLL_TEST_SANITIZER=1 \
     RCOLL_TEST_FILTER='unit|protocol|api|matrix, shm, 3 ranks|nonblocking|register.*(2|4) ranks|fail: |1 slot|single copy|faults: SIGKILL.*tcp|p2p: .*(shm|tcp), 3 ranks|tcp failover' \
     make -j"$(nproc)" check 2>&1) | grep -E '^(PASS|FAIL|SKIP)|^      \||passed,' > "$tmp/asan"
    show asan < "$tmp/asan"
    sum "$tmp/asan"
else
    f=$((f + 1))
fi
echo "== ASan took $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
echo "== ThreadSanitizer (build-tsan)"
if build build-tsan --enable-tsan; then
    (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 RCOLL_TEST_TIMEOUT_SCALE=3 RCOLL_TEST_SANITIZER=1 \
     RCOLL_TEST_FILTER='nonblocking|abort_thread|abort_race|unit: parsers|p2p: .*shm, 3 ranks' make -j"$(nproc)" check 2>&1) |
        grep -E '^(PASS|FAIL|SKIP)|^      \||passed,' > "$tmp/tsan"
    show tsan < "$tmp/tsan"
    sum "$tmp/tsan"
else
    f=$((f + 1))
fi
echo "== TSan took $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
echo "== valgrind memcheck (build)"
VG="valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99"
if command -v valgrind > /dev/null && [ -x build/tests/test_units ]; then
    vp=0; vf=0
    vg() { # vg NAME CMD...
        name=$1; shift
        if timeout 600 "$@" > "$tmp/vg.log" 2>&1; then
            vp=$((vp + 1)); echo "PASS  valgrind: $name"
        else
            vf=$((vf + 1)); echo "FAIL  valgrind: $name"; tail -n 25 "$tmp/vg.log" | sed 's/^/      | /'
        fi
    }
    cd build
    vg "unit: reduce kernels" ./libtool --mode=execute $VG tests/test_reduce
    vg "unit: parsers and schedules" ./libtool --mode=execute $VG tests/test_units
    vg "api: arguments and errors" ./libtool --mode=execute $VG tests/test_api
    vg "protocol: every algorithm against a fake transport" \
        ./libtool --mode=execute $VG tests/test_protocol 3 5
    vg "collectives, 2 ranks, shm" env RCOLL_TRANSPORTS=shm tools/rcoll-run -n 2 \
        ./libtool --mode=execute $VG tests/test_coll -q -N 0,7,1023,70001
    vg "collectives, 2 ranks, tcp" env RCOLL_TRANSPORTS=tcp tools/rcoll-run -n 2 \
        ./libtool --mode=execute $VG tests/test_coll -q -N 0,7,1023,70001
    cd ..
    echo "$vp passed, $vf failed" > "$tmp/vg"
    show valgrind < "$tmp/vg"
    sum "$tmp/vg"
else
    echo "valgrind or build/ missing"; f=$((f + 1))
fi
echo "== valgrind took $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
echo "== libFuzzer targets (tests/fuzz/run.sh, ${RCOLL_FUZZ_SECONDS:-5} s each)"
if ! command -v clang > /dev/null; then
    echo "SKIP  fuzz: libFuzzer targets: no clang"; k=$((k + 1))
else
    sh tests/fuzz/run.sh build build-fuzz "${RCOLL_FUZZ_SECONDS:-5}" > "$tmp/fuzz" 2>&1
    show fuzz < "$tmp/fuzz"
    sum "$tmp/fuzz"
fi
echo "== fuzzing took $(( $(date +%s) - t0 )) s"
rm -rf "$tmp"
echo "$p passed, $f failed, $k skipped"
[ "$f" = 0 ]
