#!/bin/sh
# rcoll-sim's estimates against runs. H "hosts" (network namespaces on one
# bridge, in another namespace), each joined to the bridge by a veth pair
# limited to RATE Mbit/s each way (tc tbf on both ends: the host's NIC out
# and in), R ranks per host in contiguous blocks (shared memory inside a
# host, TCP between). For each collective and algorithm: rcoll-perf at
# SIZE (out of place, median of ROUNDS runs of 3 timed calls), then
# rcoll-sim estimate on a cluster file of the same shape, and the ratio
# predicted / measured.
# The cluster file's NIC rate is RATE x 1448/1514: tbf counts Ethernet,
# IP and TCP headers (a 1,514-byte frame carries 1,448 bytes of payload).
# ALGOS lists the collective:algorithm pairs (default: ring and
# hierarchical all-reduce and all-gather, pairwise and hierarchical
# all-to-all; "coll:auto" is the tuner's choice).
# AB=OTHER_BUILDDIR compares two builds instead of the estimate: each round
# runs BUILDDIR then OTHER_BUILDDIR, and the medians' ratio is other/this.
# Usage (root): benchmarks/sim_calibrate.sh BUILDDIR [RATE] [R] [SIZE] [ROUNDS] [H...]
#   e.g. benchmarks/sim_calibrate.sh build 200 2 8M 3 2 4
#        AB=/tmp/old/build ALGOS="allreduce:rabenseifner allreduce:auto" \
#            benchmarks/sim_calibrate.sh build 200 2 4M 7 4
B=${1:?usage: sim_calibrate.sh BUILDDIR [RATE_MBIT] [R] [SIZE] [ROUNDS] [H...]}
RATE=${2:-200}; R=${3:-2}; SIZE=${4:-8M}; ROUNDS=${5:-3}
shift 5 2> /dev/null || shift $#
HOSTS=${*:-2 4}
P=rsc$$
SW=${P}sw
cleanup() {
    for h in 0 1 2 3 4 5 6 7; do ip netns del ${P}h$h 2> /dev/null; done
    ip netns del $SW 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
tmp=$(mktemp -d)
ip netns add $SW && ip -n $SW link add br0 type bridge &&
    ip -n $SW link set br0 up || { echo "needs root, iproute2"; exit 1; }
maxh=0
for h in $HOSTS; do [ "$h" -gt $maxh ] && maxh=$h; done
[ $maxh -le 8 ] || { echo "at most 8 hosts"; exit 1; }
h=0
while [ $h -lt $maxh ]; do
    ns=${P}h$h
    ip netns add $ns &&
    ip link add ${P}a$h type veth peer name ${P}b$h &&
    ip link set ${P}a$h netns $ns && ip link set ${P}b$h netns $SW &&
    ip -n $SW link set ${P}b$h master br0 && ip -n $SW link set ${P}b$h up &&
    ip -n $ns addr add 198.18.12.$((h + 1))/24 dev ${P}a$h &&
    ip -n $ns link set ${P}a$h up && ip -n $ns link set lo up &&
    ip netns exec $ns tc qdisc add dev ${P}a$h root tbf rate ${RATE}mbit burst 256kb latency 100ms &&
    ip netns exec $SW tc qdisc add dev ${P}b$h root tbf rate ${RATE}mbit burst 256kb latency 100ms ||
        { echo "host $h: setup failed (sch_tbf?)"; exit 1; }
    h=$((h + 1))
done
ALGOS=${ALGOS:-"allreduce:ring allreduce:hierarchical allgather:ring allgather:hierarchical alltoall:pairwise alltoall:hierarchical"}
port=29900
# run BUILD H COLL ALGO: one rcoll-perf run, its time (us) appended to
# $tmp/t.BUILD-INDEX
run() {
    bd=$1; H=$2; coll=$3; algo=$4; n=$((H * R)); port=$((port + 1)); pids=""; r=0
    a=RCOLL_ALGO=$coll:$algo
    [ "$algo" = auto ] && a=RCOLL_ALGO=
    while [ $r -lt $n ]; do
        ip netns exec ${P}h$((r / R)) env RCOLL_ROOT=198.18.12.1:$port \
            RCOLL_SIZE=$n RCOLL_RANK=$r RCOLL_SECRET=00112233445566778899aabbccddeeff \
            $a RCOLL_TIMEOUT=120 \
            "$bd/benchmarks/rcoll-perf" $coll -b $SIZE -e $SIZE -n 3 -w 1 -c 0 -P 0 \
            > "$tmp/out.$r" 2>&1 &
        pids="$pids $!"; r=$((r + 1))
    done
    for p in $pids; do wait $p; done
    grep -E '^ +[0-9]+ ' "$tmp/out.0" | awk '{print $6}' >> "$tmp/t.$5"
}
median() {
    sort -n "$1" | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}'
}
# measure H COLL ALGO: median time (us) of ROUNDS runs (with AB, of both
# builds, interleaved: "this other")
measure() {
    : > "$tmp/t.0"; : > "$tmp/t.1"; i=0
    while [ $i -lt "$ROUNDS" ]; do
        run "$B" "$@" 0
        [ -n "${AB:-}" ] && run "$AB" "$@" 1
        i=$((i + 1))
    done
    if [ -n "${AB:-}" ]; then echo "$(median "$tmp/t.0") $(median "$tmp/t.1")"
    else median "$tmp/t.0"; fi
}
if [ -n "${AB:-}" ]; then
    printf '%-5s %-10s %-14s %12s %12s %7s\n' hosts coll algorithm "this us" "other us" other/this
    for H in $HOSTS; do
        for ca in $ALGOS; do
            coll=${ca%%:*}; algo=${ca#*:}
            set -- $(measure $H $coll $algo)
            printf '%-5s %-10s %-14s %12s %12s %7s\n' $H $coll $algo "$1" "$2" \
                "$(awk "BEGIN { if (\"$1\" + 0 > 0 && \"$2\" + 0 > 0) printf \"%.2f\", $2 / $1; else print \"-\" }")"
        done
    done
    exit 0
fi
printf '%-5s %-10s %-14s %12s %12s %7s\n' hosts coll algorithm "measured us" "predicted us" ratio
for H in $HOSTS; do
    cat > "$tmp/cluster.conf" << EOC
hosts = $H
ranks_per_host = $R
nics = 1
nic_gbit = $(awk "BEGIN { print $RATE / 1000 * 1448 / 1514 }")
nic_latency_us = 50
local_gbyte = 5
local_latency_us = 5
send_us = 5
reduce_gbyte = 3
copy_gbyte = 5
cores_per_host = 2
EOC
    for ca in $ALGOS; do
        coll=${ca%%:*}; algo=${ca#*:}
        m=$(measure $H $coll $algo)
        p=$("$B/tools/rcoll-sim" estimate "$tmp/cluster.conf" $coll $SIZE --algo $algo |
            awk -v a=$algo '$1 == a {print $3}')
        printf '%-5s %-10s %-14s %12s %12s %7s\n' $H $coll $algo "$m" "$p" \
            "$(awk "BEGIN { if (\"$m\" + 0 > 0 && \"$p\" + 0 > 0) printf \"%.2f\", $p / $m; else print \"-\" }")"
    done
done
