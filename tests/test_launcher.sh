#!/bin/sh
# rcoll-run itself: environment, tagged output, a failing rank stops the
# others and sets the exit status, --timeout, -k, --spread; and a bad RCOLL_*
# value is reported by name. Usage: test_launcher.sh BUILDDIR
B=$1
RUN="$B/tools/rcoll-run"
fail() { echo "FAIL: $*"; exit 1; }

# every rank gets its environment; -t prefixes lines with [rank]
out=$("$RUN" -n 3 -t sh -c 'echo "r=$RCOLL_RANK n=$RCOLL_SIZE root=$RCOLL_ROOT s=${#RCOLL_SECRET}"') ||
    fail "plain run exited $?"
echo "$out"
for r in 0 1 2; do
    echo "$out" | grep -q "^\[$r\] r=$r n=3 root=127.0.0.1:[0-9]* s=32$" || fail "rank $r line"
done

# one rank fails: the others (sleeping 60 s) are stopped, status is its own
t0=$(date +%s)
"$RUN" -n 3 sh -c 'if [ "$RCOLL_RANK" = 1 ]; then exit 7; fi; sleep 60'
rc=$?
t1=$(date +%s)
echo "failing rank: exit $rc after $((t1 - t0)) s"
[ $rc -eq 7 ] || fail "exit status $rc, expected 7"
[ $((t1 - t0)) -lt 10 ] || fail "the others were not stopped"

# a rank killed by a signal: 128 + signal
"$RUN" -n 2 sh -c 'if [ "$RCOLL_RANK" = 0 ]; then kill -9 $$; fi; sleep 60'
rc=$?
echo "killed rank: exit $rc"
[ $rc -eq 137 ] || fail "exit status $rc, expected 137"

# -k: the others run to their end
"$RUN" -n 2 -k sh -c 'if [ "$RCOLL_RANK" = 0 ]; then exit 3; fi; sleep 1; echo survivor-done'
rc=$?
[ $rc -eq 3 ] || fail "-k exit status $rc, expected 3"

# --timeout: everything is stopped, exit 124
"$RUN" -n 2 --timeout 1 sleep 30
rc=$?
[ $rc -eq 124 ] || fail "--timeout exit status $rc, expected 124"

# SIGUSR1 to rcoll-run reaches every rank (rcoll's dump of what is in
# flight, RCOLL_DUMP_SIGNAL) and the job goes on: before, it ended
# rcoll-run and left the ranks running
out=$(mktemp)
"$RUN" -n 2 -t sh -c 'trap "echo usr1-$RCOLL_RANK" USR1; i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i + 1)); done; echo done-$RCOLL_RANK' > "$out" 2>&1 &
rp=$!
sleep 1
kill -USR1 $rp
wait $rp
rc=$?
cat "$out"
[ $rc -eq 0 ] || fail "SIGUSR1: rcoll-run exited $rc"
for r in 0 1; do
    grep -q "^\[$r\] usr1-$r$" "$out" || fail "SIGUSR1 did not reach rank $r"
    grep -q "^\[$r\] done-$r$" "$out" || fail "rank $r did not go on after SIGUSR1"
done
rm -f "$out"

# --spread: with k CPUs rcoll-run may use, rank r of N starts bound to
# the r-th when N <= k, else to the (r k / N)-th, blocks of consecutive
# ranks (both ranks of a 2-rank job shared one core for whole short runs
# without it; dealt out r mod k, the forwarding ranks of a 4-rank
# binomial broadcast shared one of 2 cores); after the window every
# thread still bound so, one created after the start too, gets the whole
# set back; a rank that bound itself elsewhere keeps its own binding;
# --spread 0 binds nothing
allowed=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
# the start CPU of each rank of 3, worked out here independently, and a
# CPU other than rank 1's (rank 1 binds itself there)
set -- $(python3 -c '
import os
c = sorted(os.sched_getaffinity(0)); k, n = len(c), 3
s = [c[r] if n <= k else c[r * k // n] for r in range(n)]
print(*s, next((x for x in c if x != s[1]), s[1]), k)')
s0=$1 s1=$2 s2=$3 other=$4 k=$5
out=$(mktemp)
"$RUN" -n 3 --spread 200 sh -c '
    a=$(grep Cpus_allowed_list /proc/self/status | awk "{print \$2}")
    if [ "$RCOLL_RANK" = 1 ] && [ "$0" != "$1" ]; then taskset -pc "$0" $$ > /dev/null; fi
    sleep 2 & c=$!
    sleep 0.6
    b=$(grep Cpus_allowed_list /proc/$$/status | awk "{print \$2}")
    d=$(grep Cpus_allowed_list /proc/$c/status | awk "{print \$2}")
    kill $c
    echo "rank $RCOLL_RANK start $a later $b child $d"' "$other" "$s1" > "$out" 2>&1 ||
    fail "--spread run exited $?"
cat "$out"
grep -q "^rank 0 start $s0 later $allowed child $allowed$" "$out" ||
    fail "--spread: rank 0 did not start on CPU $s0, or it (or the process it started) is still bound"
grep -q "^rank 2 start $s2 later $allowed child $allowed$" "$out" ||
    fail "--spread: rank 2 did not start on CPU $s2, or is still bound"
if [ "$k" -ge 2 ]; then
    grep -q "^rank 1 start $s1 later $other child" "$out" ||
        fail "--spread: rank 1 did not start on CPU $s1, or bound itself to CPU $other and lost it"
fi
"$RUN" -n 2 --spread 0 sh -c 'echo "rank $RCOLL_RANK $(grep Cpus_allowed_list /proc/self/status | awk "{print \$2}")"' > "$out" 2>&1
grep -c " $allowed$" "$out" | grep -q '^2$' || { cat "$out"; fail "--spread 0 bound a rank"; }
rm -f "$out"

# usage errors
"$RUN" -n 0 true 2> /dev/null && fail "-n 0 accepted"
"$RUN" --bogus -n 1 true 2> /dev/null && fail "unknown option accepted"

# a bad parameter value is named in the error, nothing crashes
msg=$(RCOLL_TIMEOUT=abc "$RUN" -n 1 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 2>&1)
rc=$?
echo "$msg" | tail -n 1
[ $rc -ne 0 ] || fail "RCOLL_TIMEOUT=abc accepted"
echo "$msg" | grep -q 'RCOLL_TIMEOUT="abc"' || fail "message does not name RCOLL_TIMEOUT"
msg=$(RCOLL_ALGO=allreduce:nope "$RUN" -n 1 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 2>&1)
echo "$msg" | grep -q 'allreduce:nope' || fail "message does not name the RCOLL_ALGO entry"
# ranks with different chunk sizes are told so at creation, not later
# (on each transport; tests/test_config_agree.sh covers every setting)
for tl in shm tcp; do
    msg=$(RCOLL_TRANSPORTS=$tl "$RUN" -n 2 sh -c 'if [ "$RCOLL_RANK" = 1 ]; then export RCOLL_CHUNK_SIZE=4096; fi; exec "$0" allreduce -b 8 -e 8' "$B/benchmarks/rcoll-perf" 2>&1)
    echo "$msg" | grep -q "RCOLL_CHUNK_SIZE differs between ranks: rank 0 (.*) has \"524288\", rank 1 (.*) has \"4096\"" ||
        { echo "$msg"; fail "differing RCOLL_CHUNK_SIZE not reported on $tl"; }
done
# rcoll-perf -P: only the placement asked for is run (and checked); the
# other's columns are '-' (benchmarks/compare reads column 6 or 10)
for p in 0 1; do
    msg=$("$RUN" -n 2 "$B/benchmarks/rcoll-perf" allgather -b 64 -e 64 -c 1 -P $p 2>&1) ||
        { echo "$msg"; fail "rcoll-perf -P $p failed"; }
    row=$(echo "$msg" | awk '$1 == 64')
    set -- $row
    if [ $p = 0 ]; then m=$6 w=$9 s=${10}; else m=${10} w=${13} s=$6; fi
    case $m in [0-9]*) ;; *) echo "$msg"; fail "rcoll-perf -P $p: no time measured";; esac
    [ "$w" = 0 ] && [ "$s" = - ] || { echo "$msg"; fail "rcoll-perf -P $p: row '$row'"; }
done
# rank 0 listens on the socket rcoll-run opened and kept (RCOLL_ROOT_FD):
# the port is never free between choosing it and rank 0's listen, where
# another connection once took it ("Address already in use" in CI); the
# other ranks get no such socket; and the process's open files come back
# to what they were (the socket is closed with its root)
msg=$(RCOLL_DEBUG=info RCOLL_DEBUG_SUBSYS=init "$RUN" -n 3 "$B/tests/test_many_comms" 120 2>&1) ||
    { echo "$msg"; fail "test_many_comms under rcoll-run"; }
[ "$(echo "$msg" | grep -c "the root listens on the socket rcoll-run opened")" = 1 ] ||
    { echo "$msg"; fail "rank 0 did not take rcoll-run's socket exactly once"; }
n=$("$RUN" -n 3 sh -c 'echo "rank $RCOLL_RANK fd=${RCOLL_ROOT_FD:-none}"' | grep -c "fd=none")
[ "$n" = 2 ] || fail "$n ranks without RCOLL_ROOT_FD (2 expected)"
echo "launcher: ok"
