#!/bin/sh
# One MPI benchmark program (benchmarks/mpi_ref_perf.c, built with mpicc),
# run under mpirun with and without LD_PRELOAD=librcoll-mpi.so, the two
# interleaved round by round (the order alternating), time-targeted trials
# (0.05 s, median of 3) per size. Prints per collective, ranks and size
# the median time of each and the median of the per-round ratios
# MPI/preload (above 1: the preload is faster). RCOLL_MPI_HANDBACK, if
# set, is passed to the preloaded runs (=none: every size on rcoll).
# usage: benchmarks/mpi_preload.sh ROUNDS "NP..." "COLL..." [MINB MAXB]
#   e.g. benchmarks/mpi_preload.sh 5 "2 4" "allreduce allgather broadcast alltoall"
set -u
R=${1:?rounds}; NPS=${2:?ranks}; COLLS=${3:?collectives}
MINB=${4:-8}; MAXB=${5:-67108864}
S=$(cd "$(dirname "$0")/.." && pwd)
B=${RCOLL_BUILDDIR:-$S/build}
LIB=$B/.libs/librcoll-mpi.so
[ -f "$LIB" ] || { echo "no $LIB (configure found no MPI?)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 "$S/benchmarks/mpi_ref_perf.c" -o "$tmp/perf" || exit 1
flags="--oversubscribe --bind-to none"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
raw=$tmp/raw
for r in $(seq 1 "$R"); do
    for np in $NPS; do
        for c in $COLLS; do
            if [ $((r % 2)) = 1 ]; then order="mpi rcoll"; else order="rcoll mpi"; fi
            for who in $order; do
                pre=""
                [ $who = rcoll ] && pre="-x LD_PRELOAD=$LIB"
                [ $who = rcoll ] && [ -n "${RCOLL_MPI_HANDBACK+x}" ] &&
                    pre="$pre -x RCOLL_MPI_HANDBACK"
                mpirun $flags -np "$np" $pre "$tmp/perf" "$c" "$MINB" "$MAXB" 4 0 2 0.05 3 2> /dev/null |
                    awk -v r="$r" -v np="$np" -v c="$c" -v w="$who" \
                        '/^[0-9]/ { print r, np, c, w, $1, $2 }' >> "$raw"
            done
        done
    done
    echo "round $r done" >&2
done
python3 - "$raw" <<'PY'
import sys, statistics as st
t = {}
for line in open(sys.argv[1]):
    r, np, c, w, b, us = line.split()
    t.setdefault((c, int(np), int(b)), {}).setdefault(w, {})[r] = float(us)
print("| collective | ranks | bytes | MPI us | preload us | MPI/preload |")
print("| --- | --- | --- | --- | --- | --- |")
for (c, np, b) in sorted(t):
    d = t[(c, np, b)]
    rs = [d["mpi"][r] / d["rcoll"][r] for r in d.get("mpi", {}) if r in d.get("rcoll", {}) and d["rcoll"][r] > 0]
    if not rs:
        continue
    print(f"| {c} | {np} | {b} | {st.median(d['mpi'].values()):.1f} | "
          f"{st.median(d['rcoll'].values()):.1f} | {st.median(rs):.2f} |")
PY
