#!/bin/sh
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,
# undefined) and runs each: first over its seed corpus in
# tests/fuzz/corpus/TARGET (the regression part: every past finding is a
# file there), then fuzzing for SECONDS. A crash, leak, sanitizer report or
# FUZZ_ASSERT fails the target; the input is kept in OUT/TARGET/crash-*.
# One PASS/FAIL line per target, then "N passed, M failed".
# Usage: run.sh BUILDDIR OUTDIR [SECONDS]   (BUILDDIR: a configured build,
# for its config.h). Skips (77) without clang's libFuzzer. FUZZ_TARGETS
# (a space-separated list, e.g. tcp_stream) runs only those.
B=$(cd "$1" && pwd); O=$2; SECS=${3:-30}
S=$(cd "$(dirname "$0")/../.." && pwd)
CC=${FUZZ_CC:-clang}
command -v "$CC" > /dev/null || { echo "no clang: fuzz targets skipped"; exit 77; }
mkdir -p "$O"; O=$(cd "$O" && pwd)
FL="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
INC="-I$S/include -I$S/src -I$B -I$S/tests/fuzz"
# the optional libraries' headers where configure found them (dl.c)
for v in PMIX VERBS RDMACM HWLOC; do
    INC="$INC $(sed -n "s/^${v}_CPPFLAGS = //p" "$B/Makefile")"
done
# the library code the targets reach, instrumented for coverage
CORE="$S/src/util/log.c $S/src/util/misc.c $S/src/util/params.c
      $S/src/util/sock.c $S/src/util/status.c $S/src/bootstrap/bootstrap.c $S/src/bootstrap/boot_join.c
      $S/src/bootstrap/boot_root.c
      $S/src/topo/topo.c $S/src/topo/topo_query.c $S/src/topo/detect.c
      $S/src/core/diag_msg.c
      $S/src/proto/rcache.c $S/src/proto/memmon.c $S/src/proto/lanes.c
      $S/src/util/dl.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$O/probe.c"
$CC $FL "$O/probe.c" -o "$O/probe" 2> /dev/null || { echo "clang has no libFuzzer here: skipped"; exit 77; }
pass=0; fail=0
# verbs and rdmacm are loaded at run time by src/util/dl.c, as in librcoll
LIBS="-lpthread -lm -ldl"
for t in ${FUZZ_TARGETS:-unique_id boot_table config auth tcp_stream ib_signal shm_ring topo_xml diag_msg}; do
    src="$S/tests/fuzz/fuzz_$t.c"
    if ! $CC $FL $INC "$src" $CORE -o "$O/fuzz_$t" $LIBS > "$O/$t.build.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL  fuzz: $t (build)"; tail -n 20 "$O/$t.build.log"; continue
    fi
    mkdir -p "$O/$t/new" "$S/tests/fuzz/corpus/$t"
    # replay the seeds (the regression tests), then fuzz from them; new
    # inputs go to a scratch directory, not into the tree
    if (cd "$O/$t" && timeout $((SECS + 120)) "$O/fuzz_$t" -max_total_time="$SECS" \
            -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
            new "$S/tests/fuzz/corpus/$t") > "$O/$t.log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$O/$t.log" | grep -o '[0-9]*$')
        cov=$(grep -o 'cov: [0-9]*' "$O/$t.log" | tail -n 1)
        pass=$((pass + 1)); echo "PASS  fuzz: $t ($runs inputs in ${SECS} s, $cov)"
    else
        fail=$((fail + 1)); echo "FAIL  fuzz: $t"
        grep -E 'ERROR|fuzz assertion|SUMMARY|Test unit written|#[0-9]+ *(DONE|NEW)' "$O/$t.log" | tail -n 12 | sed 's/^/      | /'
    fi
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
