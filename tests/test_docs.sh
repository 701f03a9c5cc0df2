#!/bin/sh
# The generated reference pages are complete and current:
# - docs/variables.md is what `rcoll-info -c --markdown` prints from the
#   parameter table (which refuses a variable without documentation);
# - README.md's table of collectives names exactly the collectives that
#   rcoll-info -a lists algorithms for;
# - every relative link of README.md and docs/*.md leads to a file;
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
"$B/tools/rcoll-info" -a > "$out/algos.txt" || exit 1
python3 - "$S/README.md" "$out/algos.txt" <<'PY' || exit 1
import re, sys
names = {"all-reduce": "allreduce", "all-gather": "allgather",
         "broadcast": "broadcast", "reduce-scatter": "reduce_scatter",
         "reduce": "reduce", "all-to-all": "alltoall",
         "all-to-all-v": "alltoallv", "gather": "gather",
         "scatter": "scatter", "barrier": "barrier", "send/recv": "send",
         "recv": "recv"}
readme = open(sys.argv[1]).read()
table = readme[readme.index("| | shared memory |"):].split("\n\n")[0]
got = set()
for row in table.splitlines()[2:]:
    first = row.strip("|").split("|")[0].strip()
    for part in re.sub(r"\(.*\)", "", first).split(","):
        part = part.strip()
        if part not in names:
            sys.exit("README.md's table has an unknown row: %r" % part)
        got.add(names[part])
        if part == "send/recv":
            got.add("recv")
want = set(l.split()[0] for l in open(sys.argv[2]) if l.startswith("  "))
if got != want:
    sys.exit("README.md's table and rcoll-info -a differ: only in the "
             "README %s, only in rcoll-info %s"
             % (sorted(got - want), sorted(want - got)))
print("README.md: its table names the %d collectives of rcoll-info -a"
      % len(want))
PY
python3 - "$S" <<'PY' || exit 1
import glob, os, re, sys
S = sys.argv[1]
bad = n = 0
for page in [os.path.join(S, "README.md")] + sorted(glob.glob(os.path.join(S, "docs", "*.md"))):
    text = re.sub(r"```.*?```", "", open(page).read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        n += 1
        path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#")[0]))
        if not os.path.exists(path):
            print("%s: link to %s: no such file" % (os.path.relpath(page, S), target))
            bad += 1
print("links: %d relative links in README.md and docs/, %d broken" % (n, bad))
sys.exit(1 if bad else 0)
PY
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
