#!/bin/sh
# The main job: builds rcoll and runs the 4-rank all-reduce, all-gather and
# broadcast benchmarks on this host (nccl-tests columns, results checked).
set -e
cd "$(dirname "$0")/.."
sh scripts/build.sh
cd build
for coll in allreduce allgather broadcast; do
    ./tools/rcoll-run -n 4 ./benchmarks/rcoll-perf $coll -b 8 -e 64M -f 4 -c 1
done
