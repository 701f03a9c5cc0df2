#!/bin/sh
# Topology detection: rcoll-topo with no file shows this host as hwloc
# detects it; RCOLL_TOPO_DUMP_FILE makes rank 0 of a job write the
# topology in use, which rcoll-topo --xml reads back to the same answer;
# with RCOLL_TOPO_FILE set the dump is that file. Skips (77) in a build
# without hwloc. Usage: test_topo_detect.sh BUILDDIR SRCDIR
B=$1; S=$2
"$B/tools/rcoll-info" | grep -Eq "^ *hwloc +yes" || { echo "built without hwloc"; exit 77; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
"$B/tools/rcoll-topo" > "$d/detected" || { echo "detection failed"; exit 1; }
cat "$d/detected"
head -n 1 "$d/detected" | grep -Eq "^topology detected by hwloc: [1-9][0-9]* packages" ||
    { echo "no package detected"; exit 1; }
RCOLL_TOPO_DUMP_FILE="$d/dump.xml" RCOLL_DEBUG=info RCOLL_DEBUG_SUBSYS=init \
    "$B/tools/rcoll-run" -n 2 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 -n 1 -w 0 \
    > "$d/job" 2>&1 || { cat "$d/job"; exit 1; }
grep "topology (" "$d/job"
grep -q "topology (detected by hwloc).*written to $d/dump.xml" "$d/job" || exit 1
"$B/tools/rcoll-topo" --xml "$d/dump.xml" > "$d/reread" || exit 1
tail -n +2 "$d/detected" > "$d/a"; tail -n +2 "$d/reread" > "$d/b"
cmp "$d/a" "$d/b" || { diff "$d/a" "$d/b"; echo "the dump reads back differently"; exit 1; }
RCOLL_TOPO_FILE="$S/tests/topo/a.xml" RCOLL_TOPO_DUMP_FILE="$d/dump_a.xml" \
    "$B/tools/rcoll-run" -n 2 "$B/benchmarks/rcoll-perf" allreduce -b 8 -e 8 -n 1 -w 0 \
    > "$d/job_a" 2>&1 || { cat "$d/job_a"; exit 1; }
cmp "$S/tests/topo/a.xml" "$d/dump_a.xml" || { echo "RCOLL_TOPO_FILE was not dumped as read"; exit 1; }
echo "detected topology dumped and read back identically"
