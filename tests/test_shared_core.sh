#!/bin/sh
# Ranks that share one core stay fast. rcoll assumes each rank of a host
# has a core when the host has as many cores as ranks, and a blocking small
# call spins before it yields; two ranks put on one core (by the scheduler
# for a while after start-up, by a binding, by a container's CPU quota)
# would wait out each other's spin: the full budget of 2048 pause loops is
# 75-90 us per call. The budget shrinks once a yield finds the core wanted
# (core/inline.c, spin_adapt).
# Both ranks run under `taskset -c 0`; every size's time per call, out of
# place and in place, must stay under LIMIT_US (results checked too).
# usage: test_shared_core.sh BUILDDIR
B=${1:?builddir}
LIMIT_US=${LIMIT_US:-25}
command -v taskset > /dev/null || { echo "no taskset"; exit 77; }
[ "$(nproc --all)" -ge 2 ] || { echo "one CPU: ranks > cores, no spin"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
bad=0
for c in allgather allreduce broadcast; do
    taskset -c 0 "$B/tools/rcoll-run" -n 2 --timeout 120 \
        "$B/benchmarks/rcoll-perf" $c -b 8 -e 512 -f 8 -n 400 -w 5 \
        > "$T/$c" 2>&1 || { cat "$T/$c"; echo "FAIL: $c run"; exit 1; }
    grep -q "Out of bounds values : 0 OK" "$T/$c" ||
        { cat "$T/$c"; echo "FAIL: $c: wrong results"; exit 1; }
    # rows: size count type redop root time algbw busbw #wrong time ...
    rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 10' "$T/$c")
    [ -n "$rows" ] || { cat "$T/$c"; echo "FAIL: $c: no rows"; exit 1; }
    echo "$c, 2 ranks on CPU 0 (size, us out of place, in place):"
    echo "$rows" | awk '{print "  " $1, $6, $10}'
    if ! echo "$rows" | awk -v L=$LIMIT_US '$6 > L || $10 > L {bad = 1}
                                            END {exit bad}'; then
        echo "FAIL: $c: a call took over $LIMIT_US us with both ranks on one core"
        bad=1
    fi
done
exit $bad
