#!/bin/sh
# Before/after: the same rcoll-perf runs from two builds, interleaved round
# by round, medians of the rounds and the ratio old/new of the time per
# size (above 1: the new build is faster).
# usage: benchmarks/ab.sh OLD_BUILDDIR NEW_BUILDDIR [ROUNDS] [NRANKS]
#        (env COLLS="allreduce allgather broadcast", TRANSPORTS=shm,
#        RANGES="small mid large": which of the three size ranges below)
# Iterations are chosen per size range so that a trial lasts >= 0.1 s
# here (the old build may predate rcoll-perf -T): 8 B - 4 KiB -n 60000,
# 32 - 64 KiB -n 6000, 256 KiB -n 2000, 2 - 4 MiB -n 200, 16 - 64 MiB -n 12.
# Broadcast is read in place (MPI_Bcast's shape). Prints a markdown table.
set -u
OLD=${1:?usage: ab.sh OLD_BUILD NEW_BUILD [ROUNDS] [NRANKS]}
NEW=${2:?usage: ab.sh OLD_BUILD NEW_BUILD [ROUNDS] [NRANKS]}
R=${3:-5}
N=${4:-4}
COLLS=${COLLS:-allreduce allgather broadcast}
TL=${TRANSPORTS:-shm}
RANGES=${RANGES:-small mid large}
tmp=$(mktemp -d)
one() { # one BUILD COLL LO HI ITERS -> "size busbw" lines
    col=6; [ "$2" = broadcast ] && col=10
    RCOLL_TRANSPORTS=$TL "$1/tools/rcoll-run" -n "$N" "$1/benchmarks/rcoll-perf" "$2" \
        -b "$3" -e "$4" -f 8 -n "$5" -w 20 -c 0 2> /dev/null |
        awk -v c=$col '$1 ~ /^[0-9]+$/ { print $1, $c }'
}
for r in $(seq 1 "$R"); do
    for coll in $COLLS; do
        for side in old new; do
            b=$OLD; [ $side = new ] && b=$NEW
            { case $RANGES in *small*) one "$b" "$coll" 8 4096 60000
                                       one "$b" "$coll" 32768 65536 6000;; esac
              case $RANGES in *mid*) one "$b" "$coll" 262144 262144 2000
                                     one "$b" "$coll" 2097152 4194304 200;; esac
              case $RANGES in *large*) one "$b" "$coll" 16777216 67108864 12;; esac
            } >> "$tmp/$side.$coll"
        done
    done
done
echo "| collective | size (B) | old time (us) | new time (us) | old / new |"
echo "| --- | ---: | ---: | ---: | ---: |"
for coll in $COLLS; do
    python3 - "$tmp/old.$coll" "$tmp/new.$coll" "$coll" <<'EOF'
import statistics, sys
def load(p):
    d = {}
    for line in open(p):
        s, v = line.split()
        d.setdefault(int(s), []).append(float(v))
    return {k: statistics.median(v) for k, v in d.items()}
o, n = load(sys.argv[1]), load(sys.argv[2])
for s in sorted(o):
    if s in n and o[s] > 0 and n[s] > 0 and s > 0:
        print("| %s | %d | %.2f | %.2f | %.2f |" % (sys.argv[3], s, o[s], n[s],
                                                o[s] / n[s]))
EOF
done
rm -rf "$tmp"
