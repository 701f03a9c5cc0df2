#!/bin/bash
# Fault injection across network-namespace "hosts" (and over shared memory
# on one host). Every scenario runs tests/faults/fault_rank, which checks
# each collective bit-exact and reports ERROR/WRONG/DONE; a WRONG result
# or a process still running past its deadline (a hang) always fails.
#
#   run.sh BUILDDIR kill TRANSPORT [TRIALS]   SIGKILL a random rank at a
#       random moment (bootstrap, connection setup, any collective,
#       destroy): each survivor finishes or fails naming the dead rank
#       within 10 s; no /dev/shm leftovers (a victim killed during
#       setup leaves its segment: the next job must remove it; one of a
#       survivor is a leak).                  TRANSPORT: tcp | shm | ib
#   run.sh BUILDDIR stop TRANSPORT            SIGSTOP a rank: the others
#       fail after RCOLL_TIMEOUT naming it, the collective and the step;
#       every one names it as the root cause, also those that waited for
#       another survivor
#   run.sh BUILDDIR netem [TRANSPORT]         2,000 collectives over a veth
#       with loss, delay+jitter, reordering and duplication, all bit-exact
#   run.sh BUILDDIR cut [TRANSPORT]           a 2 s link cut is survived,
#       bit-exact; one longer than RCOLL_TIMEOUT is an error naming a peer
#   run.sh BUILDDIR corrupt [TRANSPORT]       bits flipped in received TCP
#       data (LD_PRELOAD shim), and netem corrupt where the kernel has it:
#       with RCOLL_CHECKSUM=1 every collective is bit-exact or an error
#       (RCOLL_ERR_CORRUPT naming the sender); never a wrong result
#   run.sh BUILDDIR epoll                     epoll_ctl(MOD) fails while a
#       TCP send waits for EPOLLOUT (LD_PRELOAD shim): an error naming the
#       call and the peer at once, not a stall until RCOLL_TIMEOUT
#   run.sh BUILDDIR campaign TRANSPORT [TRIALS] [SEED]   (outside CI)
#       randomized trials: 2-8 ranks, every collective, all-to-all and
#       point to point (FAULT_ALL=1); SIGKILL or SIGSTOP of a random rank,
#       and over tcp/ib also a link cut longer or shorter than
#       RCOLL_TIMEOUT and (where the kernel has netem) 10 % loss, at a
#       random moment (init, mid-run, destroy). Counts: hangs, wrong
#       results, survivors that name the culprit, finish, or fail without
#       naming it. Exits 1 on any hang or wrong result, on a survivor of a
#       kill/stop that fails without naming the culprit after init, and on
#       an error where every rank should have survived.
#   run.sh BUILDDIR strangers                 connections without the job
#       secret at the bootstrap root (half-open, random bytes, a wrong MAC,
#       a rank of another job) are dropped; the job runs undisturbed; ranks
#       listen only on the chosen interface; strangers at the ranks' own
#       listeners while the job runs are dropped too
# Needs root and iproute2 (tc for netem); exits 77 (skip) otherwise.
B=$1; what=$2; shift 2
FR="$B/tests/faults/fault_rank"
LOG="$B/tests/logs/faults"
mkdir -p "$LOG"
[ "$(id -u)" = 0 ] && command -v ip > /dev/null || { echo "needs root and ip"; exit 77; }
# FAULT_HOSTS="NS_A:ADDR_A:DEV_A NS_B:ADDR_B:DEV_B" uses two existing
# hosts (the RDMA guest's h0/h1, whose devices are on those links);
# otherwise two namespaces joined by a veth pair are made here.
if [ -n "$FAULT_HOSTS" ]; then
    read -r ha hb <<< "$FAULT_HOSTS"
    IFS=: read -r A ADDR VA <<< "$ha"; IFS=: read -r Z _ VB <<< "$hb"
    OWN=0
else
    A=rfA$$; Z=rfB$$; VA=fa$$; VB=fb$$; ADDR=198.18.9.1; OWN=1
fi
cleanup() {
    for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
    for p in $PIDS; do kill -CONT "$p" 2> /dev/null; kill -9 "$p" 2> /dev/null; done
    ip netns exec $A tc qdisc del dev $VA root 2> /dev/null
    ip netns exec $Z tc qdisc del dev $VB root 2> /dev/null
    ip -n $A link set $VA up 2> /dev/null
    if [ $OWN = 1 ]; then ip netns del $A 2> /dev/null; ip netns del $Z 2> /dev/null; fi
}
trap cleanup EXIT INT TERM
if [ $OWN = 1 ]; then
    ip netns add $A && ip netns add $Z || { echo "cannot create namespaces"; exit 77; }
    ip link add $VA type veth peer name $VB || { echo "cannot create veth"; exit 77; }
    ip link set $VA netns $A && ip link set $VB netns $Z &&
    ip -n $A addr add 198.18.9.1/24 dev $VA && ip -n $Z addr add 198.18.9.2/24 dev $VB &&
    ip -n $A link set $VA up && ip -n $Z link set $VB up &&
    ip -n $A link set lo up && ip -n $Z link set lo up || { echo "veth setup failed"; exit 1; }
fi
# netem (sch_netem) is not in every kernel: those scenarios skip without it
have_netem() {
    ip netns exec $A tc qdisc add dev $VA root netem delay 1ms 2> /dev/null || return 1
    ip netns exec $A tc qdisc del dev $VA root
}
# root ports stay below the kernel's ephemeral range (32768-60999), where
# an outgoing connection or a rank's own listener of an earlier trial could
# hold one (the tcp campaign once failed a trial on "bind: Address already
# in use" at 32934); they wrap around within 10000-31999
PORT=$((10000 + ($$ % 20000)))
next_port() { PORT=$((PORT + 1)); [ $PORT -lt 32000 ] || PORT=10000; }
now() { date +%s.%N; }
plus() { awk "BEGIN { printf \"%.3f\", $1 + $2 }"; } # epoch arithmetic

# start NRANKS TRANSPORT ITERS SEED MAXBYTES [ENV...]: ranks in $PIDS, logs
# $LOG/r<rank>.out. tcp: ranks alternate between hosts A and B (0,2 on A;
# 1,3 on B: every ring step crosses the veth); shm: all on host A.
start() {
    local n=$1 tl=$2 iters=$3 seed=$4 maxb=$5; shift 5
    next_port; PIDS=""
    for r in $(seq 0 $((n - 1))); do
        ns=$A; [ "$tl" != shm ] && [ $((r % 2)) = 1 ] && ns=$Z
        ip netns exec $ns env RCOLL_ROOT=$ADDR:$PORT RCOLL_SIZE=$n \
            RCOLL_RANK=$r RCOLL_TRANSPORTS=$tl "$@" \
            "$FR" "$iters" "$seed" "$maxb" > "$LOG/r$r.out" 2>&1 &
        PIDS="$PIDS $!"
    done
}

# wait_all DEADLINE_EPOCH: waits for $PIDS; a process alive at the deadline
# is a hang: killed and reported. Sets RCS (exit codes) and HUNG.
wait_all() {
    local dl=$1 p
    HUNG=""
    while :; do
        alive=""
        for p in $PIDS; do kill -0 "$p" 2> /dev/null && alive="$alive $p"; done
        [ -z "$alive" ] && break
        if awk "BEGIN { exit !($(now) > $dl) }"; then
            HUNG="$alive"
            for p in $alive; do kill -CONT "$p"; kill -9 "$p"; done
            break
        fi
        sleep 0.1
    done
    RCS=""
    for p in $PIDS; do wait "$p" 2> /dev/null; RCS="$RCS $?"; done
}

shm_left() { ls /dev/shm 2> /dev/null | grep -c '^rcoll' ; }

# rc_ok LOG RC: the rank's verdict line and its exit status agree (DONE 0,
# ERROR 3, WRONG 4): a crash after a verdict line, or a line without its
# status, is not a pass
rc_ok() {
    case $(tail -n 1 "$1" 2> /dev/null) in
    DONE*) [ "$2" = 0 ] ;;
    ERROR*) [ "$2" = 3 ] ;;
    WRONG*) [ "$2" = 4 ] ;;
    *) false ;;
    esac
}

case $what in
kill)
    tl=$1; trials=${2:-50}; n=4; bad=0; named=0; finished=0; lags=""; init_unnamed=0; victims=""
    before=$(shm_left); before_names=" $(ls /dev/shm | grep '^rcoll-n' | tr '\n' ' ')"
    for i in $(seq 1 "$trials"); do
        victim=$((RANDOM % n)); iters=$((10 + RANDOM % 300))
        # a fifth of the trials kill during bootstrap or connection setup
        if [ $((RANDOM % 100)) -lt ${FAULT_EARLY_PCT:-20} ]; then delay=$((RANDOM % 150)); else delay=$((RANDOM % 1500)); fi
        start $n "$tl" $iters $i 262144 RCOLL_TIMEOUT=5
        sleep "$(awk "BEGIN { print $delay / 1000 }")"
        vp=$(echo $PIDS | cut -d' ' -f$((victim + 1)))
        tk=$(now)
        kill -9 "$vp" 2> /dev/null
        wait "$vp" 2> /dev/null # reaped here: no "Killed" line from bash
        victims="$victims $vp"
        PIDS=$(echo $PIDS | tr ' ' '\n' | grep -v "^$vp$" | tr '\n' ' ')
        wait_all "$(plus $tk 15)"
        phase=$(grep -q READY "$LOG/r$victim.out" && echo "after init" || echo "during init")
        set -- $RCS # the survivors, in rank order
        for r in $(seq 0 $((n - 1)) | grep -vx "$victim"); do
            rc=$1; shift
            if ! rc_ok "$LOG/r$r.out" "$rc"; then
                bad=$((bad + 1))
                echo "trial $i ($phase, ${delay} ms, victim $victim): rank $r exit $rc after: $(tail -n 1 "$LOG/r$r.out")"
            else
                last=$(tail -n 1 "$LOG/r$r.out")
                case $last in
                DONE*) finished=$((finished + 1)) ;;
                ERROR*)
                    te=$(echo "$last" | awk '{print $3}')
                    lag=$(awk "BEGIN { printf \"%.2f\", $te - $tk }")
                    lags="$lags $lag"
                    if echo "$last" | grep -Eq "rank $victim[^0-9]" &&
                        awk "BEGIN { exit !($lag <= ${FAULT_DETECT_S:-10}) }"; then
                        named=$((named + 1))
                    elif [ "$phase" = "during init" ] && [ "${FAULT_STRICT_INIT:-0}" != 1 ]; then
                        # the victim died inside rcoll_comm_init: an error
                        # (no hang, no wrong result) is required, naming it
                        # is counted (rare misses remain; FAULT_STRICT_INIT=1
                        # makes them failures)
                        init_unnamed=$((init_unnamed + 1))
                        echo "trial $i ($phase, ${delay} ms, victim $victim): rank $r failed without naming the dead rank (counted): $last"
                    else
                        bad=$((bad + 1))
                        echo "trial $i ($phase, ${delay} ms, victim $victim): rank $r did not name the dead rank within ${FAULT_DETECT_S:-10} s (+${lag} s): $last"
                    fi ;;
                *)
                    bad=$((bad + 1))
                    echo "trial $i ($phase, ${delay} ms, victim $victim): rank $r exit $rc: $last" ;;
                esac
            fi
        done
        if [ -n "$HUNG" ]; then
            bad=$((bad + 1)); echo "trial $i: HANG (still running 15 s after the kill): $HUNG"
        fi
        if [ $bad != "${bad_before:-0}" ]; then # keep the logs of a bad trial
            mkdir -p "$LOG/trial$i" && cp "$LOG"/r*.out "$LOG/trial$i/"
            echo "  (its logs: $LOG/trial$i; victim $victim killed at $tk)"
        fi
        bad_before=$bad
    done
    after=$(shm_left)
    # A victim killed between creating its segment and the unlink after
    # setup leaves it behind (nothing unlinks for a SIGKILLed process); the
    # next job's setup removes it, its creator being gone. So the last
    # trials' such segments: one more job, then they must be gone. A
    # segment of a survivor (which exited, or failed, by itself) is a leak.
    if [ "$after" -gt "$before" ]; then
        swept=""
        for f in $(ls /dev/shm | grep '^rcoll-n'); do
            case "$before_names" in *" $f "*) continue ;; esac
            cp=$(echo "$f" | cut -d- -f3)
            if echo " $victims " | grep -q " $cp "; then
                swept="$swept $f"
            else
                echo "leftover $f: not a victim's segment (victims:$victims)"
                bad=$((bad + 1))
            fi
        done
        if [ -n "$swept" ]; then
            start 2 shm 1 1 4096
            wait_all "$(plus "$(now)" 30)"
            for f in $swept; do
                [ -e "/dev/shm/$f" ] && { echo "leftover $f: the next job did not remove it"; bad=$((bad + 1)); }
            done
            echo "kill/$tl: segments of victims killed during setup:$swept; removed by the next job's setup"
        fi
        after=$(shm_left)
    fi
    lagmax=$(echo $lags | tr ' ' '\n' | sort -g | tail -n 1)
    lagmed=$(echo $lags | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : "-"}')
    echo "kill/$tl: $trials trials; survivors: $named failed naming the dead rank, $finished finished first, $init_unnamed failed during init without naming it, $bad bad; detection median ${lagmed:-"-"} s, max ${lagmax:-"-"} s; /dev/shm rcoll entries before $before after $after"
    [ "$after" -gt "$before" ] && { echo "leftovers in /dev/shm:"; ls /dev/shm; bad=$((bad + 1)); }
    [ $bad = 0 ] ;;
stop)
    tl=$1; n=4; victim=2
    start $n "$tl" 100000 9 65536 RCOLL_TIMEOUT=3
    sleep ${FAULT_STOP_AFTER:-1.5} # past init (longer in the emulated guest)
    vp=$(echo $PIDS | cut -d' ' -f$((victim + 1)))
    tk=$(now); kill -STOP "$vp"
    PIDS=$(echo $PIDS | tr ' ' '\n' | grep -v "^$vp$" | tr '\n' ' ')
    # while they wait: kill -USR1 dumps each operation in flight and what
    # it waits for (RCOLL_DUMP_SIGNAL)
    sleep 1
    for p in $PIDS; do kill -USR1 "$p"; done
    sleep 0.5
    wait_all "$(plus $tk 15)"
    kill -9 "$vp"; wait "$vp" 2> /dev/null
    bad=0; direct=0; rooted=0
    set -- $RCS
    for r in 0 1 3; do
        rc_ok "$LOG/r$r.out" "$1" || { echo "rank $r: exit $1 does not match its verdict"; bad=1; }
        shift
        last=$(tail -n 1 "$LOG/r$r.out")
        te=$(echo "$last" | awk '{print $3}')
        echo "rank $r (+$(awk "BEGIN { printf \"%.2f\", ${te:-0} - $tk }") s): $last"
        case $last in
        ERROR*RCOLL_TIMEOUT*) echo "$last" | grep -Eq "waiting for .* rank $victim .*step" && direct=$((direct + 1))
            echo "$last" | grep -q "root cause: rank $victim .*did not answer" && rooted=$((rooted + 1)) ;;
        *) bad=1 ;;
        esac
    done
    [ -n "$HUNG" ] && { echo "HANG: $HUNG"; bad=1; }
    [ $direct -ge 1 ] || { echo "no survivor named the stopped rank $victim with its step"; bad=1; }
    # every survivor, also one that waited for another survivor, names the
    # stopped rank as the root cause (core/diag.c follows the waits)
    echo "$rooted of 3 survivors name rank $victim as the root cause"
    [ $rooted = 3 ] || bad=1
    dumps=$(grep -l "rcoll:   \[0\] .* waiting for .* rank [0-9]" "$LOG"/r[013].out | wc -l)
    echo "kill -USR1: $dumps of 3 survivors dumped an operation waiting on a peer:"
    grep -h "^rcoll:" "$LOG/r0.out" | head -n 6
    [ "$dumps" = 3 ] || bad=1
    [ $bad = 0 ] ;;
netem)
    tl=${1:-tcp}
    have_netem || { echo "no netem qdisc in this kernel (sch_netem); runs in the RDMA guest"; exit 77; }
    n=4; bad=0; total=0
    # each class on both ends of the veth
    for cls in "loss 5%" "delay 20ms 5ms distribution normal" \
               "delay 2ms reorder 25% 50%" "duplicate 5%"; do
        case $cls in
        "delay 20ms"*) iters=${NETEM_SLOW_ITERS:-400} ;;
        *) iters=${NETEM_ITERS:-550} ;;
        esac
        ip netns exec $A tc qdisc add dev $VA root netem $cls &&
        ip netns exec $Z tc qdisc add dev $VB root netem $cls || { echo "tc netem $cls failed"; exit 77; }
        t0=$(now)
        start $n $tl $iters $((total + 1)) ${NETEM_MAXB:-262144} RCOLL_TIMEOUT=30
        wait_all "$(plus $t0 280)"
        ip netns exec $A tc qdisc del dev $VA root 2> /dev/null
        ip netns exec $Z tc qdisc del dev $VB root 2> /dev/null
        ok=0
        for r in $(seq 0 $((n - 1))); do grep -q "^DONE $iters" "$LOG/r$r.out" && ok=$((ok + 1)); done
        echo "netem $cls: $iters collectives x $n ranks, $ok ranks all bit-exact, $(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }") s"
        if [ $ok != $n ]; then bad=1; tail -n 2 "$LOG"/r*.out; fi
        [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
        total=$((total + iters))
    done
    echo "netem/$tl: $total collectives under faults"
    [ $bad = 0 ] ;;
cut)
    tl=${1:-tcp}; n=4; bad=0
    # a 2 s cut in the middle of 1000 collectives, shorter than the timeout
    t0=$(now)
    start $n $tl 1000 5 262144 RCOLL_TIMEOUT=30
    sleep 1; ip -n $A link set $VA down; sleep 2; ip -n $A link set $VA up
    wait_all "$(plus $t0 200)"
    ok=0
    set -- $RCS
    for r in $(seq 0 $((n - 1))); do
        grep -q "^DONE 1000" "$LOG/r$r.out" && [ "$1" = 0 ] && ok=$((ok + 1)); shift
    done
    echo "short cut (2 s): 1000 collectives x $n ranks, $ok ranks all bit-exact (exit 0), $(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }") s"
    [ $ok = $n ] || { bad=1; tail -n 2 "$LOG"/r*.out; }
    [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
    # a cut longer than the timeout: an error naming a peer across the cut
    start $n $tl 100000 77 65536 RCOLL_TIMEOUT=3
    sleep 1.5; tk=$(now); ip -n $A link set $VA down
    wait_all "$(plus $tk 20)"
    ip -n $A link set $VA up
    set -- $RCS
    for r in $(seq 0 $((n - 1))); do
        last=$(tail -n 1 "$LOG/r$r.out")
        echo "long cut, rank $r (exit $1): $last"
        echo "$last" | grep -Eq "^ERROR .*rank [0-9]" && [ "$1" = 3 ] || bad=1
        shift
    done
    [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
    [ $bad = 0 ] ;;
corrupt)
    # (a) bits flipped after TCP (LD_PRELOAD shim on recv, one flip per
    # FAULT_CORRUPT_EVERY payload receives): with RCOLL_CHECKSUM=1 never a
    # wrong result, and the checksum must fire; without it, how many wrong
    # results slip through is reported (the danger the option removes)
    tl=${1:-tcp}; n=4; bad=0; errs=0; exact=0; fired=0
    SO="$B/tests/faults/.libs/libcorrupt.so"
    [ -f "$SO" ] || { echo "no $SO"; exit 1; }
    for i in $(seq 1 ${CORRUPT_RUNS:-4}); do
        start $n tcp ${CORRUPT_ITERS:-300} $((100 + i)) 262144 RCOLL_CHECKSUM=1 \
            RCOLL_TIMEOUT=20 LD_PRELOAD="$SO" FAULT_CORRUPT_EVERY=${FAULT_CORRUPT_EVERY:-300}
        wait_all "$(plus "$(now)" 200)"
        for r in $(seq 0 $((n - 1))); do
            last=$(tail -n 1 "$LOG/r$r.out")
            case $last in
            DONE*) exact=$((exact + 1)) ;;
            ERROR*) errs=$((errs + 1)); echo "$last" | grep -q "failed its checksum" && fired=$((fired + 1)) ;;
            *) bad=1; echo "run $i rank $r: $last" ;;
            esac
        done
        grep -h "failed its checksum" "$LOG"/r*.out | head -n 1
        [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
    done
    echo "bit flips after TCP, RCOLL_CHECKSUM=1: $exact rank-runs bit-exact, $errs errors ($fired report the failed checksum and its sender), wrong results: $([ $bad = 0 ] && echo none || echo SOME)"
    [ $fired -ge 1 ] || { echo "the checksum never fired: the shim flipped nothing?"; bad=1; }
    wrong=0
    start $n tcp ${CORRUPT_ITERS:-300} 100 262144 RCOLL_TIMEOUT=20 LD_PRELOAD="$SO" \
        FAULT_CORRUPT_EVERY=${FAULT_CORRUPT_EVERY:-300}
    wait_all "$(plus "$(now)" 200)"
    for r in $(seq 0 $((n - 1))); do grep -q '^WRONG' "$LOG/r$r.out" && wrong=$((wrong + 1)); done
    echo "the same flips without RCOLL_CHECKSUM: $wrong of $n ranks got a wrong result (not an error)"
    # (b) netem corrupt on the wire, where the kernel has netem: TCP's own
    # checksum catches these; still never a wrong result
    if have_netem; then
        ip netns exec $A tc qdisc add dev $VA root netem corrupt 1% &&
        ip netns exec $Z tc qdisc add dev $VB root netem corrupt 1% || { echo "tc netem corrupt failed"; exit 1; }
        exact=0; errs=0
        for i in 1 2; do
            start $n $tl ${CORRUPT_ITERS:-300} $((200 + i)) ${NETEM_MAXB:-262144} RCOLL_CHECKSUM=1 RCOLL_TIMEOUT=20
            wait_all "$(plus "$(now)" 300)"
            for r in $(seq 0 $((n - 1))); do
                last=$(tail -n 1 "$LOG/r$r.out")
                case $last in
                DONE*) exact=$((exact + 1)) ;;
                ERROR*) errs=$((errs + 1)); echo "netem run $i rank $r: $last" ;;
                *) bad=1; echo "netem run $i rank $r: $last" ;;
                esac
            done
            [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
        done
        echo "netem corrupt 1% on $tl: $exact rank-runs bit-exact, $errs errors, wrong results: $([ $bad = 0 ] && echo none || echo SOME)"
    fi
    [ $bad = 0 ] ;;
epoll)
    # a lost EPOLLOUT: epoll_ctl(MOD) fails (LD_PRELOAD shim, rank 0 only)
    # when a large send has filled its socket; rank 0 must fail at once
    # naming the call and the peer (before the fix the send sat until
    # RCOLL_TIMEOUT, here 60 s), rank 1 must fail naming rank 0; never a
    # wrong result, never a hang
    SO="$B/tests/faults/.libs/libepollfail.so"
    [ -f "$SO" ] || { echo "no $SO"; exit 1; }
    t0=$(now)
    rm -f "$LOG"/r[0-9]*.out
    # (the shim caps rank 0's socket buffers at 64 KiB: a large send fills
    # its socket and must wait for EPOLLOUT)
    start 2 tcp 300 7 1048576 RCOLL_TIMEOUT=60 LD_PRELOAD="$SO" FAULT_EPOLL_RANKS=0 FAULT_EPOLL_SMALLBUF=1
    wait_all "$(plus "$t0" 50)"
    took=$(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }")
    r0=$(tail -n 1 "$LOG/r0.out"); r1=$(tail -n 1 "$LOG/r1.out")
    echo "rank 0: $r0"; echo "rank 1: $r1"; echo "both ended after $took s"
    bad=0
    set -- $RCS
    rc_ok "$LOG/r0.out" "$1" && rc_ok "$LOG/r1.out" "$2" || { echo "exit codes $RCS do not match the verdicts"; bad=1; }
    [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
    case $r0 in ERROR*epoll_ctl*) ;; *) echo "rank 0 does not name epoll_ctl"; bad=1 ;; esac
    case $r0 in *rank\ 1*) ;; *) echo "rank 0 does not name rank 1"; bad=1 ;; esac
    case $r1 in ERROR*rank\ 0*) ;; *) echo "rank 1 does not name rank 0"; bad=1 ;; esac
    awk "BEGIN { exit !($took < 30) }" || { echo "took $took s: waited for the timeout"; bad=1; }
    grep -q "^WRONG" "$LOG/r0.out" "$LOG/r1.out" && { echo "a wrong result"; bad=1; }
    [ $bad = 0 ] ;;
campaign)
    tl=${1:-tcp}; trials=${2:-1000}; seed=${3:-1}
    # RCOLL_TIMEOUT of the trials (FAULT_TIMEOUT) and the latest moment of
    # a fault (FAULT_DELAY_MS): longer in the emulated RDMA guest, where
    # init alone takes seconds
    ct=${FAULT_TIMEOUT:-4}
    RANDOM=$seed
    faults="kill stop"
    [ "$tl" != shm ] && faults="$faults cut_long cut_short"
    [ "$tl" != shm ] && have_netem && faults="$faults loss"
    # FAULT_KINDS picks among them (the emulated RDMA guest: no loss, where
    # TCP retransmissions under TCG outlast any trial)
    faults=${FAULT_KINDS:-$faults}
    # a cut over ib is a black hole (netem drops every packet both ways),
    # as a fabric outage is: taking the link down makes siw move its queue
    # pairs to the error state at once (seen: a 1 s cut ended every
    # connection), which no RC queue pair survives; over tcp it is the link
    # going down
    if [ "$tl" = ib ] && have_netem; then
        cut_on() {
            ip netns exec $A tc qdisc add dev $VA root netem loss 100%
            ip netns exec $Z tc qdisc add dev $VB root netem loss 100%
        }
        cut_off() {
            ip netns exec $A tc qdisc del dev $VA root 2> /dev/null
            ip netns exec $Z tc qdisc del dev $VB root 2> /dev/null
        }
    else
        cut_on() { ip -n $A link set $VA down; }
        cut_off() { ip -n $A link set $VA up; }
    fi
    nf=$(echo $faults | wc -w)
    hangs=0; wrongs=0; named=0; finished=0; unnamed_init=0; unnamed=0; other=0
    T0=$(now)
    : > "$LOG/campaign.txt"
    for i in $(seq 1 "$trials"); do
        n=$((2 + RANDOM % 7)); victim=$((RANDOM % n))
        fault=$(echo $faults | cut -d' ' -f$((1 + RANDOM % nf)))
        iters=$((5 + RANDOM % 200)); delay=$((RANDOM % ${FAULT_DELAY_MS:-1200}))
        rm -f "$LOG"/r[0-9]*.out
        start $n "$tl" $iters $((seed * 100000 + i)) 131072 RCOLL_TIMEOUT=$ct FAULT_ALL=1
        sleep "$(awk "BEGIN { print $delay / 1000 }")"
        vp=$(echo $PIDS | cut -d' ' -f$((victim + 1)))
        tk=$(now)
        phase=mid
        grep -q READY "$LOG/r$victim.out" 2> /dev/null || phase=init
        grep -q DONE "$LOG/r$victim.out" 2> /dev/null && phase=destroy
        culprit=$victim; survive=0
        case $fault in
        kill) kill -9 "$vp" 2> /dev/null; wait "$vp" 2> /dev/null
              PIDS=$(echo $PIDS | tr ' ' '\n' | grep -v "^$vp$" | tr '\n' ' ') ;;
        stop) kill -STOP "$vp" 2> /dev/null
              PIDS=$(echo $PIDS | tr ' ' '\n' | grep -v "^$vp$" | tr '\n' ' ') ;;
        cut_long) cut_on; culprit=any ;;
        cut_short) cut_on; sleep 1; cut_off; survive=1 ;;
        loss) ip netns exec $A tc qdisc add dev $VA root netem loss 10%
              ip netns exec $Z tc qdisc add dev $VB root netem loss 10%; survive=1 ;;
        esac
        wait_all "$(plus $tk $((21 + ct)))"
        case $fault in
        stop) kill -CONT "$vp" 2> /dev/null; kill -9 "$vp" 2> /dev/null; wait "$vp" 2> /dev/null ;;
        cut_long) cut_off ;;
        loss) ip netns exec $A tc qdisc del dev $VA root 2> /dev/null
              ip netns exec $Z tc qdisc del dev $VB root 2> /dev/null ;;
        esac
        tbad=0
        if [ -n "$HUNG" ]; then hangs=$((hangs + 1)); tbad=1; fi
        set -- $RCS # the ranks still in PIDS, in rank order
        for r in $(seq 0 $((n - 1))); do
            case $fault in kill|stop) [ $r = $victim ] && continue ;; esac
            rc=$1; shift
            last=$(tail -n 1 "$LOG/r$r.out" 2> /dev/null)
            rc_ok "$LOG/r$r.out" "$rc" || last="EXIT $rc after: $last"
            case $last in
            DONE*) finished=$((finished + 1)) ;;
            WRONG*) wrongs=$((wrongs + 1)); tbad=1 ;;
            ERROR*)
                if [ $survive = 1 ]; then
                    other=$((other + 1)); tbad=1
                elif [ $culprit = any ] && echo "$last" | grep -Eq "rank [0-9]"; then
                    named=$((named + 1))
                elif echo "$last" | grep -Eq "rank $culprit[^0-9]"; then
                    named=$((named + 1))
                elif [ $phase = init ]; then
                    unnamed_init=$((unnamed_init + 1))
                else
                    unnamed=$((unnamed + 1)); tbad=1
                fi ;;
            *) other=$((other + 1)); tbad=1 ;;
            esac
        done
        echo "trial $i: $n ranks, $fault of rank $victim at ${delay} ms ($phase), $iters ops: $([ $tbad = 0 ] && echo ok || echo BAD)" >> "$LOG/campaign.txt"
        if [ $tbad = 1 ]; then
            mkdir -p "$LOG/campaign$i" && cp "$LOG"/r*.out "$LOG/campaign$i/" 2> /dev/null
            echo "trial $i: $n ranks, $fault of rank $victim at ${delay} ms ($phase): BAD (logs: $LOG/campaign$i)"
            tail -q -n 1 "$LOG"/r*.out | head -n 8 | sed 's/^/    /'
        fi
        [ $((i % 50)) = 0 ] && echo "... $i trials, $(awk "BEGIN { printf \"%.0f\", $(now) - $T0 }") s"
    done
    echo "campaign/$tl: $trials trials (faults: $faults) in $(awk "BEGIN { printf \"%.0f\", $(now) - $T0 }") s: hangs $hangs, wrong results $wrongs; survivors: $named named the culprit, $finished finished, $unnamed_init failed during init without naming it, $unnamed failed after init without naming it, $other other (an error where all should survive, or no verdict)"
    [ $hangs = 0 ] && [ $wrongs = 0 ] && [ $unnamed = 0 ] && [ $other = 0 ] ;;
strangers)
    # connections that do not know the job secret, at the bootstrap root
    # while the job forms: 4 half-open (connect, then silence), random
    # bytes then close, a few bytes then silence, and a rank of another job
    # (an old secret). They must be dropped without disturbing the job:
    # all ranks bit-exact, and no 10 s stall from the silent ones.
    n=3; bad=0
    next_port
    t0=$(now)
    ip netns exec $A env RCOLL_ROOT=$ADDR:$PORT RCOLL_SIZE=$n RCOLL_RANK=0 \
        RCOLL_SECRET=0123456789abcdef0123456789abcdef RCOLL_TRANSPORTS=tcp \
        "$FR" 300 3 65536 > "$LOG/r0.out" 2>&1 &
    PIDS="$!"
    sleep 0.3
    ip netns exec $Z python3 - "$ADDR" "$PORT" > "$LOG/strangers.out" 2>&1 <<'PY' &
import os, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
held = []
def conn():
    s = socket.create_connection((host, port), timeout=5)
    return s
for i in range(4):                      # half-open: never answer the nonce
    held.append(conn())
s = conn(); s.sendall(os.urandom(64)); s.close()          # garbage, gone
s = conn(); s.sendall(os.urandom(10)); held.append(s)     # garbage, silent
s = conn(); s.recv(16); s.sendall(os.urandom(24)); held.append(s)  # wrong MAC
print("strangers connected", flush=True)
time.sleep(12)                           # hold them past the job's end
PY
    SP=$!
    # a rank of another job (an old secret) knocks at the root too
    ip netns exec $Z env RCOLL_ROOT=$ADDR:$PORT RCOLL_SIZE=$n RCOLL_RANK=1 \
        RCOLL_SECRET=ffffffffffffffffffffffffffffffff RCOLL_TIMEOUT=5 \
        "$FR" 1 1 > "$LOG/old.out" 2>&1 &
    OLD=$!
    sleep 0.5
    # the listening sockets in both hosts while the job forms (only our
    # ranks listen there): bound to the chosen address only. Sampled from
    # before ranks 1 and 2 start, while rank 0 already listens: a job that
    # formed and finished before the first sample (CI saw it once: "saw no
    # listening socket at all") left nothing to check.
    for k in $(seq 1 20); do
        ip netns exec $A ss -Hltn 2> /dev/null; ip netns exec $Z ss -Hltn 2> /dev/null
        sleep 0.05
    done | awk '{print $4}' | sort -u > "$LOG/listen.out" &
    SS=$!
    for r in 1 2; do
        ip netns exec $Z env RCOLL_ROOT=$ADDR:$PORT RCOLL_SIZE=$n RCOLL_RANK=$r \
            RCOLL_SECRET=0123456789abcdef0123456789abcdef RCOLL_TRANSPORTS=tcp \
            "$FR" 300 3 65536 > "$LOG/r$r.out" 2>&1 &
        PIDS="$PIDS $!"
    done
    wait $SS
    wait_all "$(plus $t0 60)"
    took=$(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }")
    wait $OLD 2> /dev/null; kill $SP 2> /dev/null; wait $SP 2> /dev/null
    cat "$LOG/strangers.out"
    for r in 0 1 2; do
        last=$(tail -n 1 "$LOG/r$r.out"); echo "rank $r: $last"
        case $last in DONE*) ;; *) bad=1 ;; esac
    done
    echo "the other job's rank: $(tail -n 1 "$LOG/old.out")"
    grep -q "ERROR init .*\(secret\|handshake\|refused\)" "$LOG/old.out" || { echo "the old-secret rank was not refused"; bad=1; }
    drops=$(grep -h "dropped a connection" "$LOG"/r0.out | wc -l)
    echo "rank 0 (the root) dropped $drops connections; the job took $took s with 4 half-open strangers held"
    [ "$drops" -ge 3 ] || { echo "expected the root to drop the strangers"; bad=1; }
    awk "BEGIN { exit !($took < 8) }" || { echo "the job stalled behind the strangers (${took} s)"; bad=1; }
    echo "listening sockets seen while the job formed: $(tr '\n' ' ' < "$LOG/listen.out")"
    [ -s "$LOG/listen.out" ] || { echo "saw no listening socket at all"; bad=1; }
    if grep -Eq '^(0\.0\.0\.0|\*|\[::\]):[0-9]' "$LOG/listen.out"; then
        echo "a rank listens on every interface"; bad=1
    fi
    [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
    # the ranks' own listeners while the job runs: the bootstrap listener
    # stays open for the timeout diagnosis (core/diag.c) and reads what
    # arrives; the TCP transport's is closed once its mesh is up (test_p2p
    # -L counts them). Strangers there (half
    # open, random bytes, a diagnosis-sized message with a wrong MAC) must
    # be dropped with a warning, and the job must finish bit-exact.
    start $n tcp 20000 5 65536
    sleep 0.7
    ports=""
    for ns in $A $Z; do
        for p in $PIDS; do
            ports="$ports $(ip netns exec $ns ss -Hltnp 2> /dev/null | grep "pid=$p," | awk '{print $4}')"
        done
    done
    echo "the ranks listen on:$ports"
    ip netns exec $Z python3 - $ports > "$LOG/strangers2.out" 2>&1 <<'PY'
import os, socket, sys, time
held = []
for hp in sys.argv[1:]:
    host, port = hp.rsplit(":", 1)
    try:
        held.append(socket.create_connection((host, int(port)), timeout=2))
        s = socket.create_connection((host, int(port)), timeout=2)
        s.sendall(os.urandom(504)); s.close()      # a forged message, gone
        s = socket.create_connection((host, int(port)), timeout=2)
        s.sendall(os.urandom(7)); held.append(s)   # a fragment, silent
    except OSError as e:
        print("could not reach", hp, e)
print("hit", len(sys.argv) - 1, "listeners", flush=True)
time.sleep(3)
PY
    wait_all "$(plus $(now) 120)"
    cat "$LOG/strangers2.out"
    for r in 0 1 2; do
        last=$(tail -n 1 "$LOG/r$r.out"); echo "rank $r: $last"
        case $last in DONE*) ;; *) bad=1 ;; esac
    done
    nl=$(echo $ports | wc -w)
    drops=$(grep -l "dropped a connection to its bootstrap listener" "$LOG"/r[012].out | wc -l)
    echo "$drops of 3 ranks dropped strangers at their bootstrap listener ($nl listeners hit)"
    [ "$nl" -ge 3 ] || { echo "found fewer listeners than ranks"; bad=1; }
    [ "$drops" = 3 ] || bad=1
    [ -n "$HUNG" ] && { echo "HANG"; bad=1; }
    [ $bad = 0 ] ;;
*)
    echo "usage: run.sh BUILDDIR kill|stop|netem|cut|corrupt|strangers ..."; exit 2 ;;
esac
