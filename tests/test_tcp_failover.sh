#!/bin/sh
# TCP failover over loopback: RCOLL_FAULT=tcp_failover_any lets a peer's
# sockets fail over with one rail, and tcp_sock_drop:K shuts down the
# socket of rank 1's K-th send right after queueing it, as if its rail
# had failed with messages in flight both ways (one rank only: two ranks
# dropping different sockets of one pair would leave it none, and that
# is a failure to name, tests/test_fail and the fault campaign). Each run must finish
# bit-exact (test_coll's matrix, test_p2p's exchanges), with warnings that
# name the failed socket and the peer. K and the settings vary what is in
# flight: the first messages, mid-run, small chunks with few slots (many
# messages resent and received out of order), connections on first use
# with checksums and three sockets per peer, point-to-point.
# Failback (RCOLL_RAIL_RETRY, 0.2 s here): a lost socket is connected
# again once nothing of it is left to resend; the last run loses a
# socket three times (K a list) and each time both ranks of the pair
# connect it again, bit-exact throughout; in another the first failback's
# answer is lost (RCOLL_FAULT=tcp_rejoin_cut) and a later one succeeds.
# Usage: test_tcp_failover.sh BUILD
B=$1
L=$B/tests/logs
mkdir -p "$L"
fails=0
run() { # run NAME K[,K...] ENV... -- PROGRAM ARGS...
    name=$1; k=$2; shift 2
    drop=$(echo "$k" | sed 's/\([0-9][0-9]*\)/tcp_sock_drop:\1/g')
    envs=""
    while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
    shift
    out="$L/tcp_failover_$name.out"
    env RCOLL_RAIL_RETRY=0.2 $envs RCOLL_TRANSPORTS=tcp RCOLL_TIMEOUT=30 \
        RCOLL_FAULT=tcp_failover_any DROP=$drop \
        "$B/tools/rcoll-run" -n 4 sh -c '[ "$RCOLL_RANK" = 1 ] &&
            export RCOLL_FAULT="$RCOLL_FAULT,$DROP"; exec "$@"' sh "$@" \
        > "$out" 2>&1
    rc=$?
    n=$(grep -c "failed (.*go again" "$out")
    b=$(grep -c "is back: socket" "$out")
    want=$(( 2 * $(echo "$k" | tr ',' '\n' | wc -l) ))
    printf '%-10s drop at send %s: exit %d, %d failovers, %d failbacks, %s\n' \
        "$name" "$k" $rc "$n" "$b" "$(grep -h 'ranks,.*failures' "$out" | tail -n 1)"
    # (a failback needs the run to last past the drop: only the last run,
    # long enough by design, must show every one)
    if [ $rc -ne 0 ] || [ "$n" -lt "$want" ] ||
        { [ "$name" = again ] && [ "$b" -lt "$want" ]; } ||
        { [ "$name" = cutback ] && { [ "$b" -lt 3 ] ||
            ! grep -q "RCOLL_FAULT: tcp_rejoin_cut" "$out"; }; } ||
        ! grep -q "0 failures on all ranks" "$out"; then
        echo "FAIL: $name"; tail -n 8 "$out"; fails=$((fails + 1))
    fi
}
N="-q -T -N 1,1023,131073"
run first 3 -- "$B/tests/test_coll" $N
run mid 500 -- "$B/tests/test_coll" $N
run small 150 RCOLL_CHUNK_SIZE=4096 RCOLL_NSLOTS=2 -- "$B/tests/test_coll" $N
run lazy 900 RCOLL_TCP_CONNECT=lazy RCOLL_CHECKSUM=1 RCOLL_TCP_NSOCKS=3 \
    -- "$B/tests/test_coll" $N
run p2p 300 -- "$B/tests/test_p2p"
run again 200,1200,2500 -- "$B/tests/test_coll" -q -N 1,1023,131073
# (the first failback's yes lost, its new connection cut: the peer took the
# new number, the connecting rank did not; the next attempt proposes a
# higher one, and the socket comes back)
run cutback 200 CUT=tcp_rejoin_cut:1 -- sh -c 'RCOLL_FAULT="$RCOLL_FAULT,$CUT" exec "$@"' sh \
    "$B/tests/test_coll" -q -N 1,1023,131073
[ $fails -eq 0 ] || exit 1
echo "ok: every run failed over and finished bit-exact; a socket lost three times was connected again each time"
