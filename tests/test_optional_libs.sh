#!/bin/sh
# librcoll loads libibverbs, librdmacm, hwloc and PMIx at run time
# (src/util/dl.c): no NEEDED entry of librcoll.so names them, it exports
# rcoll_* only, and on a host without them - hidden here by bind-mounting
# /dev/null over each in a private mount namespace - collectives run over
# shm and tcp, and each missing part is named where it is needed.
# Usage: test_optional_libs.sh BUILDDIR
B=$(cd "$1" && pwd)
lib=$B/.libs/librcoll.so
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$lib" ] || { echo "no shared librcoll"; exit 77; }
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "librcoll.so needs: $needed"
echo "$needed" | grep -Eq 'ibverbs|rdmacm|hwloc|pmix' &&
    fail "librcoll links an optional library"
bad=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | grep -v '^rcoll_')
[ -z "$bad" ] || fail "librcoll exports more than rcoll_*: $bad"
echo "librcoll.so exports rcoll_* only ($(nm -D --defined-only "$lib" | wc -l) symbols)"

[ "$(id -u)" = 0 ] && unshare -m true 2> /dev/null ||
    { echo "hiding libraries needs root and a mount namespace"; exit 77; }
hide=""
for so in libibverbs.so.1 librdmacm.so.1 libhwloc.so.15 libpmix.so.2; do
    p=$(ldconfig -p | awk -v s="$so" '$1 == s { print $NF; exit }')
    [ -n "$p" ] && hide="$hide $(readlink -f "$p")"
done
echo "hidden:$hide"
# shellcheck disable=SC2086
exec unshare -m sh -s "$B" $hide << 'EOF'
B=$1; shift
fail() { echo "FAIL: $*"; exit 1; }
for f in "$@"; do mount --bind /dev/null "$f" || fail "mount over $f"; done
out=$("$B/tools/rcoll-info" -t 2>&1)
echo "$out" | grep -E '^ *ib ' 
echo "$out" | grep -Eq '^ *ib +unusable.*libibverbs.so.1 could not be loaded' ||
    fail "rcoll-info -t does not name the missing libibverbs"
for tl in shm tcp; do
    RCOLL_TRANSPORTS=$tl "$B/tools/rcoll-run" -n 3 "$B/benchmarks/rcoll-perf" \
        allreduce -b 8 -e 1M -f 32 -d int32 -n 2 -w 1 -c 1 > "$B/tests/logs/optlibs_$tl.out" 2>&1 ||
        { cat "$B/tests/logs/optlibs_$tl.out"; fail "allreduce over $tl without the optional libraries"; }
    grep -q 'Out of bounds values : 0 OK' "$B/tests/logs/optlibs_$tl.out" ||
        fail "allreduce over $tl: wrong results"
    echo "allreduce over $tl, 3 ranks: results right"
done
out=$("$B/tools/rcoll-topo" 2>&1)
echo "$out" | head -n 1
echo "$out" | grep -q 'libhwloc.so.15 could not be loaded' || fail "rcoll-topo does not name the missing hwloc"
if grep -q '^#define HAVE_PMIX 1' "$B/config.h"; then
    out=$(env PMIX_RANK=0 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 2>&1)
    echo "$out" | grep 'PMIx' | head -n 1
    echo "$out" | grep -q 'PMIx: libpmix.so.2 could not be loaded' || fail "a PMIx launch does not name the missing libpmix"
fi
echo "without verbs, rdmacm, hwloc and PMIx: shm and tcp run, each missing part named"
EOF
