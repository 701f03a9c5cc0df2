#!/bin/sh
# Two "hosts": network namespaces joined by a veth pair (addresses from the
# 198.18.0.0/15 benchmarking range, only inside these namespaces). Two ranks
# per host, started by hand with RCOLL_ROOT on host A: the interface that
# routes to the root is chosen, the collectives are bit-exact, and a rank
# killed on host B is named by the ranks on host A.
# Needs root and iproute2; skips (77) otherwise. Usage: test_netns.sh BUILDDIR
B=$1
[ "$(id -u)" = 0 ] && command -v ip > /dev/null || { echo "needs root and ip"; exit 77; }
A=rcollA$$; Z=rcollB$$
cleanup() { ip netns del $A 2> /dev/null; ip netns del $Z 2> /dev/null; }
trap cleanup EXIT INT TERM
ip netns add $A && ip netns add $Z || { echo "cannot create namespaces"; exit 77; }
ip link add va$$ type veth peer name vb$$ || { echo "cannot create veth"; exit 77; }
ip link set va$$ netns $A && ip link set vb$$ netns $Z &&
ip -n $A addr add 198.18.7.1/24 dev va$$ && ip -n $Z addr add 198.18.7.2/24 dev vb$$ &&
ip -n $A link set va$$ up && ip -n $Z link set vb$$ up &&
ip -n $A link set lo up && ip -n $Z link set lo up || { echo "veth setup failed"; exit 1; }
mkdir -p "$B/tests/logs"

run4() { # run4 PORT CMD...: ranks 0,1 on host A, 2,3 on host B
    port=$1; shift
    pids=""
    for r in 0 1 2 3; do
        ns=$A; [ $r -ge 2 ] && ns=$Z
        ip netns exec $ns env RCOLL_ROOT=198.18.7.1:$port RCOLL_SIZE=4 RCOLL_RANK=$r \
            RCOLL_SECRET=00112233445566778899aabbccddeeff "$@" > "$B/tests/logs/netns_$r.out" 2>&1 &
        pids="$pids $!"
    done
    rc=0
    for p in $pids; do wait $p || rc=1; done
    return $rc
}
run4 29651 "$B/tests/test_coll" -T -N 0,1,7,1023,131073 ||
    { cat "$B"/tests/logs/netns_*.out; echo "matrix across two hosts failed"; exit 1; }
cat "$B/tests/logs/netns_0.out"
run4 29652 "$B/benchmarks/rcoll-perf" allgather -b 8 -e 4M -f 8 -n 2 -w 1 -c 1 ||
    { cat "$B"/tests/logs/netns_*.out; exit 1; }
grep -q "Out of bounds values : 0 OK" "$B/tests/logs/netns_0.out" || exit 1

# kill rank 3 (host B) while all loop: ranks 0 and 1 (host A) name it
pids=""
for r in 0 1 2 3; do
    ns=$A; [ $r -ge 2 ] && ns=$Z
    ip netns exec $ns env RCOLL_ROOT=198.18.7.1:29653 RCOLL_SIZE=4 RCOLL_RANK=$r \
        RCOLL_VICTIM=3 "$B/tests/test_fail" loop > "$B/tests/logs/netns_kill_$r.out" 2>&1 &
    eval "pid$r=$!"
done
sleep 2
kill -9 $pid3
bad=0
for r in 0 1 2; do
    eval "p=\$pid$r"
    wait $p; code=$?
    echo "rank $r exit $code: $(tail -n 1 "$B/tests/logs/netns_kill_$r.out")"
    [ $code -eq 3 ] || bad=1
done
exit $bad
