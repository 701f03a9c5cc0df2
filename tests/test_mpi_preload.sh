#!/bin/sh
# librcoll-mpi under unmodified MPI programs: tests/mpi/test_mpi under
# mpirun with and without LD_PRELOAD, on 2..5 ranks; with it, the verbose
# log must show the calls ran on rcoll (and the fallbacks on MPI), and a
# failure must reach an MPI_ERRORS_RETURN handler with rcoll's message.
# Usage: test_mpi_preload.sh BUILDDIR MPIRUN
B=$1; M=$2
[ -n "$M" ] && [ -x "$M" ] || { echo "no mpirun"; exit 77; }
LIB="$B/.libs/librcoll-mpi.so"
[ -f "$LIB" ] || { echo "librcoll-mpi.so not built (no MPI at configure)"; exit 77; }
T="$B/tests/mpi/test_mpi"
flags="--oversubscribe"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
for np in 2 3 5; do
    echo "== $np ranks, MPI alone"
    "$M" $flags -np $np "$T" || { echo "FAIL: without the preload, $np ranks"; exit 1; }
    echo "== $np ranks, LD_PRELOAD=librcoll-mpi.so"
    # (every size on rcoll here: the default hands some back to MPI)
    "$M" $flags -np $np -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 \
        -x RCOLL_MPI_HANDBACK=none "$T" 2> "$log/v$np" || { tail -20 "$log/v$np"; echo "FAIL: with the preload, $np ranks"; exit 1; }
    # every call took over shows up as run on rcoll, on every rank
    for c in MPI_Allreduce MPI_Iallreduce MPI_Reduce MPI_Ireduce \
             MPI_Reduce_scatter_block MPI_Ireduce_scatter_block \
             MPI_Reduce_scatter MPI_Ireduce_scatter MPI_Bcast MPI_Ibcast \
             MPI_Allgather MPI_Iallgather MPI_Alltoall MPI_Ialltoall \
             MPI_Alltoallv MPI_Ialltoallv MPI_Gather MPI_Igather \
             MPI_Scatter MPI_Iscatter MPI_Barrier MPI_Ibarrier; do
        k=$(grep -c "rank 0: $c [0-9]* B -> rcoll" "$log/v$np")
        [ "$k" -gt 0 ] || { echo "FAIL: $c never ran on rcoll ($np ranks)"; exit 1; }
    done
    grep -q "MPI_Allreduce .* -> mpi (datatype or op)" "$log/v$np" ||
        { echo "FAIL: no fallback to MPI logged for a user op / MINLOC"; exit 1; }
    grep -q "MPI_Bcast .* -> rcoll (packed)" "$log/v$np" ||
        { echo "FAIL: a derived datatype was not packed onto rcoll"; exit 1; }
    echo "   $(grep -c -- '-> rcoll' "$log/v$np") calls on rcoll, $(grep -c -- '-> mpi' "$log/v$np") on MPI"
done
echo "== 3 ranks, MPI_Init (thread level single), with the preload"
"$M" $flags -np 3 -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 -x RCOLL_MPI_HANDBACK=none \
    "$T" single 2> "$log/single" || { echo "FAIL: thread level single"; exit 1; }
# below MPI_THREAD_MULTIPLE the non-blocking forms stay with MPI
grep -q "MPI_Allreduce [0-9]* B -> rcoll" "$log/single" &&
    grep -q "MPI_Iallreduce .* -> mpi" "$log/single" &&
    ! grep -q "MPI_I[a-z_]* [0-9]* B -> rcoll" "$log/single" ||
    { echo "FAIL: at MPI_THREAD_SINGLE a non-blocking call ran on rcoll (or nothing did)"; exit 1; }
echo "== mismatched calls: MPI_ERRORS_RETURN sees rcoll's error"
RCOLL_TIMEOUT=10 RCOLL_MPI_HANDBACK=none "$M" $flags -np 2 -x LD_PRELOAD="$LIB" -x RCOLL_TIMEOUT -x RCOLL_MPI_HANDBACK "$T" errors ||
    { echo "FAIL: the error did not reach the handler"; exit 1; }
echo "== RCOLL_MPI_COLLS=bcast: only broadcasts on rcoll"
"$M" $flags -np 2 -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 -x RCOLL_MPI_COLLS=bcast \
    -x RCOLL_MPI_HANDBACK=none \
    "$T" 2> "$log/colls" || { echo "FAIL: RCOLL_MPI_COLLS=bcast"; exit 1; }
grep -- "-> rcoll" "$log/colls" | grep -Evq "MPI_(Bcast|Ibcast) " &&
    { echo "FAIL: RCOLL_MPI_COLLS=bcast ran other calls on rcoll"; exit 1; }
grep -q "MPI_Bcast .* -> rcoll" "$log/colls" || { echo "FAIL: no bcast on rcoll"; exit 1; }
echo "== RCOLL_MPI_HANDBACK=bcast:2-2:0-1K: broadcasts under 1 KiB on 2 ranks go to MPI"
"$M" $flags -np 2 -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 \
    -x RCOLL_MPI_HANDBACK=bcast:2-2:0-1K "$T" 2> "$log/hb" || { echo "FAIL: RCOLL_MPI_HANDBACK"; exit 1; }
grep -q "MPI_Bcast .* -> mpi (size" "$log/hb" || { echo "FAIL: no broadcast handed back"; exit 1; }
grep "MPI_I*[Bb]cast [0-9]* B -> rcoll" "$log/hb" | awk '$5 < 1024 { bad = 1 } END { exit !bad }' &&
    { echo "FAIL: a broadcast under 1 KiB ran on rcoll"; exit 1; }
grep -q "MPI_Bcast [0-9]* B -> rcoll" "$log/hb" || { echo "FAIL: no larger broadcast on rcoll"; exit 1; }
# Fortran: Open MPI's bindings call PMPI_X, which this library defines
FC=$(command -v mpif90 || command -v mpifort)
[ -n "$FC" ] || { echo "FAIL: no mpif90 (libopenmpi-dev brings gfortran)"; exit 1; }
"$FC" -o "$log/tf" "$(dirname "$0")/mpi/test_mpi_f.f90" || { echo "FAIL: mpif90"; exit 1; }
"$M" $flags -np 3 -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 "$log/tf" 2> "$log/f" ||
    { tail -5 "$log/f"; echo "FAIL: the Fortran program"; exit 1; }
for c in MPI_Allreduce MPI_Bcast; do
    grep -q "rank 0: $c .* -> rcoll" "$log/f" || { echo "FAIL: Fortran $c did not run on rcoll"; exit 1; }
done
echo "   Fortran: $(grep -c -- '-> rcoll' "$log/f") calls on rcoll"
# mpi4py (Debian's python3-mpi4py) with numpy: the same digest of every
# result with and without the preload
PY=/usr/bin/python3
if $PY -c "import mpi4py, numpy" 2> /dev/null; then
    for np in 2 4; do
        a=$("$M" $flags -np $np $PY "$(dirname "$0")/mpi/mpi4py_check.py") ||
            { echo "FAIL: mpi4py without the preload, $np ranks"; exit 1; }
        b=$("$M" $flags -np $np -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 \
                $PY "$(dirname "$0")/mpi/mpi4py_check.py" 2> "$log/py") ||
            { tail -5 "$log/py"; echo "FAIL: mpi4py with the preload, $np ranks"; exit 1; }
        echo "   $a"
        echo "   $b ($(grep -c -- '-> rcoll' "$log/py") calls on rcoll)"
        [ "$a" = "$b" ] || { echo "FAIL: mpi4py results differ with the preload"; exit 1; }
        grep -q -- "-> rcoll" "$log/py" || { echo "FAIL: mpi4py ran nothing on rcoll"; exit 1; }
    done
else
    echo "FAIL: python3-mpi4py and python3-numpy are needed (scripts/install-deps.sh)"
    exit 1
fi
# HPC Challenge (Debian's hpcc) on 4 ranks: every verification passes
command -v hpcc > /dev/null || { echo "FAIL: hpcc is needed (scripts/install-deps.sh)"; exit 1; }
mkdir "$log/hpcc" && cp "$(dirname "$0")/mpi/hpccinf.txt" "$log/hpcc/"
( cd "$log/hpcc" && "$M" $flags -np 4 -x LD_PRELOAD="$LIB" -x RCOLL_MPI_VERBOSE=1 hpcc 2> v.log ) ||
    { tail -5 "$log/hpcc/v.log"; echo "FAIL: hpcc"; exit 1; }
o="$log/hpcc/hpccoutf.txt"
grep -q "^Success=1" "$o" && ! grep -q "FAILED" "$o" &&
    ! grep -Eq "[1-9][0-9]* tests completed and failed" "$o" &&
    grep -q "(passed)" "$o" || { grep -iE "passed|failed|Success" "$o"; echo "FAIL: hpcc's verification"; exit 1; }
echo "   hpcc: $(grep -c 'PASSED' "$o") HPL/PTRANS lines PASSED, $(grep -c '(passed)' "$o") RandomAccess checks passed; $(grep -c -- '-> rcoll' "$log/hpcc/v.log") calls on rcoll"
echo "ok"
