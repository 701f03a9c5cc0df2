#!/bin/sh
# The generated reference pages are complete and current:
# - docs/variables.md is what `rcoll-info -c --markdown` prints from the
#   parameter table (which refuses a variable without documentation);
# - doxygen reads include/rcoll.h without a warning (every function, macro,
#   type and parameter documented), and every function librcoll.so exports
#   has its man page and its entry in rcoll.h(3).
# Usage: test_docs.sh BUILDDIR SRCDIR. Exit 77 (skip) only for the doxygen
# part when doxygen is not installed (scripts/install-deps.sh installs it).
B=$1; S=$2
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
"$B/tools/rcoll-info" -c --markdown > "$out/variables.md" || exit 1
if ! diff -u "$S/docs/variables.md" "$out/variables.md"; then
    echo "docs/variables.md differs from the parameter table: run"
    echo "  tools/rcoll-info -c --markdown > ../docs/variables.md"
    exit 1
fi
echo "docs/variables.md: $(grep -c '^<a id=' "$out/variables.md") variables, current"
lib="$B/.libs/librcoll.so"
syms=$(nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^rcoll_/ { print $3 }')
[ -n "$syms" ] || { echo "no rcoll_ symbols exported by $lib"; exit 1; }
command -v doxygen > /dev/null || { echo "doxygen not installed"; exit 77; }
RCOLL_SRCDIR="$S" RCOLL_APIDIR="$out" doxygen "$S/docs/Doxyfile" || exit 1
if [ -s "$out/doxygen-warnings.txt" ]; then
    cat "$out/doxygen-warnings.txt"
    echo "include/rcoll.h: doxygen warns (above)"
    exit 1
fi
page="$out/man/man3/rcoll.h.3"
bad=0; n=0
for s in $syms; do
    n=$((n + 1))
    if [ ! -f "$out/man/man3/$s.3" ] || ! grep -q "^\.SS \".* $s (" "$page"; then
        echo "$s is exported but has no documented entry in rcoll.h(3)"
        bad=1
    fi
done
[ $bad = 0 ] || exit 1
echo "rcoll.h(3): every one of the $n exported functions documented, no warnings"
