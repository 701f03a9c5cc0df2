#!/bin/sh
# Eight "hosts": network namespaces on one bridge (in a ninth namespace;
# addresses from 198.18.0.0/15, only inside these namespaces). N ranks in
# 8 contiguous blocks, started by hand with RCOLL_ROOT on host 0: shared
# memory inside a host, TCP between hosts. test_scale's six collectives
# must be bit-exact at each N given.
# Needs root and iproute2; skips (77) otherwise.
# Usage: test_hosts8.sh BUILDDIR N...
B=$1; shift
[ "$(id -u)" = 0 ] && command -v ip > /dev/null || { echo "needs root and ip"; exit 77; }
P=r8$$
SW=${P}sw
cleanup() {
    for h in 0 1 2 3 4 5 6 7; do ip netns del ${P}h$h 2> /dev/null; done
    ip netns del $SW 2> /dev/null
}
trap cleanup EXIT INT TERM
ip netns add $SW || { echo "cannot create namespaces"; exit 77; }
ip -n $SW link add br0 type bridge && ip -n $SW link set br0 up ||
    { echo "cannot create a bridge"; exit 77; }
for h in 0 1 2 3 4 5 6 7; do
    ns=${P}h$h
    ip netns add $ns &&
    ip link add ${P}a$h type veth peer name ${P}b$h &&
    ip link set ${P}a$h netns $ns && ip link set ${P}b$h netns $SW &&
    ip -n $SW link set ${P}b$h master br0 && ip -n $SW link set ${P}b$h up &&
    ip -n $ns addr add 198.18.11.$((h + 1))/24 dev ${P}a$h &&
    ip -n $ns link set ${P}a$h up && ip -n $ns link set lo up ||
        { echo "host $h: setup failed"; exit 1; }
done
L="$B/tests/logs/hosts8"
mkdir -p "$L"
fails=0
port=29700
for n in "$@"; do
    port=$((port + 1))
    per=$((n / 8)); [ $per -ge 1 ] || { echo "FAIL: $n ranks: at least 8"; fails=$((fails + 1)); continue; }
    s=$(date +%s)
    pids=""
    r=0
    while [ $r -lt $n ]; do
        h=$((r / per)); [ $h -gt 7 ] && h=7
        ip netns exec ${P}h$h env RCOLL_ROOT=198.18.11.1:$port RCOLL_SIZE=$n \
            RCOLL_RANK=$r RCOLL_SECRET=00112233445566778899aabbccddeeff \
            RCOLL_TIMEOUT=120 "$B/tests/test_scale" > "$L/n${n}_r$r.out" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do wait $p || rc=1; done
    took=$(( $(date +%s) - s ))
    if [ $rc = 0 ] && grep -q "0 rank(s) with wrong results" "$L/n${n}_r0.out"; then
        echo "ok: $n ranks on 8 hosts ($took s): $(grep test_scale: "$L/n${n}_r0.out")"
    else
        echo "FAIL: $n ranks on 8 hosts ($took s)"
        grep -h "FAIL\|rcoll" "$L"/n${n}_r*.out | sort | uniq -c | sort -rn | head -10
        fails=$((fails + 1))
    fi
done
[ $fails = 0 ]
