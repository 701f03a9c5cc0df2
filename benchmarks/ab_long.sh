#!/bin/sh
# Before/after in long runs: one rcoll-perf process per build, size and
# round (-n ITERS calls of one size, in place), the builds interleaved,
# medians of the rounds and old / new of the time (above 1: the new build
# is faster), with the lowest and highest per-round ratio. Long runs of
# one size show a change of 5-10% that the time-targeted sweeps, whose
# trials of 0.1 s follow each other, bury in this VM's noise.
# OLD_BUILD "ompi": the old side is Open MPI (benchmarks/mpi_ref_perf.c,
# the same calls in place; --mca btl tcp,self with TL=tcp), so the ratio
# is Open MPI's time / rcoll's (above 1: rcoll is faster).
# usage: benchmarks/ab_long.sh OLD_BUILD NEW_BUILD
#        env R (rounds, 5), N ("2 4"), C (collectives, broadcast),
#        SIZES ("16 64 256 1024 4096"), ITERS (60000), TL (tcp)
set -u
OLD=${1:?usage: ab_long.sh OLD_BUILD NEW_BUILD}
NEW=${2:?usage: ab_long.sh OLD_BUILD NEW_BUILD}
tmp=$(mktemp -d)
if [ "$OLD" = ompi ]; then
 mpicc -O2 -o "$tmp/mpi_ref_perf" "$(dirname "$0")/mpi_ref_perf.c" || exit 1
 mca="--mca btl vader,self"; [ "${TL:-tcp}" = tcp ] && mca="--mca btl tcp,self"
 root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
fi
for r in $(seq 1 "${R:-5}"); do
 for n in ${N:-2 4}; do
  for c in ${C:-broadcast}; do
   for sz in ${SIZES:-16 64 256 1024 4096}; do
    for side in old new; do
     b=$OLD; [ $side = new ] && b=$NEW
     if [ "$b" = ompi ]; then
      mpirun $root $mca --oversubscribe -n "$n" "$tmp/mpi_ref_perf" "$c" \
          "$sz" "$sz" 2 "${ITERS:-60000}" 1000 2> /dev/null |
          awk -v n=$n -v c=$c '$1 ~ /^[0-9]+$/ {print "old", n, c, $1, $2}' \
          >> "$tmp/raw"
      continue
     fi
     RCOLL_TRANSPORTS=${TL:-tcp} "$b/tools/rcoll-run" -n "$n" \
         "$b/benchmarks/rcoll-perf" "$c" -b "$sz" -e "$sz" -n "${ITERS:-60000}" \
         -w 1000 -c 0 -P 1 2> /dev/null |
         awk -v t=$side -v n=$n -v c=$c '$1 ~ /^[0-9]+$/ {print t, n, c, $1, $10}' \
         >> "$tmp/raw"
    done
   done
  done
 done
done
python3 - "$tmp/raw" <<'PY'
import statistics as S, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    t, n, c, sz, v = l.split()
    d[(t, int(n), c, int(sz))].append(float(v))
print("| ranks | collective | size (B) | old (us) | new (us) | old / new | per round |")
print("|---:|---|---:|---:|---:|---:|---:|")
for n, c, sz in sorted({k[1:] for k in d}):
    a, b = d.get(("old", n, c, sz)), d.get(("new", n, c, sz))
    if not a or not b:
        continue
    pr = sorted(x / y for x, y in zip(a, b))
    print("| %d | %s | %d | %.2f | %.2f | %.2f | %.2f-%.2f |" % (
        n, c, sz, S.median(a), S.median(b), S.median(a) / S.median(b), pr[0], pr[-1]))
PY
rm -rf "$tmp"
