#!/bin/sh
# rcoll-perf's default trial (-n 20 -w 5) against a long one (-n 1000),
# interleaved: one process per setting, transport, collective and round,
# medians of the rounds, and -n 20's time / -n 1000's (the target: within
# 10%). Above 1: a size's first calls cost more than its later ones
# (page faults in buffers mapped late, warm-up of any kind).
# usage: [B=build] [R=5] [TLS="shm tcp"] [N=2] [C="allreduce allgather
#        broadcast"] [LO=8] [HI=1048576] [F=8] sh benchmarks/first_calls.sh
B=${B:-build}
out=$(mktemp)
for r in $(seq "${R:-5}"); do
 for tl in ${TLS:-shm tcp}; do
  for n in ${N:-2}; do
   for c in ${C:-allreduce allgather broadcast}; do
    for it in 20 1000; do
     col=6; [ "$c" = broadcast ] && col=10 # in place, as MPI_Bcast
     RCOLL_TRANSPORTS=$tl "$B/tools/rcoll-run" -n "$n" \
         "$B/benchmarks/rcoll-perf" "$c" -b "${LO:-8}" -e "${HI:-1048576}" \
         -f "${F:-8}" -n "$it" -c 0 2> /dev/null |
         awk -v it="$it" -v c="$c" -v tl="$tl" -v n="$n" -v col="$col" \
             '$1 ~ /^[0-9]+$/ {print tl, n, c, it, $1, $col}' >> "$out"
    done
   done
  done
 done
done
python3 - "$out" <<'PY'
import collections, statistics as S, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    tl, n, c, it, sz, t = l.split()
    d[(tl, int(n), c, int(it), int(sz))].append(float(t))
print("| transport | ranks | collective | size (B) | -n 20 (us) | -n 1000 (us) | ratio |")
print("|---|---:|---|---:|---:|---:|---:|")
for tl, n, c, sz in sorted({(k[0], k[1], k[2], k[4]) for k in d}):
    a, b = d.get((tl, n, c, 20, sz)), d.get((tl, n, c, 1000, sz))
    if not a or not b:
        continue
    print("| %s | %d | %s | %d | %.2f | %.2f | %.2f |" % (
        tl, n, c, sz, S.median(a), S.median(b), S.median(a) / S.median(b)))
PY
rm -f "$out"
