#!/bin/sh
# Inside the RDMA test guest (tests/rdma-vm/run): rcoll's 2-rank all-reduce
# busbw over soft-iWARP between the namespace hosts h0 and h1, against what
# one QP's raw RDMA WRITE gets between the same two devices (ib_write_bw -R,
# rdma_cm, as eRDMA needs), interleaved and repeated; prints each pair and
# the median ratio per size. The guest is emulated: compare, never quote
# the absolute numbers. Usage (from the source tree, after a build):
#   tests/rdma-vm/run sh benchmarks/ib_vs_raw.sh build [REPS] [SIZES...]
B=$(cd "${1:-build}" && pwd); shift
REPS=${1:-3}; [ $# -gt 0 ] && shift
SIZES=${*:-1048576 4194304 16777216}
port=29800
raw() { # raw BYTES: one QP's RDMA WRITE bandwidth h0 -> h1 in GB/s
    iters=$((16 * 1048576 / $1)); [ $iters -lt 16 ] && iters=16
    port=$((port + 1))
    ip netns exec h1 timeout 300 ib_write_bw -R -d siw1 -s $1 -n $iters -p $port > /tmp/raw_srv.out 2>&1 &
    srv=$!
    # the emulated guest is slow to start the server: retry the client
    for try in 1 2 3 4 5 6 7 8 9 10; do
        sleep 2
        ip netns exec h0 timeout 300 ib_write_bw -R -d siw0 -s $1 -n $iters -p $port 10.77.0.2 \
            > /tmp/raw_cli.out 2>&1 && break
    done
    wait $srv
    grep -q "^ *$1 " /tmp/raw_cli.out || { echo "ib_write_bw failed:" >&2; tail -n 5 /tmp/raw_cli.out /tmp/raw_srv.out >&2; }
    # the BW average column of the result row: perftest's MB is 2^20 bytes
    awk -v s=$1 '$1 == s && NF >= 4 {printf "%.4f\n", $4 * 1048576 / 1e9}' /tmp/raw_cli.out | tail -n 1
}
coll() { # coll BYTES: rcoll all-reduce busbw (GB/s), 2 ranks on h0 and h1
    iters=$((16 * 1048576 / $1)); [ $iters -lt 2 ] && iters=2
    port=$((port + 1))
    for r in 0 1; do
        ip netns exec h$r env RCOLL_ROOT=10.77.0.1:$port RCOLL_SIZE=2 RCOLL_RANK=$r \
            RCOLL_SECRET=00112233445566778899aabbccddeeff RCOLL_TRANSPORTS=ib \
            timeout 300 $B/benchmarks/rcoll-perf allreduce -b $1 -e $1 -n $iters -w 1 -c 0 \
            > /tmp/coll$r.out 2>&1 &
    done
    wait
    # nccl-tests row: size count type redop root time algbw busbw ...
    awk -v s=$1 '$1 == s {print $8}' /tmp/coll0.out | tail -n 1
}
echo "# size  rep  raw_write_GBps  rcoll_allreduce_busbw_GBps  ratio"
for s in $SIZES; do
    ratios=""
    rep=1
    while [ $rep -le $REPS ]; do
        a=$(raw $s); b=$(coll $s)
        r=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "nan" }')
        echo "$s $rep ${a:-?} ${b:-?} $r"
        ratios="$ratios $r"
        rep=$((rep + 1))
    done
    med=$(echo $ratios | tr ' ' '\n' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
    echo "# $s median ratio $med"
done
