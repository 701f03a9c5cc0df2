#!/bin/sh
# The RDMA suite, run inside the test guest by `make check-rdma` (through
# tests/rdma-vm/run): the collective matrix over soft-iWARP (siw) with ranks
# split across two namespace "hosts", over soft-RoCE (rxe) in both
# connection modes, under netem loss and delay, a killed peer, a
# registration failure, and rcoll-perf over both devices. Sizes are small:
# the guest is emulated. Usage: check-rdma.sh BUILDDIR [FILTER-REGEX]
B=${1:?usage: check-rdma.sh BUILDDIR [FILTER]}
FILTER=${2:-${RCOLL_TEST_FILTER:-.}}
L=/tmp/rdma-logs
S=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p $L
pass=0; fail=0
SECRET=00112233445566778899aabbccddeeff
export RCOLL_TIMEOUT=${RCOLL_TIMEOUT:-60}
N=0,1,7,1023,70000
t0=$(date +%s)
# what else runs in the guest and how loaded it is (a slow run's first clue)
echo "rdma suite: guest load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

# check NAME CMD...: runs one test (a function or a command), PASS/FAIL
# with its log; every process a test starts runs under $T (a time limit;
# the emulated guest's speed swings: the 4-rank matrix took 108-141 s
# here and over 200 s in one CI run, so the limit leaves room). Ranks that
# hosts() starts itself run under $TD: at the limit they get SIGUSR1
# first, on which rcoll dumps every operation in flight with its step and
# the peer it waits for (RCOLL_DUMP_SIGNAL), then SIGKILL 5 s later, so a
# test that runs out of time says where it stood. (Not under rcoll-run,
# which keeps each rank in its own process group and forwards only
# SIGTERM: USR1 would end rcoll-run and orphan its ranks.)
T="timeout -k 5 300"
TD="timeout -s USR1 -k 5 300"
check() {
    name=$1; shift
    echo "$name" | grep -Eq "$FILTER" || return 0
    s=$(date +%s)
    if ("$@") > "$L/cur.log" 2>&1; then
        pass=$((pass + 1)); echo "PASS: $name ($(( $(date +%s) - s )) s)"
        # (RCOLL_TEST_SHOW=1: what a passing test found, too)
        [ -z "${RCOLL_TEST_SHOW:-}" ] || grep -v "DEBUG\|INFO" "$L/cur.log" | tail -n "${RCOLL_TEST_SHOW_LINES:-8}" | sed 's/^/    /'
    else
        fail=$((fail + 1)); echo "FAIL: $name (status $?, $(( $(date +%s) - s )) s)"
        tail -n 25 "$L/cur.log" | sed 's/^/    /'
    fi
}

# hosts NRANKS PORT CMD...: ranks spread over namespaces h0 and h1
# (rank r on h$((r % 2))), the root on h0; fails if any rank fails
hosts() {
    n=$1; port=$2; shift 2
    pids=""
    r=0
    while [ $r -lt $n ]; do
        h=$((r % 2))
        ip netns exec h$h $TD env RCOLL_ROOT=10.77.0.1:$port RCOLL_SIZE=$n RCOLL_RANK=$r \
            RCOLL_SECRET=$SECRET "$@" > "$L/rank$r.log" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    rc=0; r=0
    for p in $pids; do
        wait $p; st=$?
        [ $st = 0 ] || { rc=1; echo "rank $r exited with status $st" >> "$L/status.log"; }
        r=$((r + 1))
    done
    cat "$L/rank0.log"
    [ $rc = 0 ] || { cat "$L/status.log"; rm -f "$L/status.log"; }
    [ $rc = 0 ] || { for f in "$L"/rank*.log; do echo "== $f"; tail -n 12 "$f"; done; }
    return $rc
}

# Which device carried the traffic, from the kernel rather than from
# rcoll's own log (whose RCOLL_DEBUG=info line only names the mode):
# rxe has device counters; siw has none, but carries RDMA over TCP
# connections that the kernel itself opens and no process holds. So siw
# traffic shows up as bytes on host h0's connections to h1 that `ss -p`
# finds no owner for, sampled every second while the test runs (tcp_diag
# gives the byte counts). Those must carry >= 1 MB and 10x what the
# processes' own sockets to h1 carry (the bootstrap, and rcoll's TCP
# transport had it been chosen).
sample_h0() { # sample_h0 OUT: until killed
    while :; do
        ip netns exec h0 ss -Htinp dst 10.77.0.2 2> /dev/null | awk '
            /^[A-Z]/ { key = $4 " " $5; own = ($0 ~ /users:\(/) ? "proc" : "kernel" }
            /bytes_acked:|bytes_received:/ {
                a = 0; r = 0
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^bytes_acked:/) a = substr($i, 13)
                    if ($i ~ /^bytes_received:/) r = substr($i, 16)
                }
                print key, own, a + r }' >> "$1"
        sleep 1
    done
}
# kernel_bytes CMD...: runs CMD under the sampler; the verdict above
kernel_bytes() {
    : > "$L/ss.txt"
    sample_h0 "$L/ss.txt" & sp=$!
    "$@"; rc=$?
    kill $sp 2> /dev/null; wait $sp 2> /dev/null
    [ $rc = 0 ] || return 1
    awk '{ k = $1 " " $2; if ($4 > m[k]) m[k] = $4; o[k] = $3 }
         END { for (k in m) t[o[k]] += m[k]
               printf "h0 <-> h1 TCP bytes: %d on connections no process holds (siw), %d on the processes own sockets\n", t["kernel"], t["proc"]
               exit !(t["kernel"] >= 1000000 && t["kernel"] >= 10 * t["proc"]) }' "$L/ss.txt" ||
        { echo "the traffic did not go over siw's kernel connections"; return 1; }
}
# rxe_pkts CMD...: rxe0's sent and received packet counters must grow by
# >= 1000 while CMD runs
rxe_pkts() {
    c=/sys/class/infiniband/rxe0/ports/1/hw_counters
    s0=$(cat $c/sent_pkts); r0=$(cat $c/rcvd_pkts)
    "$@" || return 1
    ds=$(( $(cat $c/sent_pkts) - s0 )); dr=$(( $(cat $c/rcvd_pkts) - r0 ))
    echo "rxe0 counters: $ds packets sent, $dr received"
    [ $ds -ge 1000 ] && [ $dr -ge 1000 ] || { echo "the traffic did not go over rxe0"; return 1; }
}
# uses PATTERN CMD...: CMD passes and RCOLL_DEBUG=info's line names the
# mode (WRITE + SEND, WRITE_WITH_IMM, rdma_cm or out of band)
uses() {
    pat=$1; shift
    "$@" || return 1
    grep -q "$pat" "$L"/rank0.log || { echo "expected '$pat' in the log"; return 1; }
}

info="RCOLL_DEBUG=info RCOLL_DEBUG_SUBSYS=net"
check "siw: 2 ranks on 2 hosts, matrix" \
    uses "ib: rank 0 on siw0.*WRITE + SEND" kernel_bytes hosts 2 29701 env $info $B/tests/test_coll -T -N $N
# (-T everywhere here: one datatype per element size, ops sum/max/avg -
# the datatypes and ops are the same code over every transport and make
# check's shm matrices run them all; about 3x less time. 4 ranks: counts
# 0, 1, 1023, 70000, without 7, whose uneven blocks 1023 covers; the
# 2-QP/3-slot and 4-rank rxe runs, which test striping and credits, at 7
# and 70000 only)
N4=0,1,1023,70000
N4S=7,70000
check "siw: 4 ranks on 2 hosts (shm inside, ib across), matrix" \
    uses "ib: rank 0 on siw0" kernel_bytes hosts 4 29702 env $info $B/tests/test_coll -T -N $N4
check "siw: 4 ranks on 2 hosts, every pair over ib, 2 QPs per peer, 3 slots" \
    hosts 4 29703 env RCOLL_TRANSPORTS=ib RCOLL_IB_QPS_PER_PEER=2 RCOLL_NSLOTS=3 \
    RCOLL_CHUNK_SIZE=16K $B/tests/test_coll -T -N $N4S
placed() { # placed CMD...: CMD passes and some sender wrote in place
    "$@" || return 1
    grep -h "written in place" "$L"/rank0.log | head -n 2
    grep -q "[1-9][0-9]* written in place" "$L"/rank0.log || { echo "no data written in place"; return 1; }
}
# (receives in place from 64 KiB: RDMA into the receiver's buffer)
check "siw: point to point (ring, halo, all-pairs, tags, groups, overlap), 4 ranks on 2 hosts over ib, receives in place" \
    placed hosts 4 29716 env RCOLL_TRANSPORTS=ib RCOLL_IB_PLACE_MIN=64K $info $B/tests/test_p2p -e 1048576
# the same patterns at 2 and 8 ranks (1 and 4 per host) up to 64 KiB:
# the 4-rank run above carries the large sizes
p2p_2_8() {
    hosts 2 29717 env RCOLL_TRANSPORTS=ib $B/tests/test_p2p -e 65536 &&
        hosts 8 29718 env RCOLL_TRANSPORTS=ib $B/tests/test_p2p -e 65536 &&
        hosts 8 29719 env RCOLL_TRANSPORTS=ib RCOLL_IB_CONNECT=lazy $B/tests/test_p2p -e 65536
}
check "siw: point to point, 2 and 8 ranks on 2 hosts over ib, up to 64 KiB (8 also with connections on first use)" p2p_2_8
check "siw: every allreduce/allgather/broadcast algorithm, 3 ranks" \
    $T sh -c "for a in allreduce:ring allreduce:recursive_doubling allreduce:rabenseifner allreduce:flat allreduce:double_tree \
        allgather:ring allgather:bruck allgather:recursive_doubling broadcast:tree broadcast:chain \
        broadcast:scatter_allgather; do c=\${a%%:*}; echo \$a; \
        RCOLL_ALGO=\$a RCOLL_CHUNK_SIZE=8K RCOLL_TRANSPORTS=ib ip netns exec h0 $B/tools/rcoll-run -n 3 \
        $B/tests/test_coll -T -C \$c -N 0,1,5000 -q || exit 1; done"

rxe() { # rxe MODE NRANKS: all ranks on rxe0 (6.1's rxe receives only in the initial namespace)
    $T env RCOLL_TRANSPORTS=ib RCOLL_IB_HCA=rxe RCOLL_IB_CONNECT=$1 $info \
        $B/tools/rcoll-run -n $2 $B/tests/test_coll -T -N $N > "$L/rank0.log" 2>&1
    rc=$?; cat "$L/rank0.log"; return $rc
}
check "rxe: 2 ranks, rdma_cm, WRITE_WITH_IMM" uses "ib: rank 0 on rxe0.*WRITE_WITH_IMM, .*rdma_cm" rxe_pkts rxe cm 2
# (no 4-rank rdma_cm matrix on rxe: siw runs rdma_cm at 4 ranks, rxe runs
# 4 ranks out of band; cut for CI time when the point-to-point suite came,
# 75 s)
check "rxe: 2 ranks, out-of-band QP exchange" uses "ib: rank 0 on rxe0.*oob connect" rxe_pkts rxe oob 2
# (the collectives that stripe large messages over both QPs and exchange
# with every peer; siw's 2-QP run above has the whole matrix: 50 s less)
check "rxe: 4 ranks, out-of-band QP exchange, 2 QPs per peer" \
    env RCOLL_IB_QPS_PER_PEER=2 RCOLL_DEBUG=info $T env RCOLL_TRANSPORTS=ib RCOLL_IB_HCA=rxe RCOLL_IB_CONNECT=oob \
    $B/tools/rcoll-run -n 4 $B/tests/test_coll -T -C allreduce,allgather,broadcast,alltoall -N $N4S

zcopy() { # zcopy HOSTS-ARGS: registered buffers, sent zero-copy, bit-exact
    "$@" || return 1
    grep -h "zero-copy" "$L"/rank*.log | head -n 2
    grep -q "[1-9][0-9]* zero-copy" "$L"/rank0.log || { echo "no zero-copy send"; return 1; }
}
check "siw: registered buffers sent zero-copy, 2 hosts x 2 ranks, every pair over ib" \
    zcopy hosts 4 29706 env RCOLL_TRANSPORTS=ib RCOLL_CHUNK_SIZE=64K $info $B/tests/test_register
rxezc() {
    $T env RCOLL_TRANSPORTS=ib RCOLL_IB_HCA=rxe RCOLL_CHUNK_SIZE=64K $info \
        $B/tools/rcoll-run -n 3 $B/tests/test_register > "$L/rank0.log" 2>&1
}
check "rxe: registered buffers sent zero-copy, 3 ranks" zcopy rxezc
rxeplace() {
    $T env RCOLL_TRANSPORTS=ib RCOLL_IB_HCA=rxe RCOLL_CHUNK_SIZE=64K RCOLL_IB_PLACE_MIN=64K $info \
        $B/tools/rcoll-run -n 3 $B/tests/test_coll -q -C alltoall,alltoallv,gather,scatter,sendrecv \
        -N 0,7,70000 > "$L/rank0.log" 2>&1
    rc=$?; cat "$L/rank0.log"; return $rc
}
check "rxe: receives in place (RDMA into the receiver's buffer), all-to-all(v), gather, scatter, 3 ranks" \
    placed rxeplace

netem() { # netem add|del: 2% loss and 2 ms +- 1 ms delay on both hosts' links
    for h in 0 1; do
        if [ $1 = add ]; then ip netns exec h$h tc qdisc add dev v$h root netem loss 2% delay 2ms 1ms
        else ip netns exec h$h tc qdisc del dev v$h root; fi
    done
}
lossy() {
    netem add || return 1
    # (loss and delay are the transport's business: four collectives
    # carry enough traffic; the full matrix under 2 ms delay took 175 s)
    hosts 2 29704 env RCOLL_CHUNK_SIZE=64K $B/tests/test_coll -T \
        -C allreduce,allgather,broadcast,alltoall -N 0,7,100000
    rc=$?
    netem del
    return $rc
}
check "siw: 2 hosts under netem 2% loss, 2 ms delay: bit-exact" lossy

# a peer dies: every survivor fails naming it (test_fail loop: exit 3)
killtest_once() {
    n=4; pids=""
    for r in 0 1 2 3; do
        # no $T here: kill must hit the rank itself (test_fail loop gives
        # up after 120 s on its own)
        ip netns exec h$((r % 2)) env RCOLL_ROOT=10.77.0.1:$1 RCOLL_SIZE=$n RCOLL_RANK=$r \
            RCOLL_SECRET=$SECRET RCOLL_TRANSPORTS=ib RCOLL_VICTIM=3 $B/tests/test_fail loop \
            > "$L/kill$r.log" 2>&1 &
        eval "pid$r=\$!"
    done
    sleep 10
    early=0
    kill -9 $pid3 2> /dev/null || early=1
    bad=0
    for r in 0 1 2; do
        eval "p=\$pid$r"
        wait $p; code=$?
        echo "rank $r exit $code: $(tail -n 1 "$L/kill$r.log")"
        [ $code -eq 3 ] || bad=1
    done
    if [ $early = 1 ]; then
        wait $pid3; code=$?
        echo "rank 3 (the victim) had exited before the kill, status $code: $(tail -n 3 "$L/kill3.log")"
        return 2
    fi
    return $bad
}
# The victim has been seen to exit on its own during the bootstrap in the
# emulated guest (once in many CI runs; not understood yet, see
# docs/reliability.md): that attempt's logs are printed and the test runs
# once more; any other failure fails at once.
killtest() {
    killtest_once 29705; rc=$?
    [ $rc -eq 2 ] || return $rc
    echo "(the victim died before the kill: the attempt above is kept; once more)"
    killtest_once 29715
}
check "siw: a rank killed on host h1: the 3 others fail naming it" killtest
# a pass after a retry still shows the first attempt
if grep -q 'died before the kill' "$L/cur.log" 2> /dev/null; then
    sed 's/^/    /' "$L/cur.log"
fi
# A port goes down (the veth under host h1's siw device): the rank there
# fails at once, naming the device, the port and the cause, not at
# RCOLL_TIMEOUT (60 s here). (Its peer on h0 can only time out: nothing
# reaches it; it is stopped here.) Mid-run (test_fail loop) the flushed
# completions say it; idle (test_fail idle: no operation in flight, h1's
# rank polls rcoll_comm_get_async_error), the device's asynchronous event
# does, through the progress thread's idle look.
# port_down PORT SCENARIO PATTERN: ranks 0 (h0) and 1 (h1); v1 goes down
# once rank 1 has printed "^idle" or after 8 s; rank 1's last line must
# match PATTERN within 15 s
port_down() {
    for r in 0 1; do
        ip netns exec h$r env RCOLL_ROOT=10.77.0.1:$1 RCOLL_SIZE=2 RCOLL_RANK=$r \
            RCOLL_SECRET=$SECRET RCOLL_TRANSPORTS=ib RCOLL_TIMEOUT=60 $B/tests/test_fail $2 \
            > "$L/pd$r.log" 2>&1 &
        eval "pd$r=\$!"
    done
    i=0; while ! grep -q "^idle" "$L/pd1.log" 2> /dev/null && [ $i -lt 8 ]; do sleep 1; i=$((i + 1)); done
    sleep 2
    s=$(date +%s)
    ip -n h1 link set v1 down
    wait $pd1
    took=$(( $(date +%s) - s ))
    ip -n h1 link set v1 up
    kill -9 $pd0 2> /dev/null; wait $pd0 2> /dev/null
    echo "rank 1 (h1) after ${took} s: $(tail -n 1 "$L/pd1.log")"
    grep -q "$3" "$L/pd1.log" && [ $took -le 15 ]
}
check "siw: a port goes down: its rank fails at once naming device, port, event" \
    port_down 29740 loop "device siw1 port [0-9]* went down"
check "siw: a port goes down while idle: the asynchronous event fails its rank at once" \
    port_down 29742 idle "device siw1 port [0-9]* went down (asynchronous event"
# the registration cache: sends from and receives into buffers that each
# round unmaps and maps again at the same address with other contents
# (zero-copy sends and receives in place through cached registrations):
# every round exact, and the cache saw the buffers go (its info line);
# rcoll_comm_dump shows its hits and the lanes' counters
rcache_ib() {
    hosts 2 29743 env RCOLL_TRANSPORTS=ib RCOLL_DEBUG=info RCOLL_DEBUG_SUBSYS=net \
        $B/tests/test_rcache comm || return 1
    grep -h "registration cache" "$L"/rank*.log
    grep -q "registration cache (.*): .* [1-9][0-9]* invalidated" "$L"/rank*.log || return 1
    # the dump's counters (rcoll-info -p): hits from the buffer used 4
    # times, on both ranks, and the lanes' sent and received bytes
    [ "$(grep -l "rcoll:     registration cache: [1-9][0-9]* hits" "$L"/rank[01].log | wc -l)" = 2 ] || return 1
    grep -q "rcoll:     lane 0 (QP k of every peer): sent [1-9]" "$L"/rank0.log
}
check "siw: registration cache: buffers unmapped and mapped again at the same address, 2 hosts" rcache_ib
# a device whose completion queues hold less than every queue pair could
# post (RCOLL_FAULT=ib_cq_small: room for the receives and 8 more): posting
# waits for room, never overruns it; every result bit-exact
check "siw: completion queue smaller than what may be posted, 4 ranks on 2 hosts, 2 QPs per peer" \
    hosts 4 29741 env RCOLL_TRANSPORTS=ib RCOLL_FAULT=ib_cq_small RCOLL_IB_QPS_PER_PEER=2 \
    RCOLL_CHUNK_SIZE=16K $B/tests/test_coll -T -q -C allreduce,allgather,alltoall,sendrecv -N 0,7,100000
# tests/faults/run.sh on the guest's two hosts: netem exists in this
# kernel (not on the CI host's), so the 2,000-collective netem run is here
FH="h0:10.77.0.1:v0 h1:10.77.0.2:v1"
# (600: 150 per class, 150 under 20 ms delay; a sample sized for CI
# time, about 40 s under TCG)
check "faults: 600 collectives under netem loss/delay/reorder/dup, tcp" \
    env FAULT_HOSTS="$FH" NETEM_MAXB=65536 NETEM_ITERS=150 NETEM_SLOW_ITERS=150 \
    timeout -k 5 600 bash $S/tests/faults/run.sh $B netem tcp
# (20 s, not 10: the guest is emulated, about 50 times slower; 6 kills,
# not 10, for CI time: the main suite kills 15 times each over shm and tcp)
check "faults: SIGKILL x6 at random moments, ib (siw)" \
    env FAULT_HOSTS="$FH" FAULT_DETECT_S=20 timeout -k 5 400 bash $S/tests/faults/run.sh $B kill ib 6
check "faults: SIGSTOP, every survivor names the stopped rank as the root cause, ib (siw)" \
    env FAULT_HOSTS="$FH" FAULT_STOP_AFTER=10 timeout -k 5 200 bash $S/tests/faults/run.sh $B stop ib
check "siw: fork-based failure tests over ib (kill, abort, timeout root cause, SIGPIPE ignored)" \
    $T sh -c "RCOLL_TRANSPORTS=ib ip netns exec h0 $B/tests/test_fail kill && \
           RCOLL_TRANSPORTS=ib ip netns exec h0 $B/tests/test_fail abort && \
           RCOLL_TRANSPORTS=ib ip netns exec h0 $B/tests/test_fail timeout && \
           RCOLL_TRANSPORTS=ib TEST_IWARP=1 ip netns exec h0 $B/tests/test_fail sigpipe"
# a rank killed mid-all-reduce, 8 times: each survivor names it. A rank
# that fails tells its peers why at once (fail_notify) and, closing, waits
# until each has its abort (CTRL_SEEN): its close resets the connection
# (unread data), which lost the abort about 1 run in 6 before, and that
# peer then named the closed rank instead of the killed one.
kill_repeat() {
    i=0
    while [ $i -lt 8 ]; do
        RCOLL_TRANSPORTS=ib ip netns exec h0 $T $B/tests/test_fail kill \
            > "$L/kill.log" 2>&1 || { cat "$L/kill.log"; return 1; }
        i=$((i + 1))
    done
}
check "siw: a rank killed mid-all-reduce, 8 runs: every survivor names it" kill_repeat
# a failed send's registered (zero-copy) buffer, rewritten after its wait:
# the receiver never completes with the new bytes
check "siw: a failed zero-copy send's buffer is the caller's after its wait (test_fail inflight)" \
    $T sh -c "RCOLL_TRANSPORTS=ib TEST_REGISTER=1 ip netns exec h0 $B/tests/test_fail inflight"

# iWARP lets only the initiator send first. A rank that accepted a
# connection and wrote at once could reach the initiator before its kernel
# had read the MPA reply, and siw failed the connection (CONNECT_ERROR,
# -EINVAL; seen once in CI in test_fail). Forced here: 25% loss on host
# h1's link, so an MPA reply from rank 1 (on h1, the acceptor) is often
# lost and arrives, retransmitted, together with whatever rank 1 sent
# after it. 2-rank all-reduce jobs (each rank sends first thing): all pass.
connect_race() {
    ip netns exec h1 tc qdisc add dev v1 root netem loss 25% || return 1
    bad=0; i=0
    while [ $i -lt 6 ]; do
        hosts 2 $((29810 + i)) $B/benchmarks/rcoll-perf allreduce -b 4K -e 4K \
            -n 1 -w 0 -c 1 > "$L/race.log" 2>&1 || {
            bad=$((bad + 1)); grep -h "rank [01]:\|exited with status" "$L/race.log" | tail -n 6; }
        i=$((i + 1))
    done
    ip netns exec h1 tc qdisc del dev v1 root
    echo "$bad of $i jobs failed"
    [ $bad = 0 ]
}
check "siw: the acceptor sends only after the initiator (MPA reply lost, 2 hosts)" connect_race

# siw (no iWARP port mapper) binds kernel TCP sockets to the ports rdma_cm
# picks in its own port space; a TCP socket of the host may hold one (seen
# once in CI: rdma_connect failed with EADDRINUSE). With host h0's port
# range narrowed to 32 ports and 8 of them held by bound sockets, rdma_listen and rdma_connect collide often: rcoll must take
# another port (logged at info level) and every job must pass.
port_collide() {
    rm -f "$L/held"
    # bound, not listening, no SO_REUSEADDR: nothing else may bind there
    ip netns exec h0 python3 -c '
import socket, sys, time
held = []
for p in range(40000, 40032, 4):
    s = socket.socket()
    try:
        s.bind(("10.77.0.1", p)); held.append(s)
    except OSError:
        pass
print(len(held), "ports held", flush=True)
open(sys.argv[1], "w").close()
time.sleep(300)' "$L/held" &
    holder=$!
    i=0; while [ ! -e "$L/held" ] && [ $i -lt 120 ]; do sleep 0.5; i=$((i + 1)); done
    old=$(ip netns exec h0 sysctl -n net.ipv4.ip_local_port_range)
    ip netns exec h0 sysctl -qw net.ipv4.ip_local_port_range="40000 40031"
    rc=0; i=0; : > "$L/collide.log"
    while [ $i -lt 3 ]; do
        RCOLL_DEBUG=info RCOLL_DEBUG_SUBSYS=net RCOLL_TRANSPORTS=ib \
            ip netns exec h0 $T $B/tools/rcoll-run -n 4 \
            $B/benchmarks/rcoll-perf allreduce -b 4K -e 64K -f 4 -n 1 -w 0 -c 1 \
            >> "$L/collide.log" 2>&1 || { rc=1; tail -n 6 "$L/collide.log"; }
        i=$((i + 1))
    done
    ip netns exec h0 sysctl -qw net.ipv4.ip_local_port_range="$old"
    kill $holder; wait $holder 2> /dev/null
    n=$(grep -c "again with another port" "$L/collide.log")
    echo "$n connection attempts redone on another port in $i jobs"
    [ "$n" -gt 0 ] || { echo "no collision happened: the test did not test"; rc=1; }
    return $rc
}
check "siw: rdma_cm ports that collide with host TCP sockets are retried" port_collide

# registration beyond the locked-memory limit: a clear error, no crash
regfail() {
    # the unprivileged user must reach the build (a clone in a mktemp -d
    # directory is 0700): open the path up, in the guest's overlay only
    d=$B
    while [ "$d" != / ]; do chmod a+x "$d"; d=$(dirname "$d"); done
    out=$(ip netns exec h0 $T setpriv --reuid=65534 --regid=65534 --clear-groups \
        sh -c "ulimit -l 64; RCOLL_TRANSPORTS=ib RCOLL_TIMEOUT=20 $B/tools/rcoll-run -n 2 $B/tests/test_coll -N 7" 2>&1)
    rc=$?
    echo "$out" | tail -n 6
    [ $rc != 0 ] && echo "$out" | grep -q "ulimit -l" && echo "$out" | grep -q "locked-memory limit is 64 KiB"
}
check "siw: registration over the locked-memory limit names ulimit -l" regfail

perfcheck() { # perfcheck DEVICE-ARGS: rcoll-perf all-reduce with #wrong 0
    $T env RCOLL_TRANSPORTS=ib "$@" $B/tools/rcoll-run -n 2 $B/benchmarks/rcoll-perf allreduce -b 8 -e 1M -f 16 -n 2 -w 1 -c 1 > "$L/perf.log" 2>&1
    rc=$?; cat "$L/perf.log"
    [ $rc = 0 ] && grep -q "Out of bounds values : 0 OK" "$L/perf.log"
}
check "siw: rcoll-perf allreduce, #wrong 0" perfcheck ip netns exec h0 env
check "rxe: rcoll-perf allreduce, #wrong 0" perfcheck RCOLL_IB_HCA=rxe

# Connections on first use (RCOLL_IB_CONNECT=lazy), every pair over ib,
# 4 ranks on 2 hosts: ring all-reduces (and the test's own all-gather
# check, also a ring) connect each rank to its two ring neighbours only
# (rank 0: 2 and 3, not 1); all-to-all, the other
# collectives and point-to-point (where both ranks of a pair connect at
# once: the lower one's attempt wins) connect everyone; all bit-exact; a
# rank killed mid-all-reduce is named by every survivor; a send to a
# lower rank that destroyed its communicator fails at once (test_fail
# gone: its refusal is not a tie).
conns() { # conns N: every rank's log says it connected to N of its 3 peers
    for r in 0 1 2 3; do
        grep -q "ib: rank $r connected to $1 of its 3 ib peers" "$L/rank$r.log" ||
            { echo "rank $r: expected $1 of 3 peers connected:"; grep -h "connected to" "$L/rank$r.log"; return 1; }
    done
    echo "each rank connected to $1 of its 3 peers"
}
lazy_ib() {
    hosts 4 29733 env RCOLL_TRANSPORTS=ib RCOLL_IB_CONNECT=lazy RCOLL_ALGO=allreduce:ring,allgather:ring $info \
        $B/tests/test_coll -T -C allreduce -N 0,7,70000 && conns 2 &&
    hosts 4 29734 env RCOLL_TRANSPORTS=ib RCOLL_IB_CONNECT=lazy $info $B/tests/test_coll -T -N 7,70000 \
        -C allreduce,allgather,broadcast,alltoall && conns 3 &&
    hosts 4 29735 env RCOLL_TRANSPORTS=ib RCOLL_IB_CONNECT=lazy RCOLL_IB_QPS_PER_PEER=2 $info \
        $B/tests/test_p2p -e 65536 && conns 3 &&
    # a rank killed mid-all-reduce: every survivor names it
    RCOLL_TRANSPORTS=ib RCOLL_IB_CONNECT=lazy ip netns exec h0 $T $B/tests/test_fail kill &&
    # a lower rank that left refuses at once (no tie): named within 5 s
    RCOLL_TRANSPORTS=ib RCOLL_IB_CONNECT=lazy ip netns exec h0 $T $B/tests/test_fail gone
}
check "siw: connections on first use, 4 ranks on 2 hosts over ib (ring: neighbours only; all-to-all, p2p: everyone)" lazy_ib

# Two RDMA devices per host (a second bridge, subnet 10.77.1.0/24, siw
# devices siwb0 in h0 and siwb1 in h1, made here and removed after). By
# default (RCOLL_IB_NIC=auto) devices in two subnets are not shared out:
# every rank stays on the bootstrap's. RCOLL_IB_NIC=spread gives each
# host's first rank the first device by name and its second rank the
# second, so both links carry the ranks' traffic (pairs across devices
# cross subnets; each host reaches both). The veth counters say so, from
# the kernel: each carries >= 20% of the bytes.
nic2_add() {
    ip link add br1 type bridge && ip link set br1 up || return 1
    for i in 0 1; do
        ip link add w$i type veth peer name p1$i && ip link set p1$i master br1 up &&
            ip link set w$i netns h$i && ip -n h$i addr add 10.77.1.$((i + 1))/24 dev w$i &&
            ip -n h$i link set w$i up &&
            ip netns exec h$i rdma link add siwb$i type siw netdev w$i || return 1
    done
}
bytes() { # bytes H DEV: rx + tx bytes of DEV in h$H
    ip -n h$1 -s -j link show dev $2 | python3 -c 'import json, sys
s = json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"] + s["tx"]["bytes"])'
}
nic2_del() {
    for i in 0 1; do
        ip netns exec h$i rdma link delete siwb$i
        ip -n h$i link del w$i
    done
    ip link del br1
}
two_nics() {
    nic2_add || return 1
    hosts 4 29730 env $info $B/tests/test_coll -T -N 7 -C allreduce &&
        grep -q "ib: rank 3: 2 devices: siw1 (devices in several subnets" "$L/rank3.log"
    rc=$?
    [ $rc = 0 ] || echo "auto: expected rank 3 to stay on siw1 (two subnets)"
    v0=$(bytes 0 v0); w0=$(bytes 0 w0)
    [ $rc = 0 ] && hosts 4 29731 env RCOLL_IB_NIC=spread $info \
        $B/tests/test_coll -T -N 7,70000 -C allreduce,allgather,reduce_scatter,alltoall
    rc=$?
    dv=$(( $(bytes 0 v0) - v0 )); dw=$(( $(bytes 0 w0) - w0 ))
    devs=$(grep -h "devices:" "$L"/rank*.log)
    # channels: the ring [0 2 | 1 3] crosses from rank 2 to rank 1 and from
    # 3 to 0, both to siw devices, whose subnet routes over v0 and v1 (siw
    # is iWARP over the kernel's TCP); with two channels (the tuner's
    # choice: two devices per host) the second ring runs backwards, from 1
    # to 2 and 0 to 3, to the siwb devices over w0 and w1. Each direction
    # of h0's links is counted around an all-reduce of 4 MiB, checked:
    # one channel keeps w0 under 1/8 of the bytes, two carry at least 1/8
    # on every direction of both links.
    chan_split=""
    [ $rc = 0 ] && for nch in 1 0; do
        ip -n h0 -s -j link show > "$L/before.json"
        hosts 4 $((29732 + nch)) env RCOLL_IB_NIC=spread RCOLL_NCHANNELS=$nch \
            RCOLL_ALGO=allreduce:ring $B/benchmarks/rcoll-perf allreduce -b 4M -e 4M \
            -d float -n 2 -w 1 -c 1 -P 0 > "$L/perf.log" || { chan_split="rcoll-perf failed"; break; }
        ip -n h0 -s -j link show > "$L/after.json"
        split=$(python3 -c 'import json, sys
b = {l["ifname"]: l["stats64"] for l in json.load(open(sys.argv[1]))}
a = {l["ifname"]: l["stats64"] for l in json.load(open(sys.argv[2]))}
d = [a[i][k]["bytes"] - b[i][k]["bytes"] for i in ("v0", "w0") for k in ("tx", "rx")]
print(" ".join(str(x) for x in d), sum(d))' "$L/before.json" "$L/after.json")
        echo "RCOLL_NCHANNELS=$nch: h0 bytes v0 tx rx, w0 tx rx, total: $split"
        echo "$nch $split" | awk '$6 < 4000000 { exit 1 }
            $1 == "1" && ($4 + $5) * 8 >= $6 { exit 1 }
            $1 == "0" { for (i = 2; i <= 5; i++) if ($i * 8 < $6) exit 1 }' ||
            { chan_split="RCOLL_NCHANNELS=$nch: the split over the links' directions is not the expected one"; break; }
    done
    # RCOLL_IB_NIC=all: every rank opens both devices, and queue pair k of
    # a pair runs over the k-th device pair on one subnet (siw to siw over
    # the v links, siwb to siwb over the w links); eager and lazy set-up,
    # bit-exact, and both of h0's links carry >= 20% of the bytes; receives
    # in place through a key per device (eager), zero-copy sends through
    # each queue pair's device (lazy, failover off)
    all_split=""
    if [ $rc = 0 ]; then
        v0=$(bytes 0 v0); w0=$(bytes 0 w0)
        hosts 4 29750 env RCOLL_IB_NIC=all RCOLL_IB_QPS_PER_PEER=2 $info \
            $B/tests/test_coll -T -N 7,70000 \
            -C allreduce,allgather,reduce_scatter,alltoall,broadcast &&
            grep -q "ib: rank 0 also on siwb0 port 1 .*, [1-9][0-9]* of its queue pairs" "$L/rank0.log" ||
            all_split="RCOLL_IB_NIC=all: failed, or rank 0 not also on siwb0"
        # (large point-to-point messages: their receives are posted in
        # place before the sender's go-ahead, so some data lands there)
        [ -z "$all_split" ] && { hosts 4 29752 env RCOLL_IB_NIC=all RCOLL_IB_QPS_PER_PEER=2 \
            RCOLL_IB_PLACE_MIN=64K $info $B/tests/test_p2p -e 1048576 ||
            all_split="RCOLL_IB_NIC=all, point to point: failed"; }
        grep -h "written in place" "$L"/rank[0-3].log | head -n 1
        [ -z "$all_split" ] && ! grep -q "[1-9][0-9]* written in place" "$L"/rank[0-3].log &&
            all_split="RCOLL_IB_NIC=all, point to point: nothing written in place"
        ava=$(( $(bytes 0 v0) - v0 )); awa=$(( $(bytes 0 w0) - w0 ))
        echo "RCOLL_IB_NIC=all: h0's links: v0 $ava bytes, w0 $awa bytes"
        [ -z "$all_split" ] && { [ $((ava + awa)) -ge 1000000 ] &&
            [ $((ava * 5)) -ge $((ava + awa)) ] && [ $((awa * 5)) -ge $((ava + awa)) ] ||
            all_split="RCOLL_IB_NIC=all: not both links carried the traffic"; }
        [ -z "$all_split" ] && { hosts 4 29751 env RCOLL_IB_NIC=all RCOLL_IB_QPS_PER_PEER=2 \
            RCOLL_IB_CONNECT=lazy RCOLL_RAIL_FAILOVER=0 $info $B/tests/test_coll -T -N 70000 \
            -C allreduce,alltoall ||
            all_split="RCOLL_IB_NIC=all, connections on first use: failed"; }
        grep -h "zero-copy from" "$L"/rank0.log | head -n 1
        [ -z "$all_split" ] && ! grep -q "[1-9][0-9]* zero-copy from registered memory" "$L"/rank0.log &&
            all_split="RCOLL_IB_NIC=all, connections on first use: no zero-copy send"
    fi
    nic2_del
    [ $rc = 0 ] || return 1
    [ -z "$all_split" ] || { echo "$all_split"; return 1; }
    echo "$devs"
    for want in "rank 0:.*siw0 port 1 (block)" "rank 1:.*siw1 port 1 (block)" \
        "rank 2:.*siwb0 port 1 (block)" "rank 3:.*siwb1 port 1 (block)"; do
        echo "$devs" | grep -q "ib: $want" || { echo "expected 'ib: $want' in a rank's log"; return 1; }
    done
    echo "h0's links: v0 $dv bytes, w0 $dw bytes"
    [ $((dv + dw)) -ge 1000000 ] && [ $((dv * 5)) -ge $((dv + dw)) ] &&
        [ $((dw * 5)) -ge $((dv + dw)) ] || { echo "not both links carried the traffic"; return 1; }
    [ -z "$chan_split" ] || { echo "channels: $chan_split"; return 1; }
}
check "siw: two devices per host, a host's ranks spread over both (RCOLL_IB_NIC=spread; auto keeps two subnets apart), two channels send and receive on both; every rank on both (RCOLL_IB_NIC=all)" two_nics

# Surviving a device (RCOLL_IB_NIC=all, two queue pairs per peer, one
# over each device pair): 4 ranks on 2 hosts run test_failover (all-reduce,
# all-gather and all-to-all, 256 KiB each, every result checked; the
# all-to-all's 64 KiB blocks received in place); after its first block of 50 a link
# goes down for good: h1's second link (w1: h1's ranks get siwb1's port
# event, h0's learn it from their notices), h1's bootstrap link (v1, siw1),
# and the bridge's end of h1's second link (p11: no event at either end,
# each side finds the queue pairs over it stalled for RCOLL_RAIL_TIMEOUT
# while the others progress); then the bridge's end again, under rank 0's
# last messages to rank 1, sent as rank 0 destroys the communicator while
# rank 1 sleeps (test_failover -q): the destroy finds the stall and sends
# them again. Every rank ends bit-exact with no asynchronous error; the
# warnings name the link and the peer.
fo_ended() { # fo_ended NAME RC: a test_failover run ended bit-exact on every rank
    echo "$1: $(( $(date +%s) - fo_t0 )) s; rank 0 $(grep -h "iterations" "$L/rank0.log" | tail -n 3 | tr '\n' ' ')"
    [ $2 = 0 ] || { echo "$1: a rank failed"; for f in "$L"/rank*.log; do
        echo "== $f"; grep -v "^rcoll: \|INFO\|DEBUG" "$f" | cut -c1-300 | tail -n 6; done; return 1; }
    for r in 0 1 2 3; do
        grep -q "bit-exact, asynchronous error OK" "$L/rank$r.log" ||
            { echo "$1: rank $r did not end bit-exact without error"; return 1; }
    done
    # (receives in place, RCOLL_IB_PLACE_MIN=64K: some data was written there)
    grep -ho "[0-9]* sends, .* written in place" "$L"/rank[0-3].log | tr '\n' ';'; echo
    grep -q "[1-9][0-9]* written in place" "$L"/rank[0-3].log ||
        { echo "$1: nothing written in place"; return 1; }
}
# links_ready: h0 reaches h1 over the bootstrap and the second link again
# (a link just brought back up, and the neighbour entries its loss left
# failed), at most 10 s, so that the next job does not start on a link
# still settling
links_ready() {
    for a in 10.77.0.2 10.77.1.2; do
        i=0
        until ip netns exec h0 busybox ping -c 1 -W 1 $a > /dev/null 2>&1; do
            i=$((i + 1))
            [ $i -lt 20 ] || { echo "links_ready: $a not reached again"; break; }
            sleep 0.5
        done
        [ $i = 0 ] || echo "links_ready: $a reached after $i tries"
    done
}
# all_back: every h1 rank (1, 3) says its queue pair over the second link
# to each h0 rank (0, 2) is back, at most 30 s. The first "is back" is not
# enough before the bootstrap link goes: a failback from h0 may still wait
# on h0's neighbour entry for h1's second address, and a pair whose
# second queue pair is still lost then fails with the bootstrap link.
all_back() {
    for rp in "1 0" "1 2" "3 0" "3 2"; do
        set -- $rp
        i=0
        while ! grep -q "rank $1: link siwb1 .* to rank $2 .* is back" "$L/rank$1.log" 2> /dev/null &&
            [ $i -lt 300 ]; do
            sleep 0.1; i=$((i + 1))
        done
    done
}
ib_cut() { # ib_cut NAME PORT NETNS LINK WARN0 WARN1 [ARGS]: LINK of NETNS (- the root's) goes
    go="$L/ibfo_go_$1"; rm -f "$go"; fo_t0=$(date +%s)
    ns=""; [ "$3" = - ] || ns="-n $3"
    ( i=0; while [ ! -e "$go" ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
      ip $ns link set $4 down ) &
    cutter=$!
    hosts 4 $2 env RCOLL_IB_NIC=all RCOLL_IB_QPS_PER_PEER=2 RCOLL_RAIL_TIMEOUT=3 \
        RCOLL_IB_PLACE_MIN=64K RCOLL_TIMEOUT=60 $B/tests/test_failover -n 150 -c 65536 -a 1 \
        -s "$go" -d 1 $7 > /dev/null
    rc=$?
    wait $cutter
    ip $ns link set $4 up
    links_ready
    fo_ended "$1" $rc || return 1
    for w in "$5" "$6"; do
        grep -h "$w" "$L"/rank[0-3].log | sed 's/.*WARN [^ ]* //' | head -n 1
        grep -q "$w" "$L"/rank[0-3].log || { echo "$1: no warning '$w'"; return 1; }
    done
    grep -h "queue pairs lost" "$L"/rank[0-3].log | sort | uniq -c
}
# failback: h1's second link goes down after the first block and comes
# back 3 s later; once every cross-host pair's queue pair over it is back
# (all_back), h0's second link carries traffic again (>= 200 KB in 2 s);
# then h1's
# bootstrap link goes down for good and the run ends 4 s later over the
# second links alone: every rank bit-exact, no asynchronous error
ib_flap() {
    go="$L/ibfo_go_flap"; end="$L/ibfo_end_flap"; rm -f "$go" "$end" "$L/flap_w0"
    fo_t0=$(date +%s)
    ( i=0; while [ ! -e "$go" ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
      ip -n h1 link set w1 down; sleep 3; ip -n h1 link set w1 up
      all_back
      a=$(bytes 0 w0); sleep 2; echo $(( $(bytes 0 w0) - a )) > "$L/flap_w0"
      ip -n h1 link set v1 down; sleep 4; touch "$end" ) &
    cutter=$!
    hosts 4 29763 env RCOLL_IB_NIC=all RCOLL_IB_QPS_PER_PEER=2 RCOLL_RAIL_TIMEOUT=3 \
        RCOLL_RAIL_RETRY=0.5 RCOLL_IB_PLACE_MIN=64K RCOLL_TIMEOUT=60 $B/tests/test_failover -n 1000000 -c 65536 -a 1 \
        -s "$go" -e "$end" -d 1 > /dev/null
    rc=$?
    wait $cutter
    ip -n h1 link set v1 up
    links_ready
    fo_ended flap $rc || return 1
    grep -h "link siwb[01] .* is back" "$L"/rank[0-3].log | sed 's/.*WARN [^ ]* //' | head -n 1
    grep -q "link siwb[01] .* is back" "$L"/rank[0-3].log || { echo "flap: no queue pair came back"; return 1; }
    echo "flap: h0's second link carried $(cat "$L/flap_w0") bytes in the 2 s after it came back"
    [ "$(cat "$L/flap_w0")" -ge 200000 ] 2> /dev/null || { echo "flap: no traffic after failback"; return 1; }
    grep -q "link siw[01] port 1 .* failed" "$L"/rank[0-3].log || { echo "flap: the bootstrap link's loss not named"; return 1; }
    grep -h "queue pairs lost" "$L"/rank[0-3].log | sort | uniq -c
}
ib_failover() {
    nic2_add || return 1
    ib_cut second 29760 h1 w1 "ib: rank [13]: link siwb1 port 1 .* failed (this rank's device" \
        "ib: rank [02]: link siwb0 port 1 .* failed (rank [13] lost it)" && sleep 1 &&
    ib_cut bootstrap 29761 h1 v1 "ib: rank [13]: link siw1 port 1 .* failed (this rank's device" \
        "ib: rank [02]: link siw0 port 1 .* failed (rank [13] lost it)" && sleep 1 &&
    ib_cut between 29762 - p11 "ib: rank [0-3]: link siwb[01] port 1 .* failed (nothing heard for" \
        "ib: rank [0-3]: link siwb[01] port 1 .* failed" && sleep 1 &&
    ib_cut destroy 29765 - p11 "ib: rank 0: link siwb0 port 1 .* to rank 1 .* failed (nothing heard for" \
        "ib: rank 1: link siwb1 port 1 .* failed (rank 0 lost it)" "-q 8000" && sleep 1 && ib_flap
    rc=$?
    nic2_del
    return $rc
}
check "siw: a device lost mid-run with RCOLL_IB_NIC=all: its queue pairs fail over to the other, bit-exact, warnings name the link (the second link, the bootstrap's, a link with no event at either end); a link back is used again" ib_failover

# Failover with connections on first use (RCOLL_IB_CONNECT=lazy): the
# bridge's end of h1's second link (p11) is down before the job starts, so
# the queue pairs over it never connect (each end's reachability probe
# fails) and are lost RCOLL_RAIL_TIMEOUT after their first attempt while
# the others carry the traffic. After the first block the link comes back
# and they connect (failback); then h1's bootstrap link goes down for good
# and the run ends over the second links alone, every rank bit-exact.
ib_lazy_fo() {
    nic2_add || return 1
    go="$L/ibfo_go_lazy"; end="$L/ibfo_end_lazy"; rm -f "$go" "$end"
    fo_t0=$(date +%s)
    ip link set p11 down
    ( i=0; while [ ! -e "$go" ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
      ip link set p11 up
      all_back
      sleep 1; ip -n h1 link set v1 down; sleep 4; touch "$end" ) &
    cutter=$!
    hosts 4 29764 env RCOLL_IB_NIC=all RCOLL_IB_QPS_PER_PEER=2 RCOLL_IB_CONNECT=lazy \
        RCOLL_RAIL_TIMEOUT=3 RCOLL_RAIL_RETRY=0.5 RCOLL_IB_PLACE_MIN=64K RCOLL_TIMEOUT=60 \
        $B/tests/test_failover -n 1000000 -c 65536 -a 1 -s "$go" -e "$end" -d 1 > /dev/null
    rc=$?
    wait $cutter
    ip link set p11 up; ip -n h1 link set v1 up
    nic2_del
    fo_ended lazy $rc || return 1
    for w in "link siwb[01] port 1 .* failed (no connection within" \
        "link siwb[01] .* is back" "link siw[01] port 1 .* failed"; do
        grep -h "$w" "$L"/rank[0-3].log | sed 's/.*WARN [^ ]* //' | head -n 1
        grep -q "$w" "$L"/rank[0-3].log || { echo "lazy: no warning '$w'"; return 1; }
    done
    grep -h "queue pairs lost" "$L"/rank[0-3].log | sort | uniq -c
}
check "siw: failover with connections on first use (RCOLL_IB_CONNECT=lazy): queue pairs over a link down at start are lost after RCOLL_RAIL_TIMEOUT, connect once it is back, carry the run when the bootstrap link goes" ib_lazy_fo

echo "rdma suite: $(( $(date +%s) - t0 )) s"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
