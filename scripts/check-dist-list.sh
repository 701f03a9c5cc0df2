#!/bin/sh
# Every source file git tracks under src/, tools/, include/ and tests/ (the
# fuzzers aside: tests/fuzz is shipped whole) must be named in Makefile.am,
# or `make dist` leaves it out and the tarball does not build.
# Usage: check-dist-list.sh SRCDIR. Outside a git checkout it has nothing
# to compare and says so.
S=${1:-.}
cd "$S" || exit 2
if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    echo "check-dist-list: $S is not a git checkout; nothing to compare"
    exit 0
fi
miss=0 n=0
for f in $(git ls-files -co --exclude-standard 'src/*.[ch]' 'tools/*.[ch]' \
               'include/*.h' 'tests/*.[ch]' | grep -v '^tests/fuzz/'); do
    n=$((n + 1))
    grep -qF "$f" Makefile.am || { echo "not in Makefile.am: $f"; miss=$((miss + 1)); }
done
echo "check-dist-list: $n files, $miss not named in Makefile.am"
[ "$miss" -eq 0 ]
