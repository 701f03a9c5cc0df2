#!/bin/sh
# rcoll-sim, the library's schedules, tuner and executor over a modelled
# network in one process:
# - verify: every algorithm (all-to-all-v with uneven counts and gaps
#   between blocks) at 1-40, 48, 63-65, 127-129, 255-257 ranks,
#   on one host and on hosts of 2-4 ranks (in blocks, and dealt out:
#   rank r on host r mod H), bit-exact, no deadlock, no
#   message left unreceived;
# - a sampled sweep up to 16,384 ranks: broadcast, reduce and barrier
#   (trees, chains, dissemination) at 4,097 and 16,384 ranks;
# - a planted bug (rank 1 drops its first received block, at rank counts
#   that are not powers of two) is caught at those counts and only there;
# - estimate: a ring all-reduce's network bytes per rank are the formula's
#   2 (n-1)/n * S * H/n, two rails carry half each, and the simulated time
#   is within 15% above the NICs' bound; Rabenseifner's all-reduce sends
#   3/8 of S per rank over the network (its halving starts inside the
#   host; the halving reduce-scatter and the recursive-doubling
#   all-gather 3/16), and the ring and Rabenseifner
#   send as much with the ranks dealt out over the hosts
#   (the placement's ring, the locality's bit order).
# Usage: test_sim.sh BUILDDIR SRCDIR
B=$1
S=$2
SIM="$B/tools/rcoll-sim"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# (two processes, one per core: the all-reduces, three quarters of the
# time - the flat one polls every peer at 257 ranks -, beside the other
# kinds and then the sampled sweep)
OTHERS=allgather,broadcast,reduce_scatter,reduce,barrier,alltoall,alltoallv,gather,scatter
"$SIM" verify --kind allreduce > "$T/v1" 2>&1 &
p1=$!
"$SIM" verify --kind $OTHERS > "$T/v2" 2>&1
rc2=$?
"$SIM" verify --ranks 4097,16384 --kind broadcast,reduce,barrier --count 4 \
    --mem-gib 4 > "$T/big" 2>&1
rcb=$?
wait $p1
rc1=$?
cat "$T/v1" "$T/v2"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] || fail "verify exited $rc1 (all-reduce), $rc2 (the others)"
[ "$(grep -c '^rcoll-sim verify: [0-9]* runs, 0 failed' "$T/v1" "$T/v2" |
    grep -c ':1$')" -eq 2 ] || fail "verify's summaries"
[ "$(cat "$T/v1" "$T/v2" | grep -c ' 0 failed')" -ge 28 ] || fail "fewer algorithms than expected"
! grep -q "^allreduce" "$T/v2" && grep -q "^allgather" "$T/v2" || fail "the kinds' split"

cat "$T/big"
[ $rcb -eq 0 ] || fail "verify at 4,097 and 16,384 ranks exited $rcb"
[ "$(grep -c ' runs (4097-16384 ranks), 0 failed' "$T/big")" -eq 5 ] ||
    fail "five algorithms at 4,097-16,384 ranks"

"$SIM" verify --ranks 2-9 --plant skip-block > "$T/p" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "the planted bug went unseen (exit $rc)"
grep '^FAIL' "$T/p" | head -3
# every failure at 3, 5, 6, 7 or 9 ranks; all-gather's ring at each of them
if grep '^FAIL' "$T/p" | grep -Eq ', (2|4|8) ranks'; then
    fail "a failure at a power of two, where nothing was planted"
fi
for k in 3 5 6 7 9; do
    grep -q "^FAIL allgather/ring, $k ranks" "$T/p" ||
        fail "the planted bug at $k ranks went unseen by allgather/ring"
done
echo "planted skip-block: $(grep -c '^FAIL' "$T/p") failing runs, none at 2, 4, 8 ranks"

"$SIM" estimate "$S/benchmarks/clusters/small-2rail.conf" allreduce 64M \
    --algo ring > "$T/e" 2>&1 || { cat "$T/e"; fail "estimate"; }
cat "$T/e"
# 16 ranks on 4 hosts, S = 64 MiB, 2 NICs of 10 Gb/s per host
awk '$1 == "ring" {
    want = 2 * 15 / 16 * 67108864 * 4 / 16
    if ($5 != want) { print "network bytes per rank " $5 ", want " want; exit 1 }
    if ($6 != "50/50") { print "rails " $6 ", want 50/50"; exit 1 }
    # each of 30 steps puts 4 MiB through a host edge of 2 x 1.25 GB/s
    bound = 30 * 4194304 / 2.5e9 * 1e6
    r = $3 / bound
    printf "simulated %.0f us, %.3f x the NICs bound\n", $3, r
    if (r < 1 || r > 1.15) exit 1
    found = 1
} END { if (!found) exit 1 }' "$T/e" || fail "the ring's estimate"
grep -q "^tuner's choice: " "$T/e" || fail "no tuner's choice"
# Rabenseifner across hosts halves inside the host first (bits 1, 0, then
# 3, 2): each rank sends S/8 + S/16 over the network each way (it sent
# S/2 + S/4 when the farthest partner came first)
"$SIM" estimate "$S/benchmarks/clusters/small-2rail.conf" allreduce 64M \
    --algo rabenseifner > "$T/r" 2>&1 || { cat "$T/r"; fail "estimate"; }
cat "$T/r"
awk '$1 == "rabenseifner" { found = 1
    want = 2 * 3 / 16 * 67108864
    if ($5 != want) { print "network bytes per rank " $5 ", want " want; exit 1 }
} END { if (!found) exit 1 }' "$T/r" || fail "Rabenseifner's network bytes"
# net_bytes COLL ALGO FRACTION: ALGO's network bytes per rank for COLL of
# 64 MiB on small-2rail are exactly FRACTION (a decimal) of 64 MiB
net_bytes() {
    "$SIM" estimate "$S/benchmarks/clusters/small-2rail.conf" $1 64M \
        --algo $2 > "$T/nb" 2>&1 || { cat "$T/nb"; fail "estimate $1 $2"; }
    awk -v a=$2 -v c=$1 -v f="$3" '$1 == a { found = 1; want = f * 67108864
        printf "%s by %s: %d network bytes per rank (want %d)\n", c, a, $5, want
        if ($5 != want) exit 1
    } END { if (!found) exit 1 }' "$T/nb" || fail "$1 by $2: network bytes"
}
# the reduce-scatter by halving takes its rounds in the same order, and
# the recursive-doubling all-gather runs them backwards (farthest first,
# while the groups are small): 3/16 of the 64 MiB each (was 3/4)
net_bytes reduce_scatter halving 0.1875 # 3/16
net_bytes allgather recursive_doubling 0.1875
# the same hosts with the ranks dealt out (rank r on host r mod 4): the
# placement's ring order and Rabenseifner's bit order follow the hosts, so
# the network bytes per rank are the same as in blocks
{ cat "$S/benchmarks/clusters/small-2rail.conf"; echo "cyclic = 1"; } > "$T/cyc.conf"
for a in ring rabenseifner; do
    "$SIM" estimate "$T/cyc.conf" allreduce 64M --algo $a > "$T/c.$a" 2>&1 ||
        { cat "$T/c.$a"; fail "estimate, dealt out"; }
    want=$(awk -v a=$a '$1 == a {print $5}' "$T/e" "$T/r")
    got=$(awk -v a=$a '$1 == a {print $5}' "$T/c.$a")
    echo "$a, ranks dealt out over the hosts: $got network bytes per rank (in blocks: $want)"
    [ -n "$got" ] && [ "$got" = "$want" ] || fail "$a dealt out: $got network bytes, want $want"
done
echo "rcoll-sim: OK"
