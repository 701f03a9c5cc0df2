#!/bin/sh
# Open files: 24 ranks over TCP need about 2 x 23 sockets each.
#  1. soft limit 40, hard limit higher: rcoll raises the soft limit and the
#     job runs (results checked);
#  2. hard limit 40: every rank fails within seconds with an error that
#     names RLIMIT_NOFILE and its value, no hang.
# Ranks are started by hand (RCOLL_ROOT...) so that the limit applies to
# them alone. usage: test_fdlimit.sh BUILD
B=$1
N=24
L=$B/tests/logs
mkdir -p "$L"
fail() { echo "FAIL: $*"; tail -n 3 "$L"/fdlimit_*_0.out; exit 1; }
run() { # run NAME PORT LIMITS: every rank under `ulimit LIMITS`
    name=$1; port=$2; lim=$3
    pids=""
    r=0
    while [ $r -lt $N ]; do
        env RCOLL_ROOT=127.0.0.1:$port RCOLL_SIZE=$N RCOLL_RANK=$r \
            RCOLL_TRANSPORTS=tcp RCOLL_TIMEOUT=60 \
            RCOLL_SECRET=00112233445566778899aabbccddeeff \
            sh -c "ulimit $lim 40 || exit 9; exec \"$B/benchmarks/rcoll-perf\" allreduce -b 8 -e 64K -f 64 -n 2 -w 1 -c 1" \
            > "$L/fdlimit_${name}_$r.out" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    bad=0
    for p in $pids; do wait $p || bad=$((bad + 1)); done
    echo $bad
}
bad=$(run soft 29671 -Sn)
[ "$bad" = 0 ] || fail "soft limit 40: $bad ranks failed (the limit was not raised)"
grep -q "Out of bounds values : 0 OK" "$L/fdlimit_soft_0.out" || fail "wrong results"
echo "ok: soft limit 40 raised, $N ranks over tcp ran, results checked"
t0=$(date +%s)
bad=$(run hard 29672 -n)
t=$(($(date +%s) - t0))
[ "$bad" -gt 0 ] || fail "hard limit 40: every rank succeeded?"
grep -l "RLIMIT_NOFILE of 40 open files" "$L"/fdlimit_hard_*.out > /dev/null ||
    fail "no rank names RLIMIT_NOFILE"
echo "ok: hard limit 40: $bad of $N ranks failed, e.g.: $(grep -h 'RLIMIT_NOFILE' "$L"/fdlimit_hard_*.out | head -n 1 | cut -c1-300)"
[ $t -lt 30 ] || fail "took $t s: a rank waited for its timeout (60 s)"
