#!/bin/sh
# Placement and hierarchy across hosts, measured: two network namespaces
# ("hosts") joined by a veth pair limited to RATE each way (tc tbf), NR
# ranks on each, in a rank order scrambled across the hosts (even ranks on
# host A, odd on host B); inside a host the ranks use shared memory.
# Compares, for all-reduce (or COLL=allgather) of each size (rcoll-perf,
# out-of-place time, median of ROUNDS runs):
#   ring/user  the flat ring in rank order (RCOLL_RING_ORDER=user): every
#              hop crosses the network
#   ring/topo  the flat ring in the host-contiguous order (the default)
#   hier       the hierarchical algorithm
#   tuner      whatever the tuner picks (the default configuration)
# With COLL=alltoall the first two columns are the flat pairwise exchange
# and Bruck instead of the two rings.
# SIZES overrides rcoll-perf's size range (default "-b 256K -e 16M -f 4").
# Usage (root): benchmarks/hosts_bench.sh BUILDDIR [RATE] [NR] [ROUNDS]
#   e.g. benchmarks/hosts_bench.sh build 1gbit 3 3
#        COLL=allgather benchmarks/hosts_bench.sh build 1gbit 3 3
#        COLL=alltoall SIZES="-b 64 -e 1M -f 4" benchmarks/hosts_bench.sh build 1gbit 3 5
B=${1:?usage: hosts_bench.sh BUILDDIR [RATE] [NR] [ROUNDS]}
RATE=${2:-1gbit}; NR=${3:-3}; ROUNDS=${4:-3}; COLL=${COLL:-allreduce}
SIZES=${SIZES:-"-b 256K -e 16M -f 4"}
N=$((2 * NR))
A=rcbA$$; Z=rcbB$$; VA=bA$$; VB=bB$$
cleanup() { ip netns del $A 2> /dev/null; ip netns del $Z 2> /dev/null; }
trap cleanup EXIT INT TERM
ip netns add $A && ip netns add $Z &&
ip link add $VA type veth peer name $VB &&
ip link set $VA netns $A && ip link set $VB netns $Z &&
ip -n $A addr add 198.18.11.1/24 dev $VA && ip -n $Z addr add 198.18.11.2/24 dev $VB &&
ip -n $A link set $VA up && ip -n $Z link set $VB up &&
ip -n $A link set lo up && ip -n $Z link set lo up &&
ip netns exec $A tc qdisc add dev $VA root tbf rate "$RATE" burst 256kb latency 100ms &&
ip netns exec $Z tc qdisc add dev $VB root tbf rate "$RATE" burst 256kb latency 100ms ||
    { echo "namespace/veth/tbf setup failed (needs root, iproute2, sch_tbf)"; exit 1; }
tmp=$(mktemp -d)
port=29800
perf() { # perf TAG ENV...: one rcoll-perf run, rows kept in $tmp/TAG.N
    tag=$1; shift
    port=$((port + 1))
    pids=""
    r=0
    while [ $r -lt $N ]; do
        ns=$A; [ $((r % 2)) = 1 ] && ns=$Z
        ip netns exec $ns env RCOLL_ROOT=198.18.11.1:$port RCOLL_SIZE=$N RCOLL_RANK=$r \
            RCOLL_SECRET=00112233445566778899aabbccddeeff "$@" \
            "$B/benchmarks/rcoll-perf" $COLL $SIZES -n 5 -w 2 -c 0 \
            > "$tmp/$tag.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    for p in $pids; do wait $p; done
    grep -E '^ +[0-9]+ ' "$tmp/$tag.0" | awk '{print $1, $6}' >> "$tmp/$tag.rows"
}
i=0
while [ $i -lt "$ROUNDS" ]; do
    if [ $COLL = alltoall ]; then
        perf user RCOLL_ALGO=alltoall:pairwise
        perf topo RCOLL_ALGO=alltoall:bruck
    else
        perf user RCOLL_ALGO=$COLL:ring RCOLL_RING_ORDER=user
        perf topo RCOLL_ALGO=$COLL:ring
    fi
    perf hier RCOLL_ALGO=$COLL:hierarchical
    perf tuner
    i=$((i + 1))
done
med() { # med TAG SIZE: the median time
    awk -v s="$2" '$1 == s {print $2}' "$tmp/$1.rows" | sort -g |
        awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'
}
echo "$COLL, 2 hosts x $NR ranks (rank r on host r mod 2), veth at $RATE each way,"
echo "shm inside a host; out-of-place time in us, median of $ROUNDS runs"
c1=ring/user; c2=ring/topo
[ $COLL = alltoall ] && { c1=pairwise; c2=bruck; }
printf '%10s %11s %11s %11s %11s %10s %10s\n' bytes $c1 $c2 hier tuner \
    "$c1/hier" "$c2/hier"
for s in $(awk '{print $1}' "$tmp/hier.rows" | sort -n | uniq); do
    u=$(med user $s); t=$(med topo $s); h=$(med hier $s); a=$(med tuner $s)
    awk -v s=$s -v u=$u -v t=$t -v h=$h -v a=$a 'BEGIN {
        printf "%10d %11.0f %11.0f %11.0f %11.0f %9.2fx %9.2fx\n", s, u, t, h, a, u / h, t / h }'
done
rm -rf "$tmp"
