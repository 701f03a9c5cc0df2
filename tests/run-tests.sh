#!/bin/sh
# The test suite: every test in its own process group under a timeout,
# one PASS/FAIL/SKIP line each with its time, the tail of a failure's
# output, and the closing line "N passed, M failed, K skipped".
# Run by `make check` (which sets RCOLL_BUILDDIR / RCOLL_SRCDIR / MPIRUN).
# RCOLL_TEST_FILTER=regex runs only the tests whose name matches.
B=${RCOLL_BUILDDIR:-$(pwd)}
S=${RCOLL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
RUN="$B/tools/rcoll-run"
LOGDIR="$B/tests/logs"
mkdir -p "$LOGDIR"
pass=0; fail=0; skip=0; failed=""
t_start=$(date +%s)
# RCOLL_TEST_SANITIZER=1 (scripts/check-sanitizers.sh): the few long tests
# that the sanitizer builds run are sized down there - their memory and
# race checks need every code path, not every round or the 8 MiB counts
SAN=${RCOLL_TEST_SANITIZER:-0}

# t NAME TIMEOUT_S COMMAND...   exit 0 pass, 77 skip, anything else fail
# (TIMEOUT_S times RCOLL_TEST_TIMEOUT_SCALE: the sanitizer builds run 3-20x
# slower and set it)
t() {
    name=$1; limit=$(( $2 * ${RCOLL_TEST_TIMEOUT_SCALE:-1} )); shift 2
    if [ -n "$RCOLL_TEST_FILTER" ] && ! echo "$name" | grep -Eq "$RCOLL_TEST_FILTER"; then
        return
    fi
    log="$LOGDIR/$(echo "$name" | tr ' /:' '___').log"
    t0=$(date +%s.%N)
    # setsid: its own process group, so the timeout takes all of it
    timeout -k 5 "$limit" setsid "$@" > "$log" 2>&1 < /dev/null
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk "BEGIN { print $t1 - $t0 }")
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-44s %6.1fs\n' "$name" "$secs"
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1)); printf 'SKIP  %-44s %s\n' "$name" "$(tail -n 1 "$log")"
    else
        fail=$((fail + 1)); failed="$failed $name"
        [ $rc -eq 124 ] && why="timeout after ${limit}s (a hang)" || why="exit $rc"
        printf 'FAIL  %-44s %6.1fs  %s\n' "$name" "$secs" "$why"
        tail -n 25 "$log" | sed 's/^/      | /'
    fi
}

echo "rcoll test suite (logs in $LOGDIR)"
t "unit: reduce kernels"          60 "$B/tests/test_reduce"
# the portable kernels where the CPU has vector ones (16-bit floats)
t "unit: reduce kernels, RCOLL_SIMD=0" 60 env RCOLL_SIMD=0 "$B/tests/test_reduce"
t "unit: parsers and schedules"   60 "$B/tests/test_units"
t "rcache: registrations reused, never after free/munmap/DONTNEED, bounded (memory monitor)" 60 \
    "$B/tests/test_rcache" unit
t "layers: no two files of src/ call each other (scripts/check-calls.py)" 60 \
    python3 "$S/scripts/check-calls.py" "$B"
t "dist: every source file git tracks is named in Makefile.am" 30 \
    sh "$S/scripts/check-dist-list.sh" "$S"
t "unit: tcp credits across EAGAIN, ring streams (smallest and deepest window), windows, matcher unblock" 60 "$B/tests/test_transport"
# every algorithm against a fake transport (lanes, 1-4 slots, refused and
# zero-copy sends, random delivery, 3 skewed operations in flight, a rank
# killed), 2 to 33 ranks: bit-exact, no deadlock, failures name a rank
# (4 seeds, ~12 s)
t "protocol: every algorithm against a fake transport, seeded (lanes, credits, zero-copy, skew, a rank killed)" 180 \
    sh -c "for s in 1 2 3 4; do '$B/tests/test_protocol' $([ "$SAN" = 1 ] && echo 10 || echo 30) \$s || exit 1; done"
# rcoll-sim: every algorithm at 1-257 ranks through the real executor
# over a modelled network, a planted bug caught, the estimator's bytes
# and rails against the formula (~30 s)
t "sim: rcoll-sim verifies every algorithm at 1-257 ranks (5 up to 16,384), catches a planted skipped block, estimates a 2-rail ring" 240 \
    sh "$S/tests/test_sim.sh" "$B" "$S"
t "topo: hwloc XML topologies, paths, NIC, GDR" 30 "$B/tests/test_topo" "$S/tests/topo"
# (each command's own status is checked, not a pipeline's last one; a
# missing file must be an error exit with a message, not a signal)
t "topo: rcoll-topo explains a topology" 30 sh -c "'$B/tools/rcoll-topo' --xml '$S/tests/topo/a.xml' > '$LOGDIR/topo_a.out' 2>&1 || exit 1; cat '$LOGDIR/topo_a.out'; grep -q 'GPU 2 -> NIC 0 (mlx5_0): path PHB, the nearest; GDR no' '$LOGDIR/topo_a.out' || exit 1; grep -q 'rank 3 -> NIC 0 (mlx5_0), package 0 (topology' '$LOGDIR/topo_a.out' && grep -q 'rank 4 -> NIC 1 (mlx5_1), package 1 (topology' '$LOGDIR/topo_a.out' || exit 1; '$B/tools/rcoll-topo' --xml /nonexistent > '$LOGDIR/topo_missing.out' 2>&1; rc=\$?; cat '$LOGDIR/topo_missing.out'; [ \$rc -ge 1 ] && [ \$rc -lt 128 ] && grep -q nonexistent '$LOGDIR/topo_missing.out'"
t "topo: hwloc detection, RCOLL_TOPO_DUMP_FILE reads back" 60 sh "$S/tests/test_topo_detect.sh" "$B" "$S"
t "topo: rcoll-topo --hosts shows the ring order, channels' rings, rings, locality and halving order" 30 sh -c "'$B/tools/rcoll-topo' --hosts a,b,a,b,a,b > '$LOGDIR/topo_hosts.out' 2>&1 || exit 1; cat '$LOGDIR/topo_hosts.out'; grep -q '^  0 2 4 | 1 3 5' '$LOGDIR/topo_hosts.out' && grep -q 'channel 1.s ring (backwards): 5 3 1 | 4 2 0' '$LOGDIR/topo_hosts.out' && grep -q 'channel 2.s ring: 2 4 0 | 3 5 1' '$LOGDIR/topo_hosts.out' && grep -q 'network ring 1: 2 3' '$LOGDIR/topo_hosts.out' && grep -q 'partner r ^ 2^k, k = 0..2: 2 0 0' '$LOGDIR/topo_hosts.out' && grep -q 'halves with r ^ 2^k for k = 1 0 ' '$LOGDIR/topo_hosts.out'"
t "api: arguments and errors"     60 "$B/tests/test_api"
t "docs: variables.md is the parameter table, README's table is rcoll-info -a's, links resolve, every exported function in rcoll.h(3)" 60 \
    sh "$S/tests/test_docs.sh" "$B" "$S"
# every collective x type x op x count, on each transport
# (8 ranks on these 2 cores: without the 8 MiB counts, which the smaller
# runs cover, to keep CI under an hour)
# (shm: not 4 ranks, a power of two like 2 and 8 - cut for CI time with
# the point-to-point suite, 37 s; not 5 ranks either, 82 s, cut with the
# settings/abort/fault tests: 3 is the non-power of two here, and the
# forced-algorithm loop below runs every algorithm at 5 and 7 ranks)
for n in 1 2 3 8; do
    big=""; [ $n = 8 ] || [ "$SAN" = 1 ] && big="-N 0,1,7,1023,131073"
    t "coll: matrix, shm, $n ranks" 600 env RCOLL_TRANSPORTS=shm \
        "$RUN" -n $n "$B/tests/test_coll" $big
done
# (tcp at 8 ranks: -T, a type of each element size with sum, max and avg;
# the datatypes and ops are the same code over every transport)
for n in 2 3 8; do
    big=""; [ $n = 8 ] && big="-T -N 0,1,7,1023,131073"
    t "coll: matrix, tcp, $n ranks" 600 env RCOLL_TRANSPORTS=tcp \
        "$RUN" -n $n "$B/tests/test_coll" $big
done
# every algorithm forced (not only the tuner's choice), on each transport,
# 1-8 ranks; 64 KiB chunks so that 40000 and 70001 elements cross several
# chunks. The list comes from the library itself (rcoll-info -a).
COUNTS=0,1,7,1023,40000,70001
# (the hierarchical all-reduce needs several hosts: see "hosts:" below)
PAIRS=$("$B/tools/rcoll-info" -a | awk 'NF > 2 && $1 ~ /^(allreduce|allgather|broadcast|reduce_scatter|reduce)$/ && $2 != "hierarchical" && $2 != "shared" {print $1 ":" $2}')
# the list must not vanish (an empty or cut rcoll-info -a would silently
# drop these tests): 15 pairs today, and no fewer may run
t "algo: rcoll-info -a lists at least 15 algorithms to force" 30 sh -c \
    "n=\$(echo '$PAIRS' | grep -c :); echo \"\$n pairs\"; [ \$n -ge 15 ]"
for pair in $PAIRS; do
    coll=${pair%%:*}
    for tl in shm tcp; do
        # shm: 1-5, 7 and 8 ranks (6 adds no case that 5 and 7 lack).
        # TCP: 3 and 8 ranks only - the schedules are the ones shm runs,
        # only the transport differs, and the TCP matrices, slot and fault
        # tests cover the transport (cut, with shm's 6, for CI time when
        # the point-to-point suite came: about 130 s)
        # Every type and op at shm's 5 ranks; elsewhere a type of each
        # element size with sum, max and avg (test_coll -T): an algorithm
        # splits blocks by element size and count, and the ops run one
        # kernel call per block whatever the op (about 3x less time)
        ns="1 2 3 4 5 7 8"
        [ $tl = tcp ] && ns="3 8"
        for n in $ns; do
            sub=-T; [ $tl = shm ] && [ $n = 5 ] && sub=
            t "algo: $pair, $tl, $n ranks" 300 env RCOLL_ALGO=$pair RCOLL_TRANSPORTS=$tl \
                RCOLL_CHUNK_SIZE=64K "$RUN" -n $n "$B/tests/test_coll" -q $sub -C $coll -N $COUNTS
        done
    done
done
# the new collectives' algorithms forced (the matrix above runs the
# tuner's choice): both trees and both direct forms
for pair in alltoall:pairwise alltoall:bruck gather:binomial gather:direct scatter:binomial scatter:direct; do
    for n in 3 7 8; do
        sub=-T; [ $n = 7 ] && sub=
        t "algo: $pair, shm, $n ranks" 300 env RCOLL_ALGO=$pair RCOLL_TRANSPORTS=shm \
            RCOLL_CHUNK_SIZE=64K "$RUN" -n $n "$B/tests/test_coll" -q $sub -C ${pair%%:*} -N $COUNTS
    done
    t "algo: $pair, tcp, 4 ranks" 300 env RCOLL_ALGO=$pair RCOLL_TRANSPORTS=tcp \
        RCOLL_CHUNK_SIZE=64K "$RUN" -n 4 "$B/tests/test_coll" -q -T -C ${pair%%:*} -N $COUNTS
done
# point to point: ring, halo and all-pairs exchanges with every send posted
# before any receive (4 B - 64 MiB), tags received out of order, groups
# with blocking calls, operations in flight together (tests/test_p2p.c)
for tl in shm tcp; do
    ns="1 2 3 4 8"
    [ $tl = tcp ] && ns="2 3 8"
    for n in $ns; do
        e=""; [ $n = 8 ] && e="-e 16777216"
        [ $tl = tcp ] && e="$e -L 1" # only the bootstrap's listener stays
        t "p2p: exchanges, tags, groups, overlap, $tl, $n ranks" 300 env RCOLL_TRANSPORTS=$tl \
            "$RUN" -n $n "$B/tests/test_p2p" $e
    done
    # one slot of 4 KiB, rendezvous from 100 B: credits, set-aside
    # messages and the non-overtaking order under pressure
    t "p2p: $tl, 4 KiB chunks, 1 slot, rendezvous from 100 B" 300 env RCOLL_TRANSPORTS=$tl \
        RCOLL_CHUNK_SIZE=4096 RCOLL_NSLOTS=1 RCOLL_P2P_EAGER=100 "$RUN" -n 4 "$B/tests/test_p2p" -e 4194304
done
# connections on first use (RCOLL_TCP_CONNECT=lazy): the TCP listener stays;
# the sanitizer jobs run this one too (tests/test_tcp_lazy.sh has the rest)
t "p2p: exchanges, tags, groups, overlap, lazy tcp, 3 ranks" 300 env RCOLL_TRANSPORTS=tcp \
    RCOLL_TCP_CONNECT=lazy "$RUN" -n 3 "$B/tests/test_p2p" -L 2
t "fail: gone, lazy tcp (a send to a rank that destroyed its communicator fails at once, naming it)" 60 \
    env RCOLL_TRANSPORTS=tcp RCOLL_TCP_CONNECT=lazy "$B/tests/test_fail" gone
t "p2p: tcp receives in place (every large receive's bytes land in the destination)" 120 \
    sh "$S/tests/test_tcp_inplace.sh" "$B"
t "tcp failover: a socket dropped mid-run (RCOLL_FAULT), its peer reached over the others: collectives and p2p bit-exact" 240 \
    sh "$S/tests/test_tcp_failover.sh" "$B"
t "rcoll-info -p: a running job's lanes and counters, exact over shm and tcp" 240 \
    sh "$S/tests/test_lanes.sh" "$B"
t "fail: inplace, tcp (a receive in place times out mid-transfer)" 90 env RCOLL_TRANSPORTS=tcp \
    "$B/tests/test_fail" inplace
t "fail: unplace_nomem, tcp (the transport fails the peer while the engine ends a failed receive)" \
    90 env RCOLL_TRANSPORTS=tcp "$B/tests/test_fail" unplace_nomem
t "p2p: shm single copy, 3 ranks" 300 env RCOLL_TRANSPORTS=shm RCOLL_SHM_CMA_MIN=4096 \
    "$RUN" -n 3 "$B/tests/test_p2p"
# whole transfers as one single-copy message over 4 KiB slots (messages
# that cover many chunks; the misaligned reads' bounce path)
t "p2p: shm whole-transfer single copy, 4 KiB chunks, 1 slot" 300 env RCOLL_TRANSPORTS=shm \
    RCOLL_SHM_RNDV_MIN=1 RCOLL_CHUNK_SIZE=4096 RCOLL_NSLOTS=1 RCOLL_P2P_EAGER=100 \
    "$RUN" -n 4 "$B/tests/test_p2p" -e 4194304
t "coll: shm whole-transfer single copy, 4 KiB chunks, 5 ranks" 300 env RCOLL_TRANSPORTS=shm \
    RCOLL_SHM_RNDV_MIN=1 RCOLL_CHUNK_SIZE=4096 RCOLL_NSLOTS=2 "$RUN" -n 5 "$B/tests/test_coll" \
    -q -C alltoall,alltoallv,gather,scatter,sendrecv -N 0,1,7,1023,5000,70001
# small slots and one socket: chunking, credits and wrap-around of the rings
for tl in shm tcp; do
    t "coll: $tl, 4 KiB chunks, 2 slots" 300 env RCOLL_TRANSPORTS=$tl RCOLL_TCP_NSOCKS=1 \
        RCOLL_CHUNK_SIZE=4096 RCOLL_NSLOTS=2 "$RUN" -n 5 "$B/tests/test_coll" -N 0,1,7,1023,5000
    t "coll: $tl, 1 slot" 300 env RCOLL_TRANSPORTS=$tl RCOLL_TCP_NSOCKS=3 RCOLL_NSLOTS=1 \
        RCOLL_CHUNK_SIZE=65536 "$RUN" -n 4 "$B/tests/test_coll" -N 1,16385,100000
done
# 4 KiB chunks over tcp, the halving all-reduce and reduce-scatter at 8
# ranks: kernel buffers smaller than the credit window let TCP's own
# window stall each step for 100 ms (the run took minutes); now no stall
t "coll: tcp, 4 KiB chunks, halving algorithms at 8 ranks, no 100 ms stall" 120 sh -c \
    "RCOLL_DEBUG=debug RCOLL_DEBUG_SUBSYS=coll RCOLL_ALGO=allreduce:rabenseifner RCOLL_TRANSPORTS=tcp \
     RCOLL_TCP_NSOCKS=1 RCOLL_CHUNK_SIZE=4096 RCOLL_NSLOTS=2 '$RUN' -n 8 '$B/tests/test_coll' -q \
     -C allreduce,reduce_scatter -N 0,1,7,1023,5000,70001 > '$LOGDIR/tcp_stall.out' 2>&1; rc=\$?;
     grep -v 'rcoll DEBUG' '$LOGDIR/tcp_stall.out'; n=\$(grep -c 'no progress for' '$LOGDIR/tcp_stall.out');
     echo \"\$n stalls of 100 ms\"; [ \$rc = 0 ] && [ \$n -le 3 ]"
# shm with single copy (off by default) for moves, and for everything
# (reductions then fetch into a bounce buffer)
t "coll: shm, single copy for moves, 3 ranks" 600 env RCOLL_TRANSPORTS=shm RCOLL_SHM_CMA_MIN=64K \
    "$RUN" -n 3 "$B/tests/test_coll" -N 0,1,7,1023,40000,70001
t "coll: shm, single copy for all, 4 KiB+, 3 ranks" 600 env RCOLL_TRANSPORTS=shm \
    RCOLL_SHM_CMA_MIN=4096 RCOLL_SHM_CMA_ALL=1 RCOLL_CHUNK_SIZE=64K \
    "$RUN" -n 3 "$B/tests/test_coll" -N 0,1,7,1023,40000,70001
for n in 1 2 4 5; do
    t "nonblocking + 2 threads, $n ranks" 300 "$RUN" -n $n "$B/tests/test_nonblocking"
    t "register: collectives from registered buffers, $n ranks" 120 "$RUN" -n $n "$B/tests/test_register"
done
t "nonblocking + 2 threads, tcp, 4 ranks" 300 env RCOLL_TRANSPORTS=tcp \
    "$RUN" -n 4 "$B/tests/test_nonblocking"
# an asynchronous memory domain (as a GPU's): every received message's
# copy or reduction runs late, in order, one per test of the executor
# (coll_md_host_deferred); a slot released or a chunk forwarded before its
# operation ran gives wrong bytes. 64 KiB chunks and counts up to 70001
# (5-9 chunks a transfer for 4-8 byte types: more than the 4 slots, and
# receives in place over tcp; 16385: one element past a 4-byte type's
# chunk) instead of the default 8 MiB, which adds nothing here and costs
# about 30 s a transport
for tl in shm tcp; do
    t "md: asynchronous memory domain (RCOLL_FAULT=md_deferred), $tl, 4 ranks: collectives, non-blocking, p2p" 300 \
        env RCOLL_FAULT=md_deferred RCOLL_TRANSPORTS=$tl sh -c "RCOLL_CHUNK_SIZE=64K '$RUN' -n 4 '$B/tests/test_coll' -q -N 0,1,7,1023,16385,70001 &&
        '$RUN' -n 4 '$B/tests/test_nonblocking' && '$RUN' -n 4 '$B/tests/test_p2p'"
done
# the shared area (coll/area.c; the shm matrices above run it too, for
# every small call): blocking and non-blocking mixed per rank, up to 80 in
# flight, skewed ranks; 3 ranks with a 16 KiB data space (RCOLL_SHM_AREA
# 8K), so that inputs wrap round it often; 'shared' is left out of the
# forced-algorithm loop above, which would run it only where the tuner's
# area runs anyway
for n in 3 8; do
    a=""; [ $n = 3 ] && a="RCOLL_SHM_AREA=8192"
    t "area: shared-area collectives under stress, $n ranks${a:+, $a}" 300 sh -c \
        "$a RCOLL_TIMEOUT=30 RCOLL_DEBUG=info RCOLL_TRANSPORTS=shm '$RUN' -n $n '$B/tests/test_area' 2000 > '$LOGDIR/area_$n.out' 2>&1; rc=\$?; grep -v 'rcoll INFO' '$LOGDIR/area_$n.out'; [ \$rc = 0 ] && grep -q 'shared area in use' '$LOGDIR/area_$n.out'"
done
t "area: RCOLL_SHM_AREA=0 (messages only), 3 ranks" 300 sh -c \
    "RCOLL_SHM_AREA=0 RCOLL_DEBUG=info RCOLL_TRANSPORTS=shm '$RUN' -n 3 '$B/tests/test_area' 100 > '$LOGDIR/area_off.out' 2>&1; rc=\$?; grep -v 'rcoll INFO' '$LOGDIR/area_off.out'; [ \$rc = 0 ] && ! grep -q 'shared area in use' '$LOGDIR/area_off.out'"
t "fail: mismatch_chan (a count that splits in channels on some ranks only), tcp" 90 \
    env RCOLL_TRANSPORTS=tcp RCOLL_NCHANNELS=2 RCOLL_ALGO=allreduce:ring "$B/tests/test_fail" mismatch_chan
for tl in shm tcp; do
    for s in kill abort abort_thread timeout cycle mismatch sigpipe inflight; do
        t "fail: $s, $tl" 90 env RCOLL_TRANSPORTS=$tl "$B/tests/test_fail" $s
    done
done
# about one run in three failed before the inline path's last look
t "fail: late_abort x20, shm (a finished barrier survives a peer's abort right after it)" 90 sh -c \
    "for i in \$(seq 1 20); do RCOLL_TRANSPORTS=shm '$B/tests/test_fail' late_abort > '$LOGDIR/late_abort.out' 2>&1 || { cat '$LOGDIR/late_abort.out'; exit 1; }; done"
# one rank 30 ms late: the others finish within the time the data takes,
# not at the engine's 100 ms unblock (per-peer cursors)
for tl in shm tcp; do
    t "skew: all-to-all-v with a late rank, no stall, $tl, 4 ranks" 120 env RCOLL_TRANSPORTS=$tl \
        "$RUN" -n 4 "$B/tests/test_skew" a2av -r 10 -m 90
done
t "skew: hierarchical all-reduce with a late rank, no stall, 2 hosts x 2 (RCOLL_HOSTID)" 120 \
    "$RUN" -n 4 sh -c "RCOLL_HOSTID=h\$((RCOLL_RANK % 2)) RCOLL_ALGO=allreduce:hierarchical exec '$B/tests/test_skew' hier -r 10 -m 90"
t "fail: late_abort, tcp" 90 env RCOLL_TRANSPORTS=tcp "$B/tests/test_fail" late_abort
t "fail: config_timeout (a communicator's own timeout, rcoll_comm_init_rank_config)" 90 \
    "$B/tests/test_fail" config_timeout
t "fail: abort_race, 1000 trials: calls racing an abort from another thread" 120 \
    "$B/tests/test_fail" abort_race 1000
t "shm: transport choice, /dev/shm clean after SIGKILL" 120 sh "$S/tests/test_shm.sh" "$B"
t "shm: 2 ranks on one core stay fast (spin budget)" 120 sh "$S/tests/test_shared_core.sh" "$B"
t "launch: rcoll-run behaviour"     120 sh "$S/tests/test_launcher.sh" "$B"
t "launch: ranks started by hand"  120 sh "$S/tests/test_by_hand.sh" "$B"
t "config: settings that shape the wire must agree across ranks" 120 sh "$S/tests/test_config_agree.sh" "$B"
t "hosts: 2 network namespaces x 2 ranks" 180 sh "$S/tests/test_netns.sh" "$B"
t "open files: 24 ranks over tcp raise a low soft limit; a low hard limit fails every rank at once, naming it" 120 sh "$S/tests/test_fdlimit.sh" "$B"
t "tcp: connections on first use: collectives, crossed connects made once, only the peers used, 64 ranks in 100 open files" 240 sh "$S/tests/test_tcp_lazy.sh" "$B"
t "bootstrap: 64 ranks in 64 open files: the root calls ranks back; a missing, dead or killed-root rank is named" 180 sh "$S/tests/test_boot_fds.sh" "$B"
t "scale: RCOLL_SHM_BUDGET: a pool of slots shared by 7 peers keeps the chunk; else the chunk is lowered (68 KiB, 4 KiB with a warning), bit-exact" 400 sh "$S/tests/test_shm_budget.sh" "$B"
t "scale: 64 ranks of one host: 6 collectives bit-exact, <= 16 MiB per rank" 120 "$RUN" -n 64 "$B/tests/test_scale" 16
t "scale: 256 ranks of one host: 6 collectives bit-exact, <= 16 MiB per rank" 240 "$RUN" -n 256 "$B/tests/test_scale" 16
t "hosts: 8 namespace hosts on a bridge, 64 and 256 ranks (shm inside, tcp between): 6 collectives bit-exact" 300 sh "$S/tests/test_hosts8.sh" "$B" 64 256
t "hosts: 2 namespaces joined by 2 rails: both used, 2x one when shaped, a broken rail falls back, a rail lost mid-run fails over and back, also under a destroy, bit-exact" 300 sh "$S/tests/test_rails.sh" "$B"
# topology-aware placement: host-contiguous ring order, hierarchical
# all-reduce, bytes across the network (tests/test_hosts.sh); hosts of one
# machine told apart by RCOLL_HOSTID (tests/test_hostid.sh)
t "hosts: 2 namespaces x 3 scrambled ranks, ring order, veth bytes" 300 sh "$S/tests/test_hosts.sh" "$B"
t "hosts: RCOLL_HOSTID, hierarchical and ring-order algorithms" 300 sh "$S/tests/test_hostid.sh" "$B"
# fault injection (tests/faults/run.sh): SIGKILL at random moments, SIGSTOP,
# link cuts, bit flips with RCOLL_CHECKSUM; netem runs in the RDMA guest
# the randomized campaign's sample: 20 trials per transport (2-8 ranks,
# every operation, SIGKILL/SIGSTOP/link cuts at random moments; 1,000 per
# transport ran outside CI, docs/reliability.md), the seed changing daily
# (printed: run.sh BUILD campaign TL 20 SEED replays it); a sample sized
# for CI time (about 25-50 s per transport)
seed=$(date +%j | sed 's/^0*//')
for tl in tcp shm; do
    # (SIGKILL x15: the kill trials also check the detection time and
    # /dev/shm; the campaign covers more kinds and moments. 50 took 70 s
    # per transport, and the ASan job repeats the tcp one)
    t "faults: SIGKILL x15 at random moments, $tl" 600 bash "$S/tests/faults/run.sh" "$B" kill $tl 15
    t "faults: SIGSTOP names the silent rank, $tl" 120 bash "$S/tests/faults/run.sh" "$B" stop $tl
    t "faults: campaign sample, 20 random trials (seed $seed), $tl" 600 bash "$S/tests/faults/run.sh" "$B" campaign $tl 20 $seed
done
t "faults: link cut, short survived, long named" 300 bash "$S/tests/faults/run.sh" "$B" cut tcp
t "faults: bit flips after TCP, RCOLL_CHECKSUM" 300 bash "$S/tests/faults/run.sh" "$B" corrupt tcp
t "faults: a failed epoll_ctl(MOD) is an error at once, naming the peer" 120 bash "$S/tests/faults/run.sh" "$B" epoll
for tl in shm tcp; do
    t "footprint: 1000 communicators, no fd/thread/RSS growth, $tl" 300 env RCOLL_TRANSPORTS=$tl \
        "$RUN" -n 2 "$B/tests/test_many_comms" 1000
done
t "security: strangers at the root are dropped, job undisturbed" 120 bash "$S/tests/faults/run.sh" "$B" strangers
t "launch: mpirun -np 4 rcoll-perf" 300 sh "$S/tests/test_mpirun.sh" "$B" "$MPIRUN"
t "launch: mpirun -np 5 test_p2p and test_coll (new collectives)" 300 sh "$S/tests/test_mpirun.sh" "$B" "$MPIRUN" p2p
t "mpi: unmodified MPI programs on rcoll through LD_PRELOAD=librcoll-mpi.so (C, mpi4py; 2-5 ranks)" 300 \
    sh "$S/tests/test_mpi_preload.sh" "$B" "$MPIRUN"
for coll in allreduce reduce_scatter reduce allgather broadcast; do
    t "perf: rcoll-perf $coll, all types/ops" 300 "$RUN" -n 3 "$B/benchmarks/rcoll-perf" \
        $coll -b 8 -e 1M -f 8 -d all -o all -n 2 -w 1 -c 1 -r 1
done
t "perf: rcoll-perf alltoall, time-targeted trials (-T, -R), checked" 120 sh -c \
    "'$RUN' -n 2 '$B/benchmarks/rcoll-perf' alltoall -b 64 -e 64K -f 32 -T 0.02 -R 3 -c 1 > '$B/tests/logs/perf_T.out' 2>&1 &&
     cat '$B/tests/logs/perf_T.out' && grep -q 'time-targeted: trials of >= 0.02 s on the slowest rank, median of 3' '$B/tests/logs/perf_T.out' &&
     [ \$(grep -c '^ *[0-9]' '$B/tests/logs/perf_T.out') = 3 ]"
t "rdma-vm: guest status comes back, no QEMU left on SIGTERM" 300 sh "$S/tests/test_rdma_vm_harness.sh" "$S"
# GPU buffers (tests/gpu/run.sh): skipped, with the reason, without a GPU
t "gpu: tests/gpu/run.sh (GPU buffers, kernels, stream order)" 1800 sh "$S/tests/gpu/run.sh" "$B"
t "install: pkg-config build"       300 sh "$S/tests/test_install.sh" "$B"
t "install: verbs, rdmacm, hwloc, PMIx loaded at run time; a host without them runs shm/tcp" 300 \
    sh "$S/tests/test_optional_libs.sh" "$B"

t_end=$(date +%s)
echo "suite time: $((t_end - t_start)) s"
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
