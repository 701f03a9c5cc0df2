#!/bin/sh
# TCP connections on first use (RCOLL_TCP_CONNECT=lazy; auto from 33 ranks).
#  0. the collectives matrix over 5 ranks (bit-exact against tests/ref.h);
#  1. 8 ranks, every send of an exchange posted before any receive (so
#     pairs connect to each other at once): results checked, every socket
#     of every pair made exactly once (the debug log's "connected" on one
#     side matches one "accepted" on the other), the listener kept;
#  2. a ring exchange (8 ranks) connects ring neighbours (and the partners
#     of one small all-reduce) only;
#  3. 64 ranks over TCP with 100 open files allowed (hard limit): the
#     default (lazy at 64 ranks) runs all-reduce, all-gather and broadcast,
#     results checked, and all-to-all, for which the tuner leaves out the
#     pairwise exchange (every peer) as the descriptors do not allow it; a
#     full mesh at init (eager) fails at once, naming RLIMIT_NOFILE; so
#     does pairwise all-to-all forced by RCOLL_ALGO (64 files:
#     tests/test_boot_fds.sh).
# usage: test_tcp_lazy.sh BUILD
B=$1
L=$B/tests/logs
mkdir -p "$L"
fail() { echo "FAIL: $*"; exit 1; }

# 0. every collective, type and op, 5 ranks
out=$L/lazy_coll.out
RCOLL_TCP_CONNECT=lazy RCOLL_TRANSPORTS=tcp RCOLL_TIMEOUT=60 "$B/tools/rcoll-run" -n 5 \
    "$B/tests/test_coll" -q -N 0,1,7,1023,70001 > "$out" 2>&1 ||
    { tail -n 20 "$out"; fail "test_coll, lazy"; }
tail -n 1 "$out"

# 1. crossing connections
out=$L/lazy_p2p.out
RCOLL_TCP_CONNECT=lazy RCOLL_TRANSPORTS=tcp RCOLL_TIMEOUT=60 RCOLL_DEBUG=debug \
    RCOLL_DEBUG_SUBSYS=net "$B/tools/rcoll-run" -n 8 "$B/tests/test_p2p" -L 2 \
    -T allpairs,ring > "$out" 2>&1 || { tail -n 20 "$out"; fail "test_p2p, lazy"; }
grep 'test_p2p: 8 ranks' "$out"
# "A connected socket k to rank B" and "B accepted socket k from rank A":
# one line each per (pair, socket), and they match
sed -n -E 's/.*tcp: rank ([0-9]+) connected socket ([0-9]+) to rank ([0-9]+) on first use.*/\1 \3 \2/p' "$out" | sort > "$L/lazy_conn.txt"
sed -n -E 's/.*tcp: rank ([0-9]+) accepted socket ([0-9]+) from rank ([0-9]+) on first use.*/\3 \1 \2/p' "$out" | sort > "$L/lazy_acc.txt"
n=$(wc -l < "$L/lazy_conn.txt")
[ "$n" -gt 0 ] || fail "no connection on first use logged"
cmp -s "$L/lazy_conn.txt" "$L/lazy_acc.txt" || fail "connected and accepted sockets differ: $(diff "$L/lazy_conn.txt" "$L/lazy_acc.txt" | head -n 5)"
dup=$(awk '{ a = $1 < $2 ? $1 : $2; b = $1 < $2 ? $2 : $1; print a, b, $3 }' "$L/lazy_conn.txt" | sort | uniq -d | head -n 1)
[ -z "$dup" ] || fail "socket made twice: $dup"
pairs=$(awk '{ a = $1 < $2 ? $1 : $2; b = $1 < $2 ? $2 : $1; print a, b }' "$L/lazy_conn.txt" | sort -u | wc -l)
[ "$pairs" = 28 ] || fail "$pairs pairs connected, want all 28 of 8 ranks"
echo "ok: 8 ranks, $n sockets made once each over 28 pairs, $(grep -c 'they crossed' "$out") crossed connections resolved"

# 2. only the peers a program talks to: a ring exchange (r -> r+1) and
#    test_p2p's closing small all-reduce (recursive doubling, r ^ 2^k)
out=$L/lazy_ring.out
RCOLL_TCP_CONNECT=lazy RCOLL_TRANSPORTS=tcp RCOLL_DEBUG=debug RCOLL_DEBUG_SUBSYS=net \
    "$B/tools/rcoll-run" -n 8 "$B/tests/test_p2p" -T ring > "$out" 2>&1 ||
    { tail -n 20 "$out"; fail "ring exchange, lazy"; }
sed -n -E 's/.*tcp: rank ([0-9]+) connected socket [0-9]+ to rank ([0-9]+) on first use.*/\1 \2/p' "$out" |
    sort -u > "$L/lazy_ring.txt"
far=$(awk '{ d = ($1 - $2 + 8) % 8; x = $1 == $2 ? 0 : 1; a = $1; b = $2
             while (a || b) { if (a % 2 != b % 2) x *= 2; a = int(a / 2); b = int(b / 2) }
             if (d != 1 && d != 7 && x != 2) print $1 "-" $2 }' "$L/lazy_ring.txt" | head -n 1)
[ -z "$far" ] || fail "ranks $far connected: neither ring neighbours nor r ^ 2^k"
most=$(awk '{ p[$1] = p[$1] + 1; p[$2] = p[$2] + 1 } END { m = 0; for (r in p) if (p[r] > m) m = p[r]; print m }' "$L/lazy_ring.txt")
[ "$most" -lt 7 ] || fail "a rank connected to all 7 peers"
echo "ok: a ring exchange and one all-reduce: $(wc -l < "$L/lazy_ring.txt") peer pairs connected, at most $most peers per rank of 7"

# 3. 64 ranks, 100 open files
N=64
run() { # run NAME PORT MODE COLL [ALGO]: every rank under a hard limit
    name=$1; port=$2; mode=$3; coll=$4; algo=${5:-}; lim=100
    pids=""
    r=0
    while [ $r -lt $N ]; do
        env RCOLL_ROOT=127.0.0.1:$port RCOLL_SIZE=$N RCOLL_RANK=$r \
            RCOLL_TRANSPORTS=tcp RCOLL_TIMEOUT=60 RCOLL_TCP_CONNECT=$mode \
            RCOLL_ALGO=$algo RCOLL_SECRET=00112233445566778899aabbccddeeff \
            sh -c "ulimit -n $lim || exit 9; exec \"$B/benchmarks/rcoll-perf\" $coll -b 16 -e 1M -f 256 -n 2 -w 1 -c 1" \
            > "$L/lazy64_${name}_$r.out" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    bad=0
    for p in $pids; do wait $p || bad=$((bad + 1)); done
    echo $bad
}
port=29690
# all-to-all: the tuner leaves out pairwise (every peer) for Bruck
for coll in allreduce allgather broadcast alltoall; do
    port=$((port + 1))
    t0=$(date +%s)
    bad=$(run $coll $port auto $coll)
    [ "$bad" = 0 ] || { tail -n 3 "$L/lazy64_${coll}_0.out"; fail "$coll: $bad of $N ranks failed"; }
    grep -q "Out of bounds values : 0 OK" "$L/lazy64_${coll}_0.out" || fail "$coll: wrong results"
    echo "ok: $N ranks over tcp, 100 open files each: $coll 16 B, 4 KiB, 1 MiB checked ($(($(date +%s) - t0)) s)"
done
# a full mesh at init, and pairwise all-to-all forced (RCOLL_ALGO)
for what in eager:allreduce: auto:alltoall:alltoall:pairwise; do
    mode=${what%%:*}; rest=${what#*:}; coll=${rest%%:*}; algo=${rest#*:}
    port=$((port + 1))
    t0=$(date +%s)
    bad=$(run $mode $port $mode $coll $algo)
    t=$(($(date +%s) - t0))
    [ "$bad" -gt 0 ] || fail "$mode $coll: every rank succeeded with 100 open files?"
    grep -l "RLIMIT_NOFILE of 100 open files" "$L"/lazy64_${mode}_*.out > /dev/null ||
        fail "$mode $coll: no rank names RLIMIT_NOFILE"
    [ $t -lt 30 ] || fail "$mode $coll: took $t s (a rank waited for its timeout)"
    echo "ok: $mode $coll: $bad of $N ranks failed in $t s, naming the limit"
done
