#!/bin/sh
# The bootstrap root under a low open-file limit: 64 ranks over TCP, each
# allowed 64 open files (hard limit). The root (a thread of rank 0) keeps
# the connections of the ranks it has descriptors for and calls the others
# back on their listeners when all joined.
#  1. all-reduce, all-gather and broadcast run, results checked, and some
#     ranks were called back; so does test_scale (all-to-all included: the
#     tuner leaves out the algorithms that need every peer);
#  2. a rank never comes: every rank, called back or not, names it within
#     RCOLL_TIMEOUT + a few seconds;
#  3. rank 0 (the root) is killed while ranks wait for its call: they
#     notice within seconds (a refused connection), naming rank 0;
#  4. a rank that waits for its call is killed: the root cannot call it
#     back, and every other rank names it.
# usage: test_boot_fds.sh BUILD
B=$1
L=$B/tests/logs
mkdir -p "$L"
fail() { echo "FAIL: $*"; exit 1; }
N=64
LIM=64

start() { # start NAME PORT TIMEOUT COLL RANK...: ranks in the background
    name=$1; port=$2; to=$3; coll=$4; shift 4
    for r in "$@"; do
        env RCOLL_ROOT=127.0.0.1:$port RCOLL_SIZE=$N RCOLL_RANK=$r \
            RCOLL_TRANSPORTS=tcp RCOLL_TIMEOUT=$to RCOLL_DEBUG=debug \
            RCOLL_DEBUG_SUBSYS=boot,init,tune RCOLL_SECRET=00112233445566778899aabbccddeeff \
            sh -c "ulimit -n $LIM || exit 9; if [ $coll = scale ]; then exec \"$B/tests/test_scale\" 0; else exec \"$B/benchmarks/rcoll-perf\" $coll -b 16 -e 1M -f 256 -n 2 -w 1 -c 1; fi" \
            > "$L/bootfd_${name}_$r.out" 2>&1 &
        echo "$r $!" >> "$L/bootfd_${name}.pids"
    done
}
pid_of() { awk -v r="$2" '$1 == r { print $2 }' "$L/bootfd_$1.pids"; }
wait_all() { # wait_all NAME: $bad = the number of ranks that failed
    bad=0
    for p in $(awk '{ print $2 }' "$L/bootfd_$1.pids"); do
        wait "$p" || bad=$((bad + 1))
    done
}
ranks() { seq 0 $((N - 1)) | grep -v -x -e "$1" -e "${2:--1}"; }
rm -f "$L"/bootfd_*

# 1. the collectives
port=29750
for coll in allreduce allgather broadcast; do
    port=$((port + 1))
    t0=$(date +%s)
    start $coll $port 60 $coll $(seq 0 $((N - 1)))
    wait_all $coll
    [ "$bad" = 0 ] || { tail -n 3 "$L/bootfd_${coll}_0.out"; fail "$coll: $bad of $N ranks failed"; }
    grep -q "Out of bounds values : 0 OK" "$L/bootfd_${coll}_0.out" || fail "$coll: wrong results"
    called=$(grep -l "waits for the root's call" "$L"/bootfd_${coll}_*.out | wc -l)
    [ "$called" -gt 0 ] || fail "$coll: no rank was called back (the root kept all $N with $LIM files?)"
    echo "ok: $N ranks, $LIM open files each: $coll checked, $called ranks called back ($(($(date +%s) - t0)) s)"
done
# test_scale: all-reduce 8 B and 1 MiB, all-gather, broadcast, all-to-all
# (Bruck: the tuner leaves out pairwise, which needs every peer) and a
# ring exchange, checked
port=$((port + 1))
start scale $port 60 scale $(seq 0 $((N - 1)))
wait_all scale
[ "$bad" = 0 ] || { tail -n 3 "$L/bootfd_scale_0.out"; fail "test_scale: $bad of $N ranks failed"; }
grep -q "0 rank(s) with wrong results" "$L/bootfd_scale_0.out" || fail "test_scale: wrong results"
grep -q "the algorithms that need more partners are left out" "$L/bootfd_scale_0.out" ||
    fail "test_scale: the tuner was not told that the descriptors are few"
grep -q "alltoall .*algorithm bruck" "$L/bootfd_scale_0.out" ||
    fail "test_scale: all-to-all did not run as Bruck: $(grep -o 'alltoall .*algorithm [a-z_]*' "$L/bootfd_scale_0.out" | head -n 1)"
echo "ok: $N ranks, $LIM open files each: $(grep -o 'test_scale: .*init [0-9.]* s' "$L/bootfd_scale_0.out"), all six checks"

# 2. rank 50 never comes
port=$((port + 1))
t0=$(date +%s)
start missing $port 5 allreduce $(ranks 50)
wait_all missing
t=$(($(date +%s) - t0))
named=$(grep -l "missing: rank 50 " "$L"/bootfd_missing_*.out | wc -l)
[ "$named" = $((N - 1)) ] || fail "missing rank: $named of $((N - 1)) ranks name rank 50"
grep -l "waits for the root's call" "$L"/bootfd_missing_*.out > /dev/null ||
    fail "missing rank: no rank was waiting for a call"
[ $t -lt 25 ] || fail "missing rank: took $t s with RCOLL_TIMEOUT=5"
echo "ok: a rank missing: all $((N - 1)) others name it in $t s"

# 3. the root dies while ranks wait for its call (rank 63 holds it back)
port=$((port + 1))
t0=$(date +%s)
start root $port 60 allreduce $(ranks 63)
sleep 4
kill -9 "$(pid_of root 0)"
wait_all root
t=$(($(date +%s) - t0))
[ "$bad" = $((N - 1)) ] || fail "root killed: only $bad ranks failed"
waiting=$(grep -l "waits for the root's call" "$L"/bootfd_root_*.out | wc -l)
[ "$waiting" -gt 0 ] || fail "root killed: no rank was waiting for a call"
named=$(grep -l "rank 0 died or was killed" "$L"/bootfd_root_*.out | wc -l)
[ "$named" = $((N - 2)) ] || fail "root killed: $named of $((N - 2)) ranks name rank 0: $(grep -L 'rank 0 died' "$L"/bootfd_root_*.out | head -n 3)"
[ $t -lt 20 ] || fail "root killed: took $t s (RCOLL_TIMEOUT is 60)"
echo "ok: the root killed: all $((N - 2)) other ranks name rank 0 in $t s ($waiting were waiting for its call)"

# 4. a rank waiting for its call dies, then the last one comes
port=$((port + 1))
t0=$(date +%s)
start dead $port 60 allreduce $(ranks 63)
sleep 4
victim=$(grep -l "waits for the root's call" "$L"/bootfd_dead_*.out | sed -n 's/.*_\([0-9]*\)\.out$/\1/p' | sort -n | tail -n 1)
[ -n "$victim" ] || fail "dead rank: no rank waits for a call"
kill -9 "$(pid_of dead "$victim")"
start dead $port 60 allreduce 63
wait_all dead
t=$(($(date +%s) - t0))
[ "$bad" = $N ] || fail "dead rank: only $bad of $N ranks failed"
named=$(grep -l "cannot call back rank $victim " "$L"/bootfd_dead_*.out | wc -l)
[ "$named" = $((N - 1)) ] || fail "dead rank: $named of $((N - 1)) ranks name rank $victim: $(grep -L "call back rank $victim " "$L"/bootfd_dead_*.out | grep -v "_$victim.out" | head -n 1 | xargs tail -n 2)"
[ $t -lt 25 ] || fail "dead rank: took $t s"
echo "ok: rank $victim killed while waiting for its call: all $((N - 1)) others name it in $t s"
