#!/bin/sh
# Tests of the test harness: each mutant plants a bug that the suite once
# let through, or that a check exists to catch, in a scratch copy of this
# tree, and runs the part of the suite that must
# catch it. The mutant is killed when that part fails (the suite's own
# "N passed, M failed" with M > 0 and a non-zero exit); a mutant that
# survives is a hole in the harness. Outside CI (about 4 minutes: one
# build without CUDA, then one incremental rebuild per source mutant).
# Usage: check-mutants.sh [SCRATCH-DIR]; run by `make check-mutants`.
# Prints "N passed, M failed" (passed: mutants killed) as its last line.
set -u
S=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-$(mktemp -d /tmp/rcoll-mutants.XXXXXX)}
mkdir -p "$W"
killed=0; survived=0
t0=$(date +%s)

# the scratch copy: tracked and untracked (not ignored) files as they are
(cd "$S" && git ls-files -z --cached --others --exclude-standard |
    tar --null -T - -cf -) | tar -xf - -C "$W" || { echo "copy failed"; echo "0 passed, 1 failed"; exit 1; }
cd "$W" || exit 1
echo "== scratch copy in $W: building (without CUDA)"
{ ./autogen.sh && mkdir -p build && cd build &&
  ../configure --without-cuda && make -j"$(nproc)" &&
  RCOLL_TEST_FILTER='^$' make -j"$(nproc)" check; } > "$W/build.out" 2>&1 ||
    { tail -n 30 "$W/build.out"; echo "0 passed, 1 failed"; exit 1; }
B=$W/build
echo "   built in $(( $(date +%s) - t0 )) s"

# verdict NAME LOG RC: killed when the run failed and said so
verdict() {
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    if [ "$3" != 0 ] && [ "${f:-0}" -gt 0 ]; then
        echo "KILLED    $1 ($line)"
        killed=$((killed + 1))
    else
        echo "SURVIVED  $1 (exit $3, summary: ${line:-none}): the harness let it through"
        tail -n 15 "$2" | sed 's/^/      | /'
        survived=$((survived + 1))
    fi
}

# src NAME FILE SED-EXPR FILTER: plants SED-EXPR in FILE, rebuilds, runs
# the make check tests matching FILTER; every one of them must fail
src() {
    name=$1; file=$2; expr=$3; filter=$4
    cp "$W/$file" "$W/$file.orig"
    sed -i -e "$expr" "$W/$file"
    if cmp -s "$W/$file" "$W/$file.orig"; then
        echo "SURVIVED  $name: the mutation no longer applies to $file (update it)"
        survived=$((survived + 1))
        mv "$W/$file.orig" "$W/$file"
        return
    fi
    log=$W/mutant.log
    (cd "$B" && make -j"$(nproc)" > "$W/rebuild.out" 2>&1 &&
        RCOLL_TEST_FILTER=$filter make check > "$log" 2>&1)
    rc=$?
    # every test the filter picked must have failed, not only one of them
    np=$(grep -c '^PASS' "$log")
    if [ "$np" -gt 0 ]; then
        echo "SURVIVED  $name: $np of the tests meant to catch it passed:"
        grep '^PASS' "$log" | sed 's/^/      | /'
        survived=$((survived + 1))
    else
        verdict "$name" "$log" $rc
    fi
    mv "$W/$file.orig" "$W/$file"
    touch "$W/$file"
}

# stage NAME SCRIPT SKIP STUB: scripts/test.sh (the README's command) with
# one of its stages replaced by STUB, a stage that dies after printing a
# summary; make check filtered to one unit test, the RDMA stage and the
# stage named by SKIP (RCOLL_SKIP_...) left out
stage() {
    name=$1; script=$2; skip=$3; stub=$4
    cp "$W/$script" "$W/$script.orig"
    printf '#!/bin/sh\n%s\n' "$stub" > "$W/$script"
    log=$W/mutant.log
    env RCOLL_TEST_FILTER='^unit: reduce kernels$' RCOLL_SKIP_RDMA=1 "$skip=1" \
        sh "$W/scripts/test.sh" > "$log" 2>&1
    verdict "$name" "$log" $?
    mv "$W/$script.orig" "$W/$script"
}

echo "== source mutants"
# 1: a 1-rank ring all-reduce that skips the send-to-receive copy (the
# verdict came from the library: the matrix passed with 50 FAIL lines)
src "1-rank ring all-reduce skips its copy" src/coll/allreduce/allreduce_ring.c \
    '/if (n == 1) {/{n;s/coll_copy_in(s);/;/}' \
    '^(coll: matrix, shm, 1 ranks|algo: allreduce:ring, shm, 1 ranks)$'
# 7: uint64 MIN/MAX compared as signed (no input had the high bit set)
src "uint64 MIN/MAX compare signed" src/reduce/reduce.c \
    's/^DEF_INT(u64, uint64_t, uint64_t)/DEF_INT(u64, int64_t, uint64_t)/' \
    '^(unit: reduce kernels|coll: matrix, shm, 2 ranks)$'
# 7: float kernels that skip the last element of odd lengths (the unit
# test used n = 1000 and 6 only)
src "float kernels skip the last odd element" src/reduce/reduce.c \
    '/^#define DEF_FLT/,/^DEF_FLT(f32/s/i < n; i++)/i < (n \& ~(size_t)1); i++)/' \
    '^unit: reduce kernels$'
# 7: float64 sums through float32 (exact small integers cannot tell)
src "float64 sum rounded through float32" src/reduce/reduce.c \
    '/^#define DEF_FLT/,/^DEF_FLT(f32/s/dd\[i\] = aa\[i\] + bb\[i\];/dd[i] = (T)((float)aa[i] + (float)bb[i]);/' \
    '^(unit: reduce kernels|coll: matrix, (shm|tcp), 3 ranks)$'
# 19: the shared area reusing a descriptor line, or data bytes, that a
# rank may still read (test_area had at most 20 in flight: with 64 lines
# only bursts of more than 64 broadcasts catch the first), and an area
# whose pages are faulted in by the calls
src "shared area reuses a line still read" src/coll/area.c \
    's/    s->aneed = k > COLL_AREA_NDESC ? k - COLL_AREA_NDESC : 0;/    s->aneed = 0;/' \
    '^area: shared-area collectives under stress, [38] ranks'
src "shared area reuses data bytes still read" src/coll/area.c \
    's/                if (k - j > s->aneed)/                if (0 \&\& k - j > s->aneed)/' \
    '^area: shared-area collectives under stress, [38] ranks'
src "shared area not mapped at setup" src/coll/area.c \
    's/        rcoll_prefault(a->base\[r\], min, r == rank);/        (void)0;/' \
    '^area: shared-area collectives under stress, 8 ranks'
# 19: waiting ranks that never block (a 2 s spin): test_nonblocking's
# late-rank wait must see them take a core
src "waiting ranks spin instead of blocking" src/util/params.c \
    's/    P("SPIN_US", "200", "int"/    P("SPIN_US", "2000000", "int"/' \
    '^nonblocking \+ 2 threads, (tcp, )?4 ranks$'
# 3: a survivor that prints its verdict ERROR and exits 0, and one that
# prints DONE and exits with an error (destroy failing after a peer died)
src "fault_rank: ERROR with exit status 0" tests/faults/fault_rank.c \
    's/return 3;/return 0;/' \
    '^faults: SIGSTOP names the silent rank, shm$'
src "fault_rank: DONE with exit status 3" tests/faults/fault_rank.c \
    '/printf("DONE/{n;s/return 0;/return 3;/}' \
    '^faults: campaign sample, [0-9]+ random trials .*, shm$'

echo "== harness mutants: scripts/test.sh with a stage that dies"
# 2: the sanitizer stage killed after ASan's part summary (once scored by
# that line as a pass), in the prefixed and the old unprefixed form
stage "sanitizers die after ASan's summary" scripts/check-sanitizers.sh RCOLL_SKIP_TORCH \
    'echo "PASS  unit: reduce kernels"; echo "  [asan] 40 passed, 0 failed"; kill -9 $$'
stage "sanitizers die after an unprefixed summary" scripts/check-sanitizers.sh RCOLL_SKIP_TORCH \
    'echo "40 passed, 0 failed"; kill -9 $$'
stage "torch stage exits 1 after its summary" scripts/check-torch.sh RCOLL_SKIP_SANITIZERS \
    'echo "28 passed, 0 failed, 0 skipped"; exit 1'
stage "torch stage prints no summary" scripts/check-torch.sh RCOLL_SKIP_SANITIZERS \
    'echo "collecting ..."; exit 0'

echo "check-mutants: $killed killed, $survived survived in $(( $(date +%s) - t0 )) s (scratch: $W)"
# a scratch copy made here is removed when every mutant was killed
[ $# = 0 ] && [ "$survived" = 0 ] && rm -rf "$W"
echo "$killed passed, $survived failed"
[ "$survived" = 0 ]
