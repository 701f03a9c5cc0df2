#!/bin/sh
# The PyTorch backend's tests (bindings/torch/tests, pytest): installs torch
# 2.x from PyPI into a virtual environment (RCOLL_TORCH_VENV, default
# /var/cache/rcoll-torch-venv, kept between runs), installs this build's
# librcoll into build/torch-root (DESTDIR), builds and installs rcoll_torch against
# it (pip install ./bindings/torch), then runs the tests against gloo.
# Run from the build directory (scripts/test.sh does). RCOLL_TORCH_SPEC
# picks torch ("torch" by default: the current release). The last line is
# "N passed, M failed"; skipped tests are counted in neither.
set -u
build=$(pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
venv=${RCOLL_TORCH_VENV:-/var/cache/rcoll-torch-venv}
spec=${RCOLL_TORCH_SPEC:-torch}
# installed with DESTDIR (libtool cannot relink librcoll-mpi for a
# prefix other than the configured one); the prefix is the staged one
root=$build/torch-root
prefix=$root$(sed -n 's/^prefix=//p' "$build/rcoll.pc")
fail() { echo "check-torch: $1"; echo "0 passed, 1 failed"; exit 1; }
t0=$(date +%s)

if ! "$venv/bin/python" -c "import torch, pytest, pytest_timeout" 2> /dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
    "$venv/bin/pip" install -q --upgrade pip > /dev/null 2>&1
    "$venv/bin/pip" install -q "$spec" pytest pytest-timeout numpy ||
        fail "pip install $spec failed"
fi
"$venv/bin/python" -c "import torch, sys; sys.exit(0 if int(torch.__version__.split('.')[0]) >= 2 else 1)" ||
    fail "torch in $venv is not 2.x"
echo "check-torch: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') in $venv ($(( $(date +%s) - t0 )) s)"

t1=$(date +%s)
rm -rf "$root"
make install DESTDIR="$root" > torch-install.out 2>&1 ||
    { tail -20 torch-install.out; fail "make install DESTDIR=$root failed"; }
rm -rf "$src/bindings/torch/build"
RCOLL_HOME=$prefix MAX_JOBS=$(nproc) "$venv/bin/pip" install -q \
    --no-build-isolation --force-reinstall --no-deps "$src/bindings/torch" \
    > torch-build.out 2>&1 ||
    { tail -40 torch-build.out; fail "building rcoll_torch failed"; }
rm -rf "$src/bindings/torch/build"
echo "check-torch: built rcoll_torch ($(( $(date +%s) - t1 )) s)"

t2=$(date +%s)
cd "$src/bindings/torch/tests" || fail "no tests directory"
"$venv/bin/python" -m pytest -q -rs --timeout=600 -p no:cacheprovider \
    --durations=5 . 2>&1 | tee "$build/torch-tests.out"
echo "check-torch: tests took $(( $(date +%s) - t2 )) s"
line=$(grep -E '^=*.*[0-9]+ (passed|failed|error)' "$build/torch-tests.out" | tail -n 1)
n() { echo "$line" | sed -n "s/.*\b\([0-9][0-9]*\) $1.*/\1/p"; }
p=$(n passed); f=$(n failed); e=$(n error); k=$(n skipped)
p=${p:-0}; f=$(( ${f:-0} + ${e:-0} )); k=${k:-0}
[ -n "$line" ] || f=$((f + 1))
# each skip with its reason (pytest -rs), as the other stages list theirs
grep -E '^SKIPPED' "$build/torch-tests.out" | sed 's/^SKIPPED/SKIP  torch:/'
echo "$p passed, $f failed, $k skipped"
[ "$f" = 0 ]
