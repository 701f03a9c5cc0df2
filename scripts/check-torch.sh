#!/bin/sh
# The PyTorch backend's tests (bindings/torch/tests, pytest), on the wheel a
# user installs:
#  1. a virtual environment with torch 2.x from PyPI, the test runner
#     (pytest, pytest-timeout) and numpy (torch's *_object_list calls need
#     it, and torch does not depend on it) only (RCOLL_TORCH_VENV, default
#     /var/cache/rcoll-torch-venv, kept between runs; RCOLL_TORCH_SPEC picks
#     torch, "torch" by default: the current release);
#  2. `pip wheel --no-build-isolation ./bindings/torch`: builds its own
#     librcoll from this tree and bundles it; the wheel is checked (the
#     library inside, rpath $ORIGIN, no verbs/hwloc/PMIx dependency, the
#     torch.distributed.backends entry point);
#     an editable install (pip install -e) reusing the wheel's librcoll
#     build (RCOLL_LIB_BUILD, setup.py): the library beside _C in the tree
#     (test_launch's location, mp.spawn);
#  3. the wheel installed into the environment, the whole suite run there
#     against gloo (torchrun and mp.spawn included), from outside the tree
#     and with no RCOLL_HOME or LD_LIBRARY_PATH;
#  4. the developers' build against an installed librcoll (this build's
#     `make install DESTDIR=build/torch-root`, RCOLL_HOME=its prefix) into a
#     separate directory, and the launch tests that find and load the
#     library (its location, mp.spawn, a host without RDMA libraries) run
#     on it.
# Run from the build directory (scripts/test.sh does). The last line is
# "N passed, M failed, K skipped"; each stage prints its time.
# check-torch.sh --venv makes step 1's environment only (scripts/test.sh
# runs it in the background, during the sanitizer jobs: most of its time
# is the download).
set -u
build=$(pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
venv=${RCOLL_TORCH_VENV:-/var/cache/rcoll-torch-venv}
spec=${RCOLL_TORCH_SPEC:-torch}
py=$venv/bin/python
fail() { echo "check-torch: $1"; echo "0 passed, 1 failed"; exit 1; }
since() { echo "$(( $(date +%s) - $1 )) s"; }
unset RCOLL_HOME LD_LIBRARY_PATH PYTHONPATH
t0=$(date +%s)
outs="$build/torch-tests.out $build/torch-editable-tests.out $build/torch-dev-tests.out"
# shellcheck disable=SC2086
[ "${1:-}" = --venv ] || rm -f $outs # a stage that does not run must not count an earlier run's

if ! "$py" -c "import torch, pytest, pytest_timeout, numpy" 2> /dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
    "$venv/bin/pip" install -q --upgrade pip > /dev/null 2>&1
    "$venv/bin/pip" install -q "$spec" pytest pytest-timeout numpy ||
        fail "pip install $spec failed"
fi
if [ "${1:-}" = --venv ]; then
    echo "check-torch: the environment $venv is ready ($(since $t0))"
    exit 0
fi
"$py" -c "import torch, sys; sys.exit(0 if int(torch.__version__.split('.')[0]) >= 2 else 1)" ||
    fail "torch in $venv is not 2.x"
echo "check-torch: torch $("$py" -c 'import torch; print(torch.__version__)') in $venv ($(since $t0))"

# 2. the wheel
t1=$(date +%s)
wheels=$build/torch-wheel
export RCOLL_LIB_BUILD=$build/torch-librcoll
rm -rf "$wheels" "$src/bindings/torch/build" "$RCOLL_LIB_BUILD"
MAX_JOBS=$(nproc) "$venv/bin/pip" wheel -q --no-build-isolation --no-deps \
    -w "$wheels" "$src/bindings/torch" > "$build/torch-wheel.out" 2>&1 ||
    { tail -40 "$build/torch-wheel.out"; fail "pip wheel ./bindings/torch failed"; }
whl=$(ls "$wheels"/rcoll_torch-*.whl 2> /dev/null | head -n 1)
[ -n "$whl" ] || fail "no wheel in $wheels"
echo "check-torch: built $(basename "$whl") ($(ls -s --block-size=K "$whl" | cut -d' ' -f1), $(since $t1))"
"$py" - "$whl" << 'EOF' || fail "the wheel is not self-contained"
import subprocess, sys, tempfile, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
libs = [n for n in names if n.startswith("rcoll_torch/librcoll.so")]
ext = [n for n in names if n.startswith("rcoll_torch/_C") and n.endswith(".so")]
eps = [n for n in names if n.endswith("entry_points.txt")]
assert libs and ext, f"no bundled librcoll or extension in {names}"
assert eps and "torch.distributed.backends" in z.read(eps[0]).decode(), "no entry point"
d = tempfile.mkdtemp()
def dyn(n):
    return subprocess.check_output(["readelf", "-d", z.extract(n, d)], text=True)
e, l = dyn(ext[0]), dyn(libs[0])
assert "$ORIGIN" in e and libs[0].split("/")[-1] in e, e
for dep in ("ibverbs", "rdmacm", "hwloc", "pmix"):
    assert dep not in l, f"the bundled librcoll needs {dep}"
print(f"check-torch: wheel holds {libs[0]} and {ext[0]} (rpath $ORIGIN); "
      "the library needs no verbs, rdmacm, hwloc or PMIx; entry point "
      "torch.distributed.backends: rcoll")
EOF

# 2b. an editable install (pip install -e; librcoll is the wheel's build,
# only the extension is compiled again): the library lands in the tree
# beside _C
te=$(date +%s)
pkgsrc=$src/bindings/torch/rcoll_torch
if MAX_JOBS=$(nproc) "$venv/bin/pip" install -q --no-build-isolation --no-deps \
        -e "$src/bindings/torch" > "$build/torch-editable.out" 2>&1; then
    (cd "$src/bindings/torch/tests" && "$py" -m pytest -q -rs --timeout=300 \
        -p no:cacheprovider test_launch.py -k "librcoll_location or mp_spawn" 2>&1) |
        tee "$build/torch-editable-tests.out"
else
    tail -40 "$build/torch-editable.out"
fi
"$venv/bin/pip" uninstall -q -y rcoll_torch > /dev/null 2>&1
rm -rf "$src/bindings/torch/build" "$pkgsrc"/_C*.so "$pkgsrc"/librcoll.so* "$RCOLL_LIB_BUILD"
unset RCOLL_LIB_BUILD
echo "check-torch: the editable install took $(since $te)"

# 3. the suite on the installed wheel
t2=$(date +%s)
"$venv/bin/pip" install -q --force-reinstall --no-deps "$whl" > "$build/torch-install.out" 2>&1 ||
    { tail -20 "$build/torch-install.out"; fail "pip install $(basename "$whl") failed"; }
echo "check-torch: the environment holds $("$venv/bin/pip" list 2> /dev/null | tail -n +3 | wc -l) packages: torch's dependencies, pytest, pytest-timeout, numpy, rcoll_torch"
cd "$src/bindings/torch/tests" || fail "no tests directory"
"$py" -m pytest -q -rs --timeout=600 -p no:cacheprovider \
    --durations=5 . 2>&1 | tee "$build/torch-tests.out"
echo "check-torch: tests on the wheel took $(since $t2)"

# 4. the developers' build against an installed librcoll
t3=$(date +%s)
root=$build/torch-root
prefix=$root$(sed -n 's/^prefix=//p' "$build/rcoll.pc")
dev=$build/torch-dev
rm -rf "$root" "$dev" "$src/bindings/torch/build"
if make -C "$build" install DESTDIR="$root" > "$build/torch-dev.out" 2>&1 &&
    RCOLL_HOME=$prefix MAX_JOBS=$(nproc) "$venv/bin/pip" install -q \
        --no-build-isolation --no-deps --target "$dev" "$src/bindings/torch" \
        >> "$build/torch-dev.out" 2>&1; then
    rm -rf "$src/bindings/torch/build"
    PYTHONPATH=$dev RCOLL_EXPECT_LIBDIR=$prefix/lib "$py" -m pytest -q -rs \
        --timeout=300 -p no:cacheprovider test_launch.py \
        -k "librcoll_location or mp_spawn or without_rdma" 2>&1 | tee "$build/torch-dev-tests.out"
else
    tail -40 "$build/torch-dev.out"
fi
rm -rf "$src/bindings/torch/build"
echo "check-torch: the RCOLL_HOME build took $(since $t3)"

p=0; f=0; k=0
num() { v=$(echo "$line" | sed -n "s/.*\b\([0-9][0-9]*\) $1.*/\1/p"); echo "${v:-0}"; }
for out in $outs; do
    line=$(grep -E '^=*.*[0-9]+ (passed|failed|error)' "$out" 2> /dev/null | tail -n 1)
    p=$((p + $(num passed)))
    f=$((f + $(num failed) + $(num error)))
    k=$((k + $(num skipped)))
    [ -n "$line" ] || { f=$((f + 1)); echo "FAIL  torch: no pytest summary in $(basename "$out")"; }
    # each skip with its reason (pytest -rs), as the other stages list theirs
    grep -E '^SKIPPED' "$out" 2> /dev/null | sed 's/^SKIPPED/SKIP  torch:/'
done
echo "$p passed, $f failed, $k skipped"
[ "$f" = 0 ]
