#!/bin/sh
# TCP over two rails: two "hosts" (network namespaces) joined by two veth
# pairs on two subnets (198.18.7.0/24 and 198.18.9.0/24, the benchmarking
# range, only inside these namespaces). Four ranks, two per host, all over
# TCP:
#  0. rcoll-info -t names both interfaces as rails;
#  1. by default both rails carry the traffic (each veth of host A sends at
#     least a fifth of the bytes) and the collectives are bit-exact;
#  2. with each pair shaped to 200 Mbit/s, the 4 MiB all-reduce is at
#     least 1.4x faster than with one rail (RCOLL_TCP_RAILS=1, whose second
#     veth then carries nothing; both with 512 KiB chunks, two per ring
#     step: measured 2.0x);
#  3. a second rail that does not connect (host B cannot answer on it) is
#     named in a warning, its sockets go over the first rail, and the
#     results stay bit-exact;
#  4. a rail lost mid-run: the run goes on over the other, bit-exact;
#  5. a lost rail that comes back carries traffic again (failback), and
#     then the bootstrap's rail can be lost;
#  6. a rail lost under the last messages of a rank that destroys its
#     communicator: its destroy sends them again over the other.
# Needs root, iproute2 and tc; skips (77) otherwise. Usage: test_rails.sh BUILD
B=$1
[ "$(id -u)" = 0 ] && command -v ip > /dev/null && command -v tc > /dev/null ||
    { echo "needs root, ip and tc"; exit 77; }
A=railA$$; Z=railB$$
L=$B/tests/logs
cleanup() { ip netns del $A 2> /dev/null; ip netns del $Z 2> /dev/null; }
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; tail -n 5 "$L"/rails_*.out; exit 1; }
ip netns add $A && ip netns add $Z || { echo "cannot create namespaces"; exit 77; }
for i in 1 2; do
    sub=7; [ $i = 2 ] && sub=9
    ip link add ra$i$$ type veth peer name rb$i$$ || { echo "cannot create veth"; exit 77; }
    ip link set ra$i$$ netns $A && ip link set rb$i$$ netns $Z &&
    ip -n $A addr add 198.18.$sub.1/24 dev ra$i$$ &&
    ip -n $Z addr add 198.18.$sub.2/24 dev rb$i$$ &&
    ip -n $A link set ra$i$$ up && ip -n $Z link set rb$i$$ up || fail "veth setup"
done
ip -n $A link set lo up && ip -n $Z link set lo up || fail "lo up"
mkdir -p "$L"

txb() { ip netns exec $A cat /sys/class/net/ra$1$$/statistics/tx_bytes; }
runn() { # runn NA NB PORT NAME CMD...: NA ranks on host A, NB on host B
    na=$1; nb=$2; port=$3; name=$4; shift 4
    pids=""
    for r in $(seq 0 $((na + nb - 1))); do
        ns=$A; [ $r -ge $na ] && ns=$Z
        ip netns exec $ns env RCOLL_ROOT=198.18.7.1:$port RCOLL_SIZE=$((na + nb)) \
            RCOLL_RANK=$r RCOLL_TRANSPORTS=tcp \
            RCOLL_SECRET=00112233445566778899aabbccddeeff \
            RCOLL_TIMEOUT=60 "$@" > "$L/rails_${name}_$r.out" 2>&1 &
        pids="$pids $!"
    done
    rc=0
    for p in $pids; do wait $p || rc=1; done
    return $rc
}
run4() { runn 2 2 "$@"; } # run4 PORT NAME CMD...: ranks 0,1 on host A, 2,3 on B
perf_us() { # the 4 MiB all-reduce's out-of-place time from rank 0's output
    awk '$1 == 4194304 { print $6 }' "$L/rails_$1_0.out"
}

# 0. rcoll-info -t lists both interfaces as rails
ip netns exec $A "$B/tools/rcoll-info" -t > "$L/rails_info.out" 2>&1
grep "rails here:" "$L/rails_info.out"
grep "rails here:" "$L/rails_info.out" | grep "ra1$$" | grep -q "ra2$$" ||
    fail "rcoll-info -t does not list both rails"

# 1. both rails carry the traffic; bit-exact
a1=$(txb 1); a2=$(txb 2)
run4 29661 coll "$B/tests/test_coll" -T -N 0,1,7,1023,131073 || fail "matrix over two rails"
d1=$(($(txb 1) - a1)); d2=$(($(txb 2) - a2))
echo "two rails, test_coll: host A sent $d1 bytes on rail 1, $d2 on rail 2"
[ $((d1 * 5)) -ge $((d1 + d2)) ] && [ $((d2 * 5)) -ge $((d1 + d2)) ] ||
    fail "one rail carried less than a fifth"

# 2. shaped links: two rails against one
for i in 1 2; do
    ip netns exec $A tc qdisc add dev ra$i$$ root tbf rate 200mbit burst 64kb latency 50ms &&
    ip netns exec $Z tc qdisc add dev rb$i$$ root tbf rate 200mbit burst 64kb latency 50ms ||
        fail "tc"
done
run4 29662 two "$B/benchmarks/rcoll-perf" allreduce -b 4M -e 4M -n 6 -w 1 -c 1 ||
    fail "all-reduce over two rails"
grep -q "Out of bounds values : 0 OK" "$L/rails_two_0.out" || fail "wrong all-reduce results"
a2=$(txb 2)
run4 29663 one env RCOLL_TCP_RAILS=1 "$B/benchmarks/rcoll-perf" allreduce -b 4M -e 4M -n 6 -w 1 -c 1 ||
    fail "all-reduce over one rail"
d2=$(($(txb 2) - a2))
[ $d2 -lt 65536 ] || fail "RCOLL_TCP_RAILS=1 still sent $d2 bytes on rail 2"
t1=$(perf_us one); t2=$(perf_us two)
echo "4 MiB all-reduce: $t1 us over one rail, $t2 us over two"
awk -v a="$t1" -v b="$t2" 'BEGIN { exit !(a > 0 && b > 0 && a / b >= 1.4) }' ||
    fail "two rails not 1.4x faster than one ($t1 us vs $t2 us)"

for i in 1 2; do
    ip netns exec $A tc qdisc del dev ra$i$$ root; ip netns exec $Z tc qdisc del dev rb$i$$ root
done

# 3. rail 2 refuses to work (host B cannot answer host A there): warned,
#    the sockets fall back to rail 1, still bit-exact
ip -n $Z route add prohibit 198.18.9.1/32 || fail "route"
run4 29664 broken "$B/tests/test_coll" -T -N 0,1,7,1023,131073 || fail "matrix with a broken rail"
grep -h "rail ra2$$ to rank" "$L"/rails_broken_*.out | head -n 2
grep -q "rail ra2$$ to rank [23] at 198.18.9.2:[0-9]* failed.*goes over rail ra1$$" \
    "$L"/rails_broken_0.out || fail "no warning names the broken rail"
# the same with connections on first use: the rail's handshake times out
# in the engine and that socket starts again over rail 1
run4 29665 broken_lazy env RCOLL_TCP_CONNECT=lazy "$B/tests/test_coll" -q -N 1,131073 ||
    fail "matrix with a broken rail, lazy"
grep -q "rail ra2$$ to rank [23] at 198.18.9.2:[0-9]* failed.*goes over rail ra1$$" \
    "$L"/rails_broken_lazy_0.out || fail "no warning names the broken rail (lazy)"
ip -n $Z route del prohibit 198.18.9.1/32 || fail "route del"

# 4. a rail fails in the middle of a run (its link taken down on host A
#    once rank 0 has done 50 iterations): every all-reduce and all-gather
#    stays bit-exact, the communicator reports no error, a warning names
#    the failed rail and the peer, and the run goes on over the other
#    rail: the second rail, 3 + 2 ranks (step 5 loses the bootstrap's).
cut() { # cut NAME IF NA NB PORT ENV...: test_failover, IF down mid-run
    name=$1; dev=$2; na=$3; nb=$4; port=$5; shift 5
    rm -f "$L/rails_go_$name"
    ( i=0; while [ ! -e "$L/rails_go_$name" ] && [ $i -lt 600 ]; do
          sleep 0.1; i=$((i + 1)); done
      ip -n $A link set $dev down ) &
    cutter=$!
    t0=$(date +%s.%N)
    runn $na $nb $port "fo_$name" env RCOLL_RAIL_TIMEOUT=2 "$@" \
        "$B/tests/test_failover" -n 200 -c 65536 -s "$L/rails_go_$name"
    rc=$?
    wait $cutter
    ip -n $A link set $dev up
    echo "$name: $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
    return $rc
}
cut rail2 ra2$$ 3 2 29666 RCOLL_TCP_CONNECT=eager ||
    fail "a run that lost rail 2"
grep -h "iterations" "$L/rails_fo_rail2_0.out" | tr '\n' ' '; echo
for r in 0 1 2 3 4; do
    grep -q "bit-exact, asynchronous error OK" "$L/rails_fo_rail2_$r.out" ||
        fail "rank $r did not finish bit-exact after rail 2 failed"
done
grep -h "rail ra2$$ to rank [34] .*failed" "$L"/rails_fo_rail2_0.out | head -n 1
grep -q "rail ra2$$ to rank [34] .*failed.*go again" "$L"/rails_fo_rail2_0.out ||
    fail "no warning names the failed rail 2 and the peer"
grep -q "rail rb2$$ to rank [012] .*failed" "$L"/rails_fo_rail2_3.out ||
    fail "host B's ranks did not fail over from rail 2"
sleep 1 # (the link's routes back)

# 5. failback, then the other rail: rail 2 goes down after the first block
#    and comes back 3 s later; once a rank of host A says it is back, rail
#    2 carries traffic again (its veth sends >= 1 MB in a second); then
#    rail 1, the bootstrap's, goes down for good and the run ends over rail
#    2 alone, 4 s later: bit-exact on every rank, no error, connections on
#    first use, 2 + 2 ranks.
flap() {
    go="$L/rails_go_flap"; end="$L/rails_end_flap"; note="$L/rails_flap.txt"
    rm -f "$go" "$end" "$note"
    (
        until_ok() { # until_ok TENTHS CMD...: CMD, retried for TENTHS x 0.1 s
            i=$1; shift
            until "$@"; do
                [ $i -gt 0 ] || return 1
                sleep 0.1; i=$((i - 1))
            done
        }
        until_ok 600 test -e "$go" || { touch "$end"; exit 1; }
        ip -n $A link set ra2$$ down
        sleep 3
        ip -n $A link set ra2$$ up
        if ! until_ok 300 grep -q "rail ra2$$ to rank [23] .* is back" \
                "$L"/rails_fo_flap_0.out "$L"/rails_fo_flap_1.out; then
            echo "rail 2 did not come back" > "$note"; touch "$end"; exit 1
        fi
        b0=$(txb 2); sleep 1; b1=$(txb 2)
        echo "$((b1 - b0))" > "$note"
        ip -n $A link set ra1$$ down
        sleep 4
        touch "$end"
    ) &
    cutter=$!
    t0=$(date +%s.%N)
    runn 2 2 29668 fo_flap env RCOLL_RAIL_TIMEOUT=2 RCOLL_RAIL_RETRY=0.5 \
        RCOLL_TCP_CONNECT=lazy "$B/tests/test_failover" -n 1000000 -c 65536 \
        -s "$go" -e "$end"
    rc=$?
    wait $cutter || rc=1
    ip -n $A link set ra1$$ up
    echo "flap: $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
    return $rc
}
flap || fail "a run whose rail 2 failed and came back, then rail 1 failed"
grep -h "bit-exact" "$L/rails_fo_flap_0.out"
for r in 0 1 2 3; do
    grep -q "bit-exact, asynchronous error OK" "$L/rails_fo_flap_$r.out" ||
        fail "rank $r did not finish bit-exact (rail 2 lost and back, rail 1 lost)"
done
grep -q "rail ra2$$ to rank [23] .*failed.*go again" "$L"/rails_fo_flap_[01].out ||
    fail "no warning names the failed rail 2"
grep -h "rail ra2$$ to rank [23] .* is back" "$L"/rails_fo_flap_[01].out | head -n 1
echo "rail 2 sent $(cat "$L/rails_flap.txt") bytes in the second after it came back"
[ "$(cat "$L/rails_flap.txt")" -ge 1000000 ] 2> /dev/null ||
    fail "rail 2 carries no traffic after it came back"
grep -q "rail ra1$$ to rank [23] .*failed.*go again" "$L"/rails_fo_flap_[01].out ||
    fail "no warning names the failed rail 1 (the bootstrap's)"
# 6. a rail lost under the last messages of a destroy: rank 0 sends 8
#    eager messages (half of them over rail 2, just taken down) and
#    destroys its communicator while rank 1 sleeps 8 s before it receives
#    them; rank 0's destroy must find the loss and send them again over
#    rail 1 before it says goodbye. 1 + 1 ranks.
rm -f "$L/rails_go_destroy"
( i=0; while [ ! -e "$L/rails_go_destroy" ] && [ $i -lt 600 ]; do
      sleep 0.1; i=$((i + 1)); done
  ip -n $A link set ra2$$ down ) &
cutter=$!
t0=$(date +%s.%N)
runn 1 1 29669 fo_destroy env RCOLL_RAIL_TIMEOUT=2 RCOLL_TCP_CONNECT=eager \
    "$B/tests/test_failover" -n 60 -c 65536 -s "$L/rails_go_destroy" -q 8000
rc=$?
wait $cutter
ip -n $A link set ra2$$ up
echo "destroy: $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
[ $rc = 0 ] || fail "a rail lost under the messages of a destroy"
for r in 0 1; do
    grep -q "bit-exact, asynchronous error OK" "$L/rails_fo_destroy_$r.out" ||
        fail "rank $r: the last messages did not arrive bit-exact"
done
grep -h "rail ra2$$ to rank 1 .*failed" "$L/rails_fo_destroy_0.out" | head -n 1
grep -q "rail ra2$$ to rank 1 .*failed.*go again" "$L/rails_fo_destroy_0.out" ||
    fail "rank 0's destroy did not find rail 2 lost"

echo "ok: two rails used, 1.4x over one, a broken rail falls back (at init and on first use), a rail lost mid-run fails over, comes back into use, and then the other (the bootstrap's) can go; a rail lost under a destroy's last messages"
