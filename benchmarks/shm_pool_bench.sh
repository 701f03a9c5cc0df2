#!/bin/sh
# Many ranks of one host within RCOLL_SHM_BUDGET: the pool (RCOLL_SHM_POOL=1,
# 512 KiB chunks) against the lowered chunk (RCOLL_SHM_POOL=0) and against
# no bound at all (RCOLL_SHM_BUDGET=0: full rings, 512 KiB chunks), the
# three interleaved in each of ROUNDS rounds; rcoll-perf time-targeted
# (trials of 0.1 s, median of 3), out-of-place time in us, the median over
# rounds, and the ratios to the pool's time (above 1: the pool is faster).
# Usage: benchmarks/shm_pool_bench.sh BUILDDIR NRANKS ROUNDS
#   e.g. benchmarks/shm_pool_bench.sh build 16 5   (COLL=allgather ...)
# From 32 ranks the unbounded runs are left out: their rings alone take
# NRANKS^2 x 2 MiB of /dev/shm (8 GiB at 64 ranks).
B=$1; N=$2; ROUNDS=$3; COLL=${COLL:-allreduce}
SIZES=${SIZES:-"-b 1M -e 16M -f 4"}
tmp=$(mktemp -d)
perf() { tag=$1; shift
    env RCOLL_TRANSPORTS=shm "$@" "$B/tools/rcoll-run" -n "$N" \
        "$B/benchmarks/rcoll-perf" $COLL $SIZES -T 0.1 -R 3 -w 2 -c 0 -P 0 \
        2> /dev/null | grep -E '^ +[0-9]+ ' | awk '{print $1, $6}' >> "$tmp/$tag.rows"; }
i=0
while [ $i -lt "$ROUNDS" ]; do
    perf pool RCOLL_SHM_POOL=1
    perf lowered RCOLL_SHM_POOL=0
    [ "$N" -lt 32 ] && perf unbounded RCOLL_SHM_BUDGET=0
    i=$((i + 1)); done
med() { awk -v s="$2" '$1 == s {print $2}' "$tmp/$1.rows" | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }
echo "$COLL, $N ranks of one host, shm, median of $ROUNDS rounds (us)"
echo "| size | pool | lowered chunk | no bound | lowered / pool | no bound / pool |"
echo "|---:|---:|---:|---:|---:|---:|"
for s in $(awk '{print $1}' "$tmp/pool.rows" | sort -n | uniq); do
    a=$(med pool $s); b=$(med lowered $s); c=nan
    [ "$N" -lt 32 ] && c=$(med unbounded $s)
    awk -v s=$s -v a=$a -v b=$b -v c=$c 'BEGIN {
        if (c == "nan") printf "| %d | %.0f | %.0f | - | %.2f | - |\n", s, a, b, b / a
        else printf "| %d | %.0f | %.0f | %.0f | %.2f | %.2f |\n", s, a, b, c, b / a, c / a }'; done
rm -rf "$tmp"
