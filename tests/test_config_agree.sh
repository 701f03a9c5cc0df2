#!/bin/sh
# Settings that shape schedules or the wire must be the same on every
# rank: for each of them, three ranks started by hand where rank 2 has
# another value must all fail rcoll_comm_init at once (no hang until
# RCOLL_TIMEOUT, no mismatch later), naming the variable, both values and
# both ranks. Equal values spelled differently (512K and 524288) are the
# same setting. Usage: test_config_agree.sh BUILDDIR
B=$1
L="$B/tests/logs/config_agree"
mkdir -p "$L"
# ports below the kernel's ephemeral range (32768-60999 here), so no
# outgoing connection of another test holds the root's port; a port taken
# anyway is retried once on the next one (CI once hit "Address already in
# use" at 36557)
port=$((10000 + $$ % 5000 * 4))
unset RCOLL_SECRET
fails=0
# run3 VAR RANK2VALUE [OTHERSVALUE]: the ranks' exit codes in $rcs
run3() {
    s=$(date +%s)
    run3_once "$@"
    if [ "$taken" = 1 ]; then
        echo "note: root port $port was taken; trying the next one"
        s=$(date +%s)
        run3_once "$@"
    fi
}
run3_once() {
    var=$1; v2=$2; v0=$3
    port=$((port + 1))
    pids=""
    for r in 0 1 2; do
        v=$v0; [ $r = 2 ] && v=$v2
        if [ -n "$v" ]; then
            env RCOLL_ROOT=127.0.0.1:$port RCOLL_SIZE=3 RCOLL_RANK=$r RCOLL_TIMEOUT=30 \
                "$var=$v" "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 -n 1 -w 0 \
                > "$L/r$r.out" 2>&1 &
        else
            env -u "$var" RCOLL_ROOT=127.0.0.1:$port RCOLL_SIZE=3 RCOLL_RANK=$r \
                RCOLL_TIMEOUT=30 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 -n 1 -w 0 \
                > "$L/r$r.out" 2>&1 &
        fi
        pids="$pids $!"
    done
    # rank 0 (the root) first: if its port was taken, stop the others
    # rather than let them wait out RCOLL_TIMEOUT
    rcs=""
    taken=0
    for p in $pids; do
        wait $p; rcs="$rcs $?"
        if [ $taken = 0 ] && [ "$rcs" != " 0" ] &&
            grep -q "Address already in use" "$L"/r0.out; then
            taken=1
            kill $pids 2> /dev/null
        fi
    done
}
t0=$(date +%s)
# VAR  VALUE-ON-RANK-2  VALUE-ON-RANKS-0-1 (empty: unset)
while read -r var v2 v0; do
    [ -z "$var" ] && continue
    [ "$v0" = "-" ] && v0=""
    run3 "$var" "$v2" "$v0"
    ok=1
    for r in 0 1 2; do
        grep -q "$var differs between ranks" "$L/r$r.out" &&
            grep -q "rank 2 (" "$L/r$r.out" && grep -q "\"" "$L/r$r.out" || ok=0
    done
    case "$rcs" in *" 0"*) ok=0 ;; esac
    took=$(( $(date +%s) - s ))
    [ $took -le 15 ] || ok=0
    if [ $ok = 1 ]; then
        echo "ok: $var ($v2 on rank 2): every rank fails init naming it ($took s)"
    else
        echo "FAIL: $var ($v2 on rank 2 against ${v0:-unset}): exit codes$rcs, $took s"
        head -n 3 "$L"/r0.out "$L"/r2.out
        fails=$((fails + 1))
    fi
done << 'LIST'
RCOLL_CHECKSUM 1 -
RCOLL_CHUNK_SIZE 256K -
RCOLL_NSLOTS 8 -
RCOLL_TCP_NSOCKS 3 -
RCOLL_P2P_EAGER 1M -
RCOLL_IB_QPS_PER_PEER 2 -
RCOLL_IB_CONNECT oob -
RCOLL_IB_IMM 0 -
RCOLL_RING_ORDER user -
RCOLL_ALGO allreduce:rabenseifner allreduce:ring
RCOLL_TUNE_SHM 1,10 -
RCOLL_TUNE_TCP 20,1 -
RCOLL_TUNE_REDUCE_GBPS 3 -
RCOLL_SHM_BUDGET 1M -
RCOLL_SHM_POOL 0 -
RCOLL_RAIL_FAILOVER 0 -
LIST
# the same value spelled two ways is the same setting
run3 RCOLL_CHUNK_SIZE 524288 512K
case "$rcs" in *[1-9]*) echo "FAIL: RCOLL_CHUNK_SIZE 524288 against 512K refused (exit codes$rcs)"; cat "$L/r0.out"; fails=$((fails + 1)) ;;
*) echo "ok: RCOLL_CHUNK_SIZE 524288 and 512K agree" ;; esac
# a local setting may differ
run3 RCOLL_SPIN_US 0 ""
case "$rcs" in *[1-9]*) echo "FAIL: RCOLL_SPIN_US differing was refused (exit codes$rcs)"; cat "$L/r0.out"; fails=$((fails + 1)) ;;
*) echo "ok: RCOLL_SPIN_US (local) may differ" ;; esac
echo "config agreement: $fails failures in $(( $(date +%s) - t0 )) s"
[ $fails = 0 ]
