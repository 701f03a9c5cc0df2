#!/bin/sh
# Builds rcoll and runs the whole test suite (make check); the last line is
# "N passed, M failed".
set -e
cd "$(dirname "$0")/.."
sh scripts/build.sh
cd build
rcfile=$(mktemp)
{ make -j"$(nproc)" check 2>&1; echo $? > "$rcfile"; } |
    grep -v -E '^make(\[[0-9]+\])?: (Entering|Leaving)'
rc=$(cat "$rcfile")
rm -f "$rcfile"
exit "$rc"
