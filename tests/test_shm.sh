#!/bin/sh
# The shared-memory transport's life cycle: which transport is chosen,
# no segment left in /dev/shm after a clean run or after a rank is killed
# with SIGKILL mid-run, and segments of dead processes swept at setup -
# only those of its own PID namespace (segment names carry it).
# usage: test_shm.sh BUILDDIR
B=${1:?builddir}
RUN="$B/tools/rcoll-run"
PERF="$B/benchmarks/rcoll-perf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
NS=$(stat -L -c %i /proc/self/ns/pid) # segment names carry the PID namespace

leftovers() { # PIDS... : segments created by these processes
    for p in "$@"; do ls /dev/shm 2>/dev/null | grep "^rcoll-n[0-9]*-$p-"; done
}

# 1. the transport chosen on one host is shm; RCOLL_TRANSPORTS=^shm gives tcp
RCOLL_DEBUG=info "$RUN" -n 2 --timeout 60 "$PERF" allreduce -b 8 -e 8 -n 1 -w 0 \
    > "$T/a" 2>&1 || { cat "$T/a"; fail "default run"; }
grep -q "ready: transports shm," "$T/a" || { cat "$T/a"; fail "shm not chosen on one host"; }
RCOLL_DEBUG=info RCOLL_TRANSPORTS=^shm "$RUN" -n 2 --timeout 60 "$PERF" allreduce \
    -b 8 -e 8 -n 1 -w 0 > "$T/b" 2>&1 || { cat "$T/b"; fail "^shm run"; }
grep -q "ready: transports tcp," "$T/b" || { cat "$T/b"; fail "^shm did not give tcp"; }
echo "ok: shm chosen on one host, ^shm gives tcp"

# 2. a clean run leaves nothing: no segment of a process that has ended
orphans() {
    for f in $(ls /dev/shm 2>/dev/null | grep "^rcoll-n$NS-[0-9]*-"); do
        p=$(echo "$f" | cut -d- -f3)
        kill -0 "$p" 2>/dev/null || echo "$f"
    done
}
[ -n "$(orphans)" ] && fail "segments left after a clean run: $(orphans)"
echo "ok: nothing left in /dev/shm after a clean run"

# 3. SIGKILL of one rank in the middle of a run: the others fail naming it,
#    and nothing is left in /dev/shm
"$RUN" -k -n 3 --timeout 120 "$PERF" allreduce -b 1M -e 1M -n 1000000 -w 0 \
    > "$T/c" 2>&1 &
runpid=$!
for i in $(seq 1 300); do
    grep -q "out-of-place" "$T/c" 2>/dev/null && break
    sleep 0.1
done
sleep 1 # every rank past setup (its segment unlinked), in the benchmark loop
kids=$(pgrep -P $runpid)
[ $(echo $kids | wc -w) -eq 3 ] || { cat "$T/c"; fail "expected 3 ranks, got: $kids"; }
victim=$(echo $kids | awk '{print $2}')
kill -9 "$victim"
wait $runpid
rc=$?
[ $rc -ne 0 ] || fail "the run succeeded although a rank was killed"
grep -q "died" "$T/c" || { cat "$T/c"; fail "no rank reported the death"; }
[ -n "$(leftovers $kids)" ] && fail "segments left after SIGKILL: $(leftovers $kids)"
echo "ok: SIGKILL mid-run reported ('$(grep -o 'rank [0-9]* ([^)]*): shm: its process died' "$T/c" | head -1)'), nothing left"

# 4. a segment left by a dead process (crash during setup) is swept
sh -c 'exit 0' &
dead=$!
wait $dead
stale=/dev/shm/rcoll-n$NS-$dead-0123456789abcdef
: > "$stale"
"$RUN" -n 2 --timeout 60 "$PERF" allreduce -b 8 -e 8 -n 1 -w 0 > "$T/d" 2>&1 || {
    rm -f "$stale"; cat "$T/d"; fail "run with a stale segment"; }
[ -e "$stale" ] && { rm -f "$stale"; fail "stale segment $stale not swept"; }
echo "ok: a dead process's segment was swept"

# 5. two PID namespaces sharing /dev/shm (containers with hostIPC): a job in
#    a new namespace (unshare --pid) must not sweep a live segment of this
#    one, although its PID means nothing there (kill(pid, 0) fails with
#    ESRCH inside), and a job here must not sweep one of that namespace
if command -v unshare > /dev/null && unshare --pid --fork --mount-proc true 2> /dev/null; then
    sleep 30 &
    holder=$!
    live=/dev/shm/rcoll-n$NS-$holder-0123456789abcdef
    : > "$live"
    unshare --pid --fork --mount-proc sh -c '
        ns=$(stat -L -c %i /proc/self/ns/pid)
        "$1" -n 2 --timeout 60 "$2" allreduce -b 8 -e 8 -n 1 -w 0 &&
        : > /dev/shm/rcoll-n$ns-999999-fedcba9876543210' sh "$RUN" "$PERF" \
        > "$T/e" 2>&1 || { rm -f "$live"; kill $holder; cat "$T/e"; fail "run in a new PID namespace"; }
    [ -e "$live" ] || { kill $holder; fail "a job in another PID namespace removed this namespace's live segment $live"; }
    other=$(ls /dev/shm | grep -- '-999999-fedcba9876543210$')
    [ -n "$other" ] || { rm -f "$live"; kill $holder; fail "no segment from the inner namespace"; }
    "$RUN" -n 2 --timeout 60 "$PERF" allreduce -b 8 -e 8 -n 1 -w 0 > "$T/f" 2>&1 || {
        rm -f "$live" "/dev/shm/$other"; kill $holder; cat "$T/f"; fail "run beside another namespace's segment"; }
    [ -e "/dev/shm/$other" ] || { rm -f "$live"; kill $holder; fail "a job here removed another PID namespace's segment $other"; }
    rm -f "$live" "/dev/shm/$other"
    kill $holder
    echo "ok: segments of another PID namespace are left alone, both ways"
else
    echo "skip: unshare --pid not available (PID namespace test)"
fi
exit 0
