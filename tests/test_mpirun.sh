#!/bin/sh
# rcoll-perf under Open MPI's mpirun with no rcoll variables: the rendezvous
# goes through PMIx. Usage: test_mpirun.sh BUILDDIR MPIRUN [p2p]
# (p2p: test_p2p and the all-to-all, gather and scatter matrix instead)
B=$1; M=$2
[ -n "$M" ] && [ -x "$M" ] || { echo "no mpirun"; exit 77; }
grep -q '^#define HAVE_PMIX 1' "$B/config.h" || { echo "built without PMIx"; exit 77; }
flags=""
[ "$(id -u)" = 0 ] && flags="--allow-run-as-root"
if [ "$3" = p2p ]; then
    # the point-to-point patterns and the new collectives, ranks from mpirun
    "$M" $flags --oversubscribe -np 5 "$B/tests/test_p2p" -e 4194304 || exit 1
    exec "$M" $flags --oversubscribe -np 5 "$B/tests/test_coll" -q \
        -C alltoall,alltoallv,gather,scatter -N 0,1,7,1023,70001
fi
out=$("$M" $flags --oversubscribe -np 4 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 64M -f 4 -n 3 -w 1 -c 1 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || exit 1
echo "$out" | grep -q "Out of bounds values : 0 OK" || exit 1
# every data row has #wrong 0 twice
echo "$out" | awk '/^ +[0-9]/ { if ($9 != 0 || $13 != 0) bad = 1; rows++ }
    END { exit (bad || rows < 5) }'
