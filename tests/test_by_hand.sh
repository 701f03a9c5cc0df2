#!/bin/sh
# Ranks started by hand with RCOLL_RANK/RCOLL_SIZE/RCOLL_ROOT (no launcher,
# no secret given): a checked benchmark runs; torchrun-style and
# Slurm-style variables work; then four looping ranks, one
# killed with SIGKILL: the other three must exit with an error naming it
# within 10 s. Usage: test_by_hand.sh BUILDDIR
B=$1
mkdir -p "$B/tests/logs"
# below the ephemeral port range (32768-60999), where outgoing connections
# of other tests could hold it
port=$((10000 + $$ % 5000 * 4))
export RCOLL_ROOT=127.0.0.1:$port RCOLL_SIZE=3
unset RCOLL_SECRET
pids=""
for r in 0 1 2; do
    RCOLL_RANK=$r "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 256K -f 8 -n 2 -w 1 -c 1 > "$B/tests/logs/by_hand_$r.out" 2>&1 &
    pids="$pids $!"
done
rc=0
for p in $pids; do wait $p || rc=1; done
cat "$B/tests/logs/by_hand_0.out"
[ $rc -eq 0 ] || { echo "by hand: a rank failed"; cat "$B"/tests/logs/by_hand_[12].out; exit 1; }
grep -q "Out of bounds values : 0 OK" "$B/tests/logs/by_hand_0.out" || exit 1

# torchrun's variables (rank 0 serves on MASTER_PORT + 1), then Slurm's
# with RCOLL_ROOT, as those launchers would set them.
# launch NAME N "VARS with $r" PERF-ARGS...: N ranks, all must pass -c 1
launch() {
    name=$1; n=$2; vars=$3; shift 3
    pids=""
    r=0
    while [ $r -lt $n ]; do
        eval "env $vars \"\$B/benchmarks/rcoll-perf\" \"\$@\"" \
            > "$B/tests/logs/${name}_$r.out" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do wait $p || rc=1; done
    [ $rc -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$B/tests/logs/${name}_0.out" ||
        { echo "$name-style launch failed"; cat "$B"/tests/logs/${name}_*.out; exit 1; }
    echo "$name-style variables: ok"
}
unset RCOLL_ROOT RCOLL_SIZE
launch torchrun 3 'RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 2))' \
    broadcast -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 -r 2
launch slurm 4 'SLURM_PROCID=$r SLURM_NTASKS=4 RCOLL_ROOT=127.0.0.1:$((port + 5))' \
    reduce -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 -r 3

# kill one of four hand-started ranks
port2=$((port + 1))
export RCOLL_ROOT=127.0.0.1:$port2 RCOLL_SIZE=4 RCOLL_VICTIM=2
pids=""
for r in 0 1 2 3; do
    RCOLL_RANK=$r "$B/tests/test_fail" loop > "$B/tests/logs/kill_$r.out" 2>&1 &
    eval "pid$r=$!"
done
sleep 2
kill -9 $pid2
t0=$(date +%s)
bad=0
for r in 0 1 3; do
    eval "p=\$pid$r"
    wait $p; code=$?
    echo "rank $r exit $code: $(head -n 1 "$B/tests/logs/kill_$r.out")"
    [ $code -eq 3 ] || bad=1
done
t1=$(date +%s)
wait $pid2 2>/dev/null
echo "survivors finished $((t1 - t0)) s after the kill"
[ $((t1 - t0)) -le 10 ] || bad=1
exit $bad
