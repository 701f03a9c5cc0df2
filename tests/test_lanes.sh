#!/bin/sh
# rcoll-info -p: a running job's lanes and their counters. test_lanes runs
# ring all-reduces of 768 KiB on 3 ranks in two phases and waits between
# them; rcoll-info -p asks rcoll-run (each of its ranks) after each phase.
# Between the two answers every rank's lanes sent and received exactly the
# ring's bytes: 7 calls x 2 (n-1)/n x 768 KiB; over tcp each of the 2
# sockets carried some (messages striped over lanes). A process that does
# not catch the dump signal is not sent it (SIGUSR1 would end it).
# usage: test_lanes.sh BUILD
B=$1
D=$(mktemp -d)
trap 'touch "$D/go" "$D/end"; wait; rm -rf "$D"' EXIT
fail() { echo "FAIL: $*"; cat "$D/job.out" 2> /dev/null | tail -n 20; exit 1; }

await() { # await FILE...: up to 120 s, while job $jp runs
    i=0
    for f in "$@"; do
        while [ ! -e "$f" ]; do
            i=$((i + 1)); [ $i -gt 1200 ] && fail "no $f in 120 s"
            kill -0 $jp 2> /dev/null || fail "the job ended before $f"
            sleep 0.1
        done
    done
}

# sums KEY over the lane lines of rank R's dump: KEY sent-bytes|recv-bytes|sent-msgs
lane() { # lane FILE RANK FIELD LANE(-1: all)
    awk -v r="$2" -v f="$3" -v k="$4" '
        /^rcoll: comm .* rank [0-9]+ of/ { for (i = 1; i <= NF; i++) if ($i == "rank") cur = $(i + 1) }
        /^rcoll:     lane [0-9]+ / && cur == r {
            if (k >= 0 && $3 != k) next
            for (i = 1; i <= NF; i++) {
                if ($i == "sent") { sm = $(i + 1); sb = $(i + 3) }
                if ($i == "received;" || $i == "received") { rm = $(i + 1); rb = $(i + 3) }
            }
            gsub(/[^0-9]/, "", sb); gsub(/[^0-9]/, "", rb)
            if (f == "sb") s += sb; else if (f == "rb") s += rb; else s += sm
        }
        END { print s + 0 }' "$1"
}

for tl in shm tcp; do
    rm -f "$D"/a.* "$D"/b.* "$D/go" "$D/end"
    env RCOLL_TRANSPORTS=$tl RCOLL_ALGO=allreduce:ring "$B/tools/rcoll-run" -n 3 \
        "$B/tests/test_lanes" "$D" > "$D/job.out" 2>&1 &
    jp=$!
    await "$D/a.0" "$D/a.1" "$D/a.2"
    "$B/tools/rcoll-info" -p $jp > "$D/one" 2>&1 || { cat "$D/one"; fail "$tl: rcoll-info -p $jp"; }
    touch "$D/go"
    await "$D/b.0" "$D/b.1" "$D/b.2"
    "$B/tools/rcoll-info" -p $jp > "$D/two" 2>&1 || { cat "$D/two"; fail "$tl: rcoll-info -p $jp"; }
    touch "$D/end"
    wait $jp || fail "$tl: the job failed"
    [ "$(grep -c "all-reduces exact" "$D/job.out")" = 3 ] || fail "$tl: not every rank exact"
    grep -h "^rcoll: comm\|transport\|lanes* per peer\|lane 0" "$D/two" | head -n 5
    [ "$(grep -c "^rcoll: comm .* rank [0-2] of 3 .*healthy" "$D/two")" = 3 ] ||
        { cat "$D/two"; fail "$tl: not every rank answered healthy"; }
    want=$((7 * 2 * 2 * 3 * 65536 * 4 / 3))
    for r in 0 1 2; do
        sb=$(( $(lane "$D/two" $r sb -1) - $(lane "$D/one" $r sb -1) ))
        rb=$(( $(lane "$D/two" $r rb -1) - $(lane "$D/one" $r rb -1) ))
        echo "$tl rank $r: between the answers sent $sb bytes, received $rb (ring: $want)"
        [ "$sb" = "$want" ] && [ "$rb" = "$want" ] || { cat "$D/one" "$D/two"; fail "$tl rank $r: counters"; }
        if [ $tl = tcp ]; then
            for k in 0 1; do
                m=$(( $(lane "$D/two" $r sm $k) - $(lane "$D/one" $r sm $k) ))
                [ "$m" -gt 0 ] || fail "tcp rank $r: no message on lane $k"
            done
        fi
    done
done

# not an rcoll process: refused, and it lives on
sleep 30 & sp=$!
"$B/tools/rcoll-info" -p $sp > "$D/out" 2>&1 && fail "rcoll-info -p on sleep succeeded"
cat "$D/out"
grep -q "does not catch SIGUSR1" "$D/out" || fail "no reason given"
kill -0 $sp || fail "sleep was killed"
kill $sp
echo "rcoll-info -p: lanes and counters exact over shm and tcp"
