#!/bin/sh
# Builds rcoll and runs the whole test suite: make check (the CPU suite on
# this host), then make check-rdma (the verbs transport against the
# kernel's soft-iWARP and soft-RoCE in a QEMU guest; RCOLL_SKIP_RDMA=1 skips
# it), then the sanitizer and memcheck jobs (scripts/check-sanitizers.sh;
# RCOLL_SKIP_SANITIZERS=1 skips them), then the PyTorch backend's tests
# (scripts/check-torch.sh: torch 2.x from PyPI in a virtual environment;
# RCOLL_SKIP_TORCH=1 skips them). The last line is "N passed, M failed"
# over all of them.
set -e
cd "$(dirname "$0")/.."
sh scripts/build.sh
cd build
tmp=$(mktemp -d)
run() { # run TARGET: make TARGET, output shown and kept, status in $tmp/TARGET.rc
    { st=0; make -j"$(nproc)" "$1" 2>&1 || st=$?; echo $st > "$tmp/$1.rc"; } |
        grep -v -E '^make(\[[0-9]+\])?: (Entering|Leaving)' | tee "$tmp/$1.log"
}
count() { # count TARGET passed|failed: that number from its summary line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/$1.log" | tail -n 1)
    n=$(echo "$line" | sed -n "s/.*\b\([0-9][0-9]*\) $2.*/\1/p")
    echo "${n:-0}"
}
t0=$(date +%s)
run check
echo "== make check took $(( $(date +%s) - t0 )) s"
p=$(count check passed); f=$(count check failed)
[ "$(cat "$tmp/check.rc" 2> /dev/null)" = 0 ] || [ "$f" -gt 0 ] || f=$((f + 1))
if [ "${RCOLL_SKIP_RDMA:-0}" != 1 ]; then
    echo "== make check-rdma (RDMA verbs in a QEMU guest)"
    t0=$(date +%s)
    run check-rdma
    echo "== make check-rdma took $(( $(date +%s) - t0 )) s"
    rp=$(count check-rdma passed); rf=$(count check-rdma failed)
    rrc=$(cat "$tmp/check-rdma.rc" 2> /dev/null || echo missing)
    [ "$rrc" = 0 ] || [ "$rf" -gt 0 ] || rf=$((rf + 1))
    p=$((p + rp)); f=$((f + rf))
fi
if [ "${RCOLL_SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== sanitizers: ASan+UBSan, TSan, valgrind (scripts/check-sanitizers.sh)"
    t0=$(date +%s)
    st=0
    sh ../scripts/check-sanitizers.sh 2>&1 | tee "$tmp/san.log" || true
    echo "== sanitizers took $(( $(date +%s) - t0 )) s"
    sp=$(count san passed); sf=$(count san failed)
    grep -qE '^[0-9]+ passed, [0-9]+ failed' "$tmp/san.log" || sf=$((sf + 1))
    p=$((p + sp)); f=$((f + sf))
fi
if [ "${RCOLL_SKIP_TORCH:-0}" != 1 ]; then
    echo "== PyTorch backend: bindings/torch tests against gloo (scripts/check-torch.sh)"
    t0=$(date +%s)
    sh ../scripts/check-torch.sh 2>&1 | tee "$tmp/torch.log" || true
    echo "== PyTorch backend took $(( $(date +%s) - t0 )) s"
    tp=$(count torch passed); tf=$(count torch failed)
    grep -qE '^[0-9]+ passed, [0-9]+ failed' "$tmp/torch.log" || tf=$((tf + 1))
    p=$((p + tp)); f=$((f + tf))
fi
rm -rf "$tmp"
echo "$p passed, $f failed"
[ "$f" = 0 ]
