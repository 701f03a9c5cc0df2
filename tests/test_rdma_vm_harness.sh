#!/bin/sh
# tests/rdma-vm/run itself: the guest's exit status comes back, and a run
# interrupted with SIGTERM leaves no QEMU behind (it once did: the harness
# SIGKILLed timeout(1), orphaning QEMU). Skips (77) without QEMU.
# Usage: test_rdma_vm_harness.sh SRCDIR
S=$1
command -v qemu-system-x86_64 > /dev/null || { echo "no qemu-system-x86_64"; exit 77; }
before=$(pgrep -c qemu-system)
"$S/tests/rdma-vm/run" -t 200 sh -c 'echo guest says hi; exit 7'
rc=$?
[ $rc = 7 ] || { echo "exit status $rc, want 7"; exit 1; }
"$S/tests/rdma-vm/run" -t 200 sh -c 'sleep 150' &
pid=$!
i=0
while [ $i -lt 120 ] && [ "$(pgrep -c qemu-system)" -le "$before" ]; do sleep 0.5; i=$((i + 1)); done
[ "$(pgrep -c qemu-system)" -gt "$before" ] || { echo "the guest never started"; exit 1; }
sleep 2
kill -TERM $pid
wait $pid
sleep 1
after=$(pgrep -c qemu-system)
echo "qemu processes: $before before, $after after the interrupted run"
[ "$after" -le "$before" ]
