#!/bin/sh
# Before/after for sub-microsecond figures: one rcoll-perf binary (this
# build's), each library picked with LD_LIBRARY_PATH, ranks pinned one per
# core (rank r on core r % ncores), the libraries interleaved round by
# round, time-targeted trials (-T 0.2 -R 3). Prints each library's median
# and the median of the per-round ratios to the first library (above 1:
# faster than the first). The VM's seconds-long fast and slow states move
# whole runs between ~0.1 and ~0.3 us, so only same-round ratios say much.
# usage: benchmarks/ab_libs.sh COLL SIZE ROUNDS LIBDIR [LIBDIR ...]
#   e.g. keep the old library: cp -L build/.libs/librcoll.so.0 /tmp/old/
#   (env N=2 ranks, TRANSPORTS=shm)
set -u
C=${1:?usage: ab_libs.sh COLL SIZE ROUNDS LIBDIR...}
S=${2:?size}
R=${3:?rounds}
shift 3
N=${N:-2}
B=$(cd "$(dirname "$0")/.." && pwd)/build
ncores=$(nproc)
col=6; [ "$C" = broadcast ] && col=10 # broadcast in place, as MPI_Bcast
pin=$(mktemp)
cat > "$pin" <<'EOF'
#!/bin/sh
exec taskset -c $((RCOLL_RANK % $(nproc))) "$@"
EOF
chmod +x "$pin"
for r in $(seq 1 "$R"); do
    i=0
    for L in "$@"; do
        v=$(LD_LIBRARY_PATH=$L RCOLL_TRANSPORTS=${TRANSPORTS:-shm} \
            "$B/tools/rcoll-run" -n "$N" "$pin" "$B/benchmarks/.libs/rcoll-perf" \
            "$C" -b "$S" -e "$S" -T 0.2 -R 3 -c 0 2> /dev/null |
            awk -v c=$col '$1 ~ /^[0-9]+$/ { print $c }')
        echo "$r $i $L ${v:-nan}"
        i=$((i + 1))
    done
done | python3 -c '
import sys, statistics as S, collections
t = collections.defaultdict(dict)
names = {}
for l in sys.stdin:
    r, i, lib, v = l.split()
    t[int(i)][int(r)] = float(v)
    names[int(i)] = lib
for i in sorted(t):
    v = [x for x in t[i].values() if x == x]
    line = "%-28s median %.3f us  rounds %s" % (names[i], S.median(v), v)
    if i:
        q = [t[0][r] / t[i][r] for r in t[i] if r in t[0] and t[i][r] > 0]
        line += "  ratio to %s: %.2f" % (names[0], S.median(q))
    print(line)
'
rm -f "$pin"
