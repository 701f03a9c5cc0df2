#!/bin/sh
# Side by side on this host, in one run: rcoll (TCP transport) against Open
# MPI over TCP on loopback (the same kind of transport) and Open MPI's
# default shared-memory path (vader + tuned collectives). Each point is the
# median of REPS runs (default 3) of the slowest rank's average time.
# usage: benchmarks/compare.sh [BUILDDIR] [NRANKS] [COLLS] [MAXBYTES]
#   defaults: build 4 "allreduce allgather broadcast" 64M
# Needs mpicc and mpirun (Debian: openmpi-bin libopenmpi-dev).
B=${1:-build}; N=${2:-4}; COLLS=${3:-"allreduce allgather broadcast"}
MAX=${4:-67108864}; REPS=${REPS:-3}; ITERS=${ITERS:-10}
S=$(cd "$(dirname "$0")" && pwd)
command -v mpicc > /dev/null || { echo "compare.sh: needs mpicc"; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mpicc -O2 "$S/mpi_ref_perf.c" -o "$tmp/mpi_ref_perf" || exit 1
MPIFLAGS="--oversubscribe"; [ "$(id -u)" = 0 ] && MPIFLAGS="$MPIFLAGS --allow-run-as-root"
TCP="--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for coll in $COLLS; do
    for rep in $(seq "$REPS"); do
        "$B/tools/rcoll-run" -n "$N" "$B/benchmarks/rcoll-perf" "$coll" -b 8 \
            -e "$MAX" -f 4 -n "$ITERS" -w 2 -c 0 |
            awk '/^ +[0-9]/ { print $1, $6 }' > "$tmp/rcoll.$rep"
        mpirun $MPIFLAGS $TCP -np "$N" "$tmp/mpi_ref_perf" "$coll" 8 "$MAX" 4 \
            "$ITERS" 2 > "$tmp/tcp.$rep" 2> /dev/null
        mpirun $MPIFLAGS -np "$N" "$tmp/mpi_ref_perf" "$coll" 8 "$MAX" 4 \
            "$ITERS" 2 > "$tmp/shm.$rep" 2> /dev/null
    done
    echo "# $coll, $N ranks, float, time in us (median of $REPS runs); ratio = Open MPI time / rcoll time (> 1: rcoll faster)"
    printf '%12s %12s %12s %12s %10s %10s\n' bytes rcoll-tcp ompi-tcp ompi-shm "tcp/rcoll" "shm/rcoll"
    for size in $(awk '{ print $1 }' "$tmp/rcoll.1"); do
        r=$(cat "$tmp"/rcoll.* | awk -v s="$size" '$1 == s { print $2 }' | median)
        t=$(cat "$tmp"/tcp.* | awk -v s="$size" '$1 == s { print $2 }' | median)
        m=$(cat "$tmp"/shm.* | awk -v s="$size" '$1 == s { print $2 }' | median)
        awk -v s="$size" -v r="$r" -v t="$t" -v m="$m" 'BEGIN {
            printf "%12d %12.1f %12.1f %12.1f %10.2f %10.2f\n", s, r, t, m,
                   (r > 0 ? t / r : 0), (r > 0 ? m / r : 0) }'
    done
    echo
done
