#!/bin/sh
# Small messages, rcoll (shm) against Open MPI (vader + tuned) on this host:
# 2 and 4 ranks, all-reduce, all-gather, broadcast (in place for both),
# reduce-scatter, all-to-all, 8 B - 32 KiB. Interleaved (each library once
# per round, R rounds, default 5), both time-targeted (-T 0.1 -R 3 for
# rcoll-perf, the same for benchmarks/mpi_ref_perf.c), medians of the
# rounds. Prints a markdown table (with each row's lowest and highest
# per-round ratio). Needs a build in ./build and mpicc.
# TL=tcp compares rcoll over TCP with Open MPI's btl tcp (--mca btl
# tcp,self); N="2 4" picks the rank counts, C the collectives. DIRTY=1:
# both store to every cache line they send before each call (rcoll-perf
# -D 1, mpi_ref_perf's DIRTY=1), as a program whose data changes would.
# LO=16 starts the sizes at 16 B instead of 8 (x4 per row: 16 B - 64 KiB
# instead of 8 B - 32 KiB).
# RAW=FILE keeps the raw rows (library, ranks, collective, size, us; one
# line per round) in FILE.
# usage: [TL=tcp] [N="2 4"] [DIRTY=1] [LO=16] [RAW=FILE] R=5 sh benchmarks/vs_ompi_small.sh
R=${R:-5}
LO=${LO:-8}
TL=${TL:-shm}
NS=${N:-2 4}
CS=${C:-allreduce allgather broadcast reduce_scatter alltoall}
mca=""; [ "$TL" = tcp ] && mca="--mca btl tcp,self"
export DIRTY=${DIRTY:-0}
B=$(pwd)/build
tmp=$(mktemp -d)
mpicc -O2 -o "$tmp/mpi_ref_perf" benchmarks/mpi_ref_perf.c || exit 1
out=$tmp/raw; : > $out
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
for r in $(seq 1 $R); do
 for N in $NS; do
  for C in $CS; do
   col=6; [ $C = broadcast ] && col=10
   RCOLL_TRANSPORTS=$TL $B/tools/rcoll-run -n $N $B/benchmarks/rcoll-perf $C -b $LO -e 65536 -f 4 -T 0.1 -R 3 -c 0 -D $DIRTY 2>/dev/null | awk -v t=rcoll -v n=$N -v c=$C -v col=$col '$1 ~ /^[0-9]+$/ {print t, n, c, $1, $col}' >> $out
   mpirun $root $mca -x DIRTY --oversubscribe -n $N "$tmp/mpi_ref_perf" $C $LO 65536 4 0 5 0.1 3 2>/dev/null | awk -v n=$N -v c=$C '$1 ~ /^[0-9]+$/ {print "ompi", n, c, $1, $2}' >> $out
  done
 done
done
[ -n "${RAW:-}" ] && cp "$out" "$RAW"
python3 - "$out" <<'PY'
import statistics as S, collections, sys
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    t,n,c,sz,v=l.split(); d[(t,int(n),c,int(sz))].append(float(v))
keys=sorted({k[1:] for k in d})
# the last column: Open MPI / rcoll of each round (the rows are appended
# round by round), lowest to highest: how far one round can mislead
print("| ranks | collective | size (B) | rcoll (us) | Open MPI (us) | Open MPI / rcoll | per round |")
print("|---:|---|---:|---:|---:|---:|---:|")
for n,c,sz in keys:
    a=d.get(('rcoll',n,c,sz)); b=d.get(('ompi',n,c,sz))
    if not a or not b or sz < 8 * n: continue
    ma,mb=S.median(a),S.median(b)
    pr=sorted(y/x for x,y in zip(a,b))
    print("| %d | %s | %d | %.2f | %.2f | %.2f | %.2f-%.2f |"%(n,c,sz,ma,mb,mb/ma,pr[0],pr[-1]))
PY
