#!/bin/sh
# TCP receives in place (transport recv_place): a large receive's data is
# read from the socket straight into the destination, not through a slot.
# The library's debug line at the end of each such receive says how many of
# its bytes landed in place; rendezvous receives post theirs before the
# go-ahead leaves, so every byte of every one must land in place. The data
# itself is checked bit-exact by test_p2p and test_coll.
# usage: test_tcp_inplace.sh BUILD
B=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$log"; exit 1; }
env RCOLL_TRANSPORTS=tcp RCOLL_DEBUG=debug "$B/tools/rcoll-run" -n 3 \
    "$B/tests/test_p2p" -L 1 -e 4194304 >"$log" 2>&1 || fail "test_p2p failed"
grep -q '0 failures on all ranks' "$log" || fail "test_p2p reported failures"
sed -n 's/.*tcp: \([0-9]*\) of \([0-9]*\) bytes from rank.*landed in place/\1 \2/p' \
    "$log" >"$log.n"
n=$(wc -l <"$log.n")
short=$(awk '$1 != $2' "$log.n" | wc -l)
rm -f "$log.n"
echo "p2p over tcp: $n receives in place, $short of them not wholly"
[ "$n" -ge 10 ] || fail "only $n receives in place (expected every large one)"
[ "$short" -eq 0 ] || fail "$short receives in place got bytes through slots"
# all-to-all, gather and scatter post theirs too (data that arrives before
# the operation is posted still goes through the slots: only counted)
env RCOLL_TRANSPORTS=tcp RCOLL_DEBUG=debug "$B/tools/rcoll-run" -n 3 \
    "$B/tests/test_coll" -q -C alltoall,alltoallv,gather,scatter -N 70001,300000 \
    >"$log" 2>&1 || fail "test_coll failed"
grep -q '0 failures on all ranks' "$log" || fail "test_coll reported failures"
m=$(grep -c 'landed in place' "$log")
echo "alltoall(v), gather, scatter over tcp: $m receives in place"
[ "$m" -ge 10 ] || fail "only $m receives in place"
echo "ok"
