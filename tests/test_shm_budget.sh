#!/bin/sh
# RCOLL_SHM_BUDGET bounds a rank's /dev/shm segment. Where full rings do
# not fit, a pool of chunk-sized slots shared by the peers keeps the chunk
# (RCOLL_SHM_POOL): 8 ranks with a 4500 KiB budget get 4 KiB ring slots
# and a pool of 8 slots of 512 KiB (7 senders contending for them), and
# run every collective and point to point bit-exact. Where not even the
# pool's 8 slots fit, the chunk is lowered: 4 ranks with a 1 MiB budget
# run at the chunk the budget allows (68 KiB: 3 rings of 4 slots and the
# shared area), and with a 64 KiB budget (below what 4 KiB chunks need)
# at 4 KiB chunks with a warning; results bit-exact each time
# (test_coll); rcoll-info -m shows the pool for 64 ranks, and the lowered
# chunk with RCOLL_SHM_POOL=0.
# Usage: test_shm_budget.sh BUILDDIR
B=$1
L="$B/tests/logs/shm_budget"
mkdir -p "$L"
RUN="$B/tools/rcoll-run"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
N=1,1023,17409,70001,300000
C=allreduce,allgather,broadcast,reduce_scatter,sendrecv

env RCOLL_TRANSPORTS=shm RCOLL_SHM_BUDGET=4500K RCOLL_DEBUG=info \
    RCOLL_DEBUG_SUBSYS=init "$RUN" -n 8 "$B/tests/test_coll" -q \
    -C $C,alltoall -N 1,4097,70001,1500000 \
    > "$L/pool.out" 2>&1 || fail "pool: test_coll failed"
grep "test_coll:" "$L/pool.out"
grep -q "7 local peers: rings of 4 4160-byte slots and a pool of 8 524288-byte slots" \
    "$L/pool.out" || fail "pool: no pool of 8 slots announced"
n=$(grep -c "ready: transports shm, chunk 524288 bytes" "$L/pool.out")
[ "$n" = 8 ] || fail "pool: $n of 8 ranks report the 524288-byte chunk"
env RCOLL_TRANSPORTS=shm RCOLL_SHM_BUDGET=4500K "$RUN" -n 8 \
    "$B/tests/test_p2p" > "$L/pool_p2p.out" 2>&1 ||
    fail "pool: test_p2p failed"
grep "test_p2p:" "$L/pool_p2p.out"

env RCOLL_TRANSPORTS=shm RCOLL_SHM_BUDGET=1M RCOLL_DEBUG=info \
    RCOLL_DEBUG_SUBSYS=init "$RUN" -n 4 "$B/tests/test_coll" -q -C $C -N $N \
    > "$L/1m.out" 2>&1 || fail "1 MiB budget: test_coll failed"
grep "test_coll:" "$L/1m.out"
grep -q "chunk 69632 bytes, not 524288 (RCOLL_CHUNK_SIZE)" "$L/1m.out" ||
    fail "1 MiB budget: no 69632-byte chunk announced"
n=$(grep -c "ready: transports shm, chunk 69632 bytes" "$L/1m.out")
[ "$n" = 4 ] || fail "1 MiB budget: $n of 4 ranks report the 69632-byte chunk"

env RCOLL_TRANSPORTS=shm RCOLL_SHM_BUDGET=64K "$RUN" -n 4 \
    "$B/tests/test_coll" -q -C $C -N $N > "$L/64k.out" 2>&1 ||
    fail "64 KiB budget: test_coll failed"
grep "test_coll:" "$L/64k.out"
grep -q "need more than RCOLL_SHM_BUDGET=65536 bytes of /dev/shm per rank even with 4096-byte chunks" \
    "$L/64k.out" || fail "64 KiB budget: no warning that it cannot be met"

"$B/tools/rcoll-info" -m 64 > "$L/info.out" 2>&1
grep -q "chunk 524288 bytes when all 64 ranks share a host: each rank's rings have 4160-byte slots and its segment a pool of 12 chunk-sized slots" \
    "$L/info.out" || fail "rcoll-info -m 64 does not show the pool"
RCOLL_SHM_POOL=0 "$B/tools/rcoll-info" -m 64 >> "$L/info.out" 2>&1
grep -q "chunk 61440 bytes when all 64 ranks share a host" "$L/info.out" ||
    fail "rcoll-info -m 64 with RCOLL_SHM_POOL=0 does not show the lowered chunk"
grep "chunk\|shm " "$L/info.out"
echo "shm budget: $fails failures"
[ $fails = 0 ]
