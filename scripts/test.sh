#!/bin/sh
# Builds rcoll and runs the whole test suite: make check (the CPU suite on
# this host), then make check-rdma (the verbs transport against the
# kernel's soft-iWARP and soft-RoCE in a QEMU guest; RCOLL_SKIP_RDMA=1 skips
# it), then the sanitizer and memcheck jobs (scripts/check-sanitizers.sh;
# RCOLL_SKIP_SANITIZERS=1 skips them), then the PyTorch backend's tests
# (scripts/check-torch.sh: torch 2.x from PyPI in a virtual environment,
# made in the background during the sanitizer jobs; RCOLL_SKIP_TORCH=1
# skips them). Each stage counts by its own closing
# summary only, and a stage whose summary is missing, or that exits
# non-zero without a failure counted, is a failure. The skipped tests are
# listed with their reasons, then the last line is
# "N passed, M failed, K skipped" over all of them.
set -e
cd "$(dirname "$0")/.."
sh scripts/build.sh
cd build
tmp=$(mktemp -d)
set +e
P=0; F=0; K=0
# stage NAME CMD...: runs it, output shown and kept, status in $tmp/NAME.rc
stage() {
    name=$1; shift
    { st=0; "$@" 2>&1 || st=$?; echo $st > "$tmp/$name.rc"; } |
        grep -v -E '^make(\[[0-9]+\])?: (Entering|Leaving)' | tee "$tmp/$name.log"
}
# tally NAME last|any: adds the stage's summary ("N passed, M failed[, K
# skipped]": its last line for scripts, its last such line for make
# targets, whose own error lines may follow it)
tally() {
    if [ "$2" = last ]; then
        line=$(tail -n 1 "$tmp/$1.log" | grep -E '^[0-9]+ passed, [0-9]+ failed')
    else
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/$1.log" | tail -n 1)
    fi
    p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    k=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    p=${p:-0}; f=${f:-0}; k=${k:-0}
    rc=$(cat "$tmp/$1.rc" 2> /dev/null || echo missing)
    if [ -z "$line" ]; then
        echo "== $1: no closing summary (the stage died?): counted as a failure"
        f=$((f + 1))
    elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        echo "== $1: exit status $rc with no failure counted: counted as a failure"
        f=$((f + 1))
    fi
    P=$((P + p)); F=$((F + f)); K=$((K + k))
}
t0=$(date +%s)
stage check make -j"$(nproc)" check
echo "== make check took $(( $(date +%s) - t0 )) s"
tally check any
if [ "${RCOLL_SKIP_RDMA:-0}" != 1 ]; then
    echo "== make check-rdma (RDMA verbs in a QEMU guest)"
    t0=$(date +%s)
    stage check-rdma make -j"$(nproc)" check-rdma
    echo "== make check-rdma took $(( $(date +%s) - t0 )) s"
    tally check-rdma any
fi
# the PyTorch stage's environment (a download of a few GB) is made in the
# background while the sanitizer jobs build and run
venvpid=
if [ "${RCOLL_SKIP_TORCH:-0}" != 1 ]; then
    sh ../scripts/check-torch.sh --venv > "$tmp/venv.out" 2>&1 &
    venvpid=$!
fi
if [ "${RCOLL_SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== sanitizers: ASan+UBSan, TSan, valgrind (scripts/check-sanitizers.sh)"
    t0=$(date +%s)
    stage san sh ../scripts/check-sanitizers.sh
    echo "== sanitizers took $(( $(date +%s) - t0 )) s"
    tally san last
fi
if [ "${RCOLL_SKIP_TORCH:-0}" != 1 ]; then
    echo "== PyTorch backend: bindings/torch tests against gloo (scripts/check-torch.sh)"
    t0=$(date +%s)
    wait $venvpid
    cat "$tmp/venv.out"
    stage torch sh ../scripts/check-torch.sh
    echo "== PyTorch backend took $(( $(date +%s) - t0 )) s"
    tally torch last
fi
skips=$(cat "$tmp"/*.log 2> /dev/null | grep -E '^SKIP ')
if [ -n "$skips" ]; then
    echo "skipped (with their reasons):"
    echo "$skips" | sed 's/^/  /'
fi
rm -rf "$tmp"
echo "$P passed, $F failed, $K skipped"
[ "$F" = 0 ]
