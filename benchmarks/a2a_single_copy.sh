#!/bin/sh
# All-to-all over shared memory: rcoll through the slots (two copies,
# RCOLL_SHM_RNDV_MIN=0), rcoll with whole-transfer single copy (the
# default, 256K) and Open MPI's MPI_Alltoall (vader, CMA single copy),
# interleaved round by round; medians of the rounds, time per call in us
# and Open MPI's time over rcoll's (above 1: rcoll is faster).
# usage: benchmarks/a2a_single_copy.sh BUILDDIR [ROUNDS] [NRANKS]
# -n 40 per size on both sides (fixed counts, not time-targeted): a trial
# lasts 4 ms at 256 KiB, 13 ms at 1 MiB and 0.45 s at 16 MiB (4 ranks here),
# so the small rows are the noisiest.
set -u
B=${1:?usage: a2a_single_copy.sh BUILDDIR [ROUNDS] [NRANKS]}
R=${2:-7}
N=${3:-4}
S=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
mpicc -O2 "$S/mpi_ref_perf.c" -o "$tmp/mpi_ref_perf" || exit 1
MPIFLAGS="--oversubscribe"
[ "$(id -u)" = 0 ] && MPIFLAGS="$MPIFLAGS --allow-run-as-root"
for r in $(seq 1 "$R"); do
    for v in two single ompi; do
        case $v in
        two|single)
            m=0; [ $v = single ] && m=256K
            RCOLL_TRANSPORTS=shm RCOLL_SHM_RNDV_MIN=$m "$B/tools/rcoll-run" -n "$N" \
                "$B/benchmarks/rcoll-perf" alltoall -b 256K -e 16M -f 4 -n 40 -w 5 -c 0 |
                awk -v v=$v '$1 ~ /^[0-9]+$/ { print v, $1, $6 }' ;;
        ompi)
            mpirun $MPIFLAGS -np "$N" "$tmp/mpi_ref_perf" alltoall 262144 16777216 4 40 5 |
                awk -v v=$v 'NF == 2 && $1 ~ /^[0-9]+$/ { print v, $1, $2 }' ;;
        esac
    done >> "$tmp/raw"
done
python3 - "$tmp/raw" "$N" "$R" << 'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    v, s, t = l.split()
    d[(v, int(s))].append(float(t))
print("%s ranks, medians of %s rounds, us per call" % (sys.argv[2], sys.argv[3]))
print("| size | rcoll, two copies | rcoll, single copy | Open MPI | ompi/two | ompi/single |")
print("|---|---|---|---|---|---|")
for s in sorted({s for _, s in d}):
    m = {v: statistics.median(d[(v, s)]) for v in ("two", "single", "ompi")}
    print("| %d KiB | %.1f | %.1f | %.1f | %.2f | %.2f |" % (
        s >> 10, m["two"], m["single"], m["ompi"], m["ompi"] / m["two"],
        m["ompi"] / m["single"]))
PY
rm -rf "$tmp"
