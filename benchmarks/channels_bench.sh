#!/bin/sh
# One channel against two over TCP: two network namespaces ("hosts")
# joined by one veth pair limited to RATE each way (tc tbf; none: unshaped),
# NR ranks on each (rank r on host r mod 2), the ring all-reduce (or
# COLL=allgather ...) forced, RCOLL_NCHANNELS=1 and 2 interleaved in each
# of ROUNDS rounds; rcoll-perf time-targeted (trials of 0.1 s, median of
# 5), out-of-place time in us, the median over rounds, and 2 / 1.
# Usage (root): benchmarks/channels_bench.sh BUILDDIR RATE NR ROUNDS
#   e.g. benchmarks/channels_bench.sh build 1gbit 3 5
B=$1; RATE=$2; NR=$3; ROUNDS=$4; COLL=${COLL:-allreduce}
SIZES=${SIZES:-"-b 4M -e 64M -f 4"}
N=$((2 * NR)); A=chA$$; Z=chB$$; VA=cA$$; VB=cB$$
cleanup() { ip netns del $A 2> /dev/null; ip netns del $Z 2> /dev/null; }
trap cleanup EXIT INT TERM
ip netns add $A && ip netns add $Z && ip link add $VA type veth peer name $VB &&
ip link set $VA netns $A && ip link set $VB netns $Z &&
ip -n $A addr add 198.18.13.1/24 dev $VA && ip -n $Z addr add 198.18.13.2/24 dev $VB &&
ip -n $A link set $VA up && ip -n $Z link set $VB up && ip -n $A link set lo up && ip -n $Z link set lo up || exit 1
if [ "$RATE" != none ]; then
ip netns exec $A tc qdisc add dev $VA root tbf rate "$RATE" burst 256kb latency 100ms &&
ip netns exec $Z tc qdisc add dev $VB root tbf rate "$RATE" burst 256kb latency 100ms || exit 1
fi
tmp=$(mktemp -d); port=29900
perf() { tag=$1; shift; port=$((port + 1)); pids=""; r=0
    while [ $r -lt $N ]; do ns=$A; [ $((r % 2)) = 1 ] && ns=$Z
        ip netns exec $ns env RCOLL_ROOT=198.18.13.1:$port RCOLL_SIZE=$N RCOLL_RANK=$r \
            RCOLL_SECRET=00112233445566778899aabbccddeeff "$@" \
            "$B/benchmarks/rcoll-perf" $COLL $SIZES -T 0.1 -R 5 -w 2 -c 0 -P 0 > "$tmp/$tag.$r" 2>&1 &
        pids="$pids $!"; r=$((r + 1)); done
    for p in $pids; do wait $p; done
    grep -E '^ +[0-9]+ ' "$tmp/$tag.0" | awk '{print $1, $6}' >> "$tmp/$tag.rows"; }
i=0
while [ $i -lt "$ROUNDS" ]; do
    perf c1 RCOLL_ALGO=$COLL:ring RCOLL_NCHANNELS=1
    perf c2 RCOLL_ALGO=$COLL:ring RCOLL_NCHANNELS=2
    i=$((i + 1)); done
med() { awk -v s="$2" '$1 == s {print $2}' "$tmp/$1.rows" | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }
echo "$COLL ring, 2 hosts x $NR, veth $RATE, median of $ROUNDS"
for s in $(awk '{print $1}' "$tmp/c1.rows" | sort -n | uniq); do
    a=$(med c1 $s); b=$(med c2 $s)
    awk -v s=$s -v a=$a -v b=$b 'BEGIN { printf "%10d %11.0f %11.0f %6.2f\n", s, a, b, b / a }'; done
rm -rf "$tmp"
