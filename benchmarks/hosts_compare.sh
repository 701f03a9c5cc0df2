#!/bin/sh
# rcoll, Open MPI and gloo side by side across two "hosts": network
# namespaces A and B joined by RAILS veth pairs (1 or 2, each its own
# subnet, 198.18.21.0/24 and 198.18.22.0/24), each tbf-limited to RATE each
# way (RATE none: unshaped); NR ranks per host (ranks 0..NR-1 on A). Every library gets every
# rail:
#   rcoll  benchmarks/rcoll-perf, default settings (shm inside a host, TCP
#          over every rail between hosts, the tuner's algorithms)
#   ompi   benchmarks/mpi_ref_perf.c under Open MPI's mpirun (run in A),
#          which starts its daemons through an rsh agent that runs
#          `ip netns exec HOST`; ob1 with btl tcp,vader,self over the rails'
#          subnets (ob1 stripes large messages over them); --bind-to none,
#          since each daemon would bind its first rank to core 0 and both
#          "hosts" share this machine's cores (8-24 ms per call so), and
#          mpi_yield_when_idle 1, what Open MPI sets itself when it knows
#          the ranks outnumber the cores (the hostfile's slots hide it:
#          six ranks polling without a yield took 64 ms per 64 KiB)
#   gloo   benchmarks/gloo_perf.py, one process per rank in its namespace,
#          GLOO_SOCKET_IFNAME listing the host's rails
# Each library is time-targeted the same way (calls per trial doubled
# until a trial lasts 0.1 s on the slowest rank, median of 5 trials), the
# libraries interleaved in each of ROUNDS rounds; the table gives each
# library's median time and the median over rounds of the ratio
# peer time / rcoll time (above 1: rcoll faster). Float32 sum; all-gather
# sizes are the whole gathered buffer (nccl-tests).
# Usage (root): benchmarks/hosts_compare.sh BUILDDIR [RATE] [NR] [ROUNDS] [RAILS]
#   e.g. benchmarks/hosts_compare.sh build 1gbit 3 5 2
# COLLS (default "allreduce allgather"), MINB/MAXB (64 KiB, 64 MiB), PY
# (a python with torch; default scripts/check-torch.sh's venv).
B=$(cd "${1:?usage: hosts_compare.sh BUILDDIR [RATE] [NR] [ROUNDS] [RAILS]}" && pwd)
RATE=${2:-1gbit}; NR=${3:-3}; ROUNDS=${4:-5}; RAILS=${5:-1}
COLLS=${COLLS:-"allreduce allgather"}
MINB=${MINB:-65536}; MAXB=${MAXB:-67108864}
PY=${PY:-/var/cache/rcoll-torch-venv/bin/python}
S=$(cd "$(dirname "$0")/.." && pwd)
N=$((2 * NR))
A=hcA$$; Z=hcB$$
command -v mpicc > /dev/null && command -v mpirun > /dev/null ||
    { echo "needs Open MPI (mpicc, mpirun)"; exit 1; }
"$PY" -c "import torch" 2> /dev/null || { echo "needs torch in $PY (PY=...)"; exit 1; }
tmp=$(mktemp -d)
cleanup() {
    ip netns del $A 2> /dev/null; ip netns del $Z 2> /dev/null
    rm -rf "/tmp/vader-$A" "/tmp/vader-$Z"
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
ip netns add $A && ip netns add $Z || exit 1
ifa=""; ifz=""; nets=""
for i in $(seq 1 "$RAILS"); do
    ip link add ca$i$$ type veth peer name cz$i$$ &&
        ip link set ca$i$$ netns $A && ip link set cz$i$$ netns $Z &&
        ip -n $A addr add 198.18.2$i.1/24 dev ca$i$$ &&
        ip -n $Z addr add 198.18.2$i.2/24 dev cz$i$$ &&
        ip -n $A link set ca$i$$ up && ip -n $Z link set cz$i$$ up &&
        { [ "$RATE" = none ] ||
          { ip netns exec $A tc qdisc add dev ca$i$$ root tbf rate "$RATE" burst 256kb latency 100ms &&
            ip netns exec $Z tc qdisc add dev cz$i$$ root tbf rate "$RATE" burst 256kb latency 100ms; }; } ||
        { echo "namespace/veth/tbf setup failed (needs root, iproute2, sch_tbf)"; exit 1; }
    ifa="$ifa${ifa:+,}ca$i$$"; ifz="$ifz${ifz:+,}cz$i$$"
    nets="$nets${nets:+,}198.18.2$i.0/24"
done
ip -n $A link set lo up && ip -n $Z link set lo up
mpicc -O2 -o "$tmp/mpi_ref_perf" "$S/benchmarks/mpi_ref_perf.c" || exit 1
cat > "$tmp/nsrsh" <<'EOF'
#!/bin/sh
# an rsh for mpirun: nsrsh HOST CMD... runs CMD in network namespace HOST;
# the namespaces share /dev/shm and the hostname, so each host's vader
# segments (named by hostname and local rank) get a directory of their own
h=$1; shift
mkdir -p "/tmp/vader-$h"
exec ip netns exec "$h" env OMPI_MCA_btl_vader_backing_directory="/tmp/vader-$h" sh -c "$*"
EOF
chmod +x "$tmp/nsrsh"
printf '%s slots=%d\n%s slots=%d\n' $A "$NR" $Z "$NR" > "$tmp/hosts"
port=30100
ns_of() { [ "$1" -lt "$NR" ] && echo $A || echo $Z; }
run_rcoll() { # COLL: rows "bytes us" of rank 0
    port=$((port + 1)); pids=""
    for r in $(seq 0 $((N - 1))); do
        ip netns exec "$(ns_of $r)" env RCOLL_ROOT=198.18.21.1:$port RCOLL_SIZE=$N \
            RCOLL_RANK=$r RCOLL_SECRET=00112233445566778899aabbccddeeff RCOLL_TIMEOUT=120 \
            "$B/benchmarks/rcoll-perf" "$1" -b $MINB -e $MAXB -f 4 -T 0.1 -R 5 -c 0 -P 0 \
            > "$tmp/rc.$r" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait $p; done
    awk '$1 ~ /^[0-9]+$/ { print $1, $6 }' "$tmp/rc.0"
}
run_ompi() {
    ip netns exec $A mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np $N \
        --hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/nsrsh" \
        --mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include "$nets" \
        --mca oob_tcp_if_include 198.18.21.0/24 \
        "$tmp/mpi_ref_perf" "$1" $MINB $MAXB 4 0 2 0.1 5 2> "$tmp/ompi.err" |
        awk '$1 ~ /^[0-9]+$/ { print $1, $2 }'
}
run_gloo() {
    port=$((port + 1)); pids=""
    for r in $(seq 0 $((N - 1))); do
        ns=$(ns_of $r); ifs=$ifa; [ $ns = $Z ] && ifs=$ifz
        ip netns exec $ns env PERF_RANK=$r MASTER_ADDR=198.18.21.1 MASTER_PORT=$port \
            GLOO_SOCKET_IFNAME=$ifs "$PY" "$S/benchmarks/gloo_perf.py" $N "$1" \
            $MINB $MAXB 4 0 2 0.1 5 > "$tmp/gl.$r" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait $p; done
    awk '$1 ~ /^[0-9]+$/ { print $1, $2 }' "$tmp/gl.0"
}
[ -n "${KEEP:-}" ] && echo "files in $tmp"
t0=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
    for c in $COLLS; do
        for lib in rcoll ompi gloo; do
            run_$lib $c | awk -v r=$round -v c=$c -v l=$lib '{ print r, c, l, NR, $1, $2 }' >> "$tmp/rows"
        done
    done
done
echo "2 hosts (namespaces) x $NR ranks, $RAILS rail(s) of $RATE each way, $ROUNDS rounds interleaved, $(( $(date +%s) - t0 )) s"
echo "time per call in us (median over rounds); ratio: peer / rcoll, median of the rounds' ratios (above 1: rcoll faster)"
python3 - "$tmp/rows" "$COLLS" <<'EOF'
import collections, statistics as st, sys
t = collections.defaultdict(dict)  # (coll, size index, lib) -> {round: us}
size = {}  # (coll, size index) -> bytes (rcoll's; a library rounds the
           # all-gather's blocks to whole elements its own way)
for l in open(sys.argv[1]):
    r, c, lib, i, b, us = l.split()
    t[(c, int(i), lib)][int(r)] = float(us)
    if lib == "rcoll" or (c, int(i)) not in size:
        size[(c, int(i))] = int(b)
for c in sys.argv[2].split():
    print("\n%s\n| bytes | rcoll | Open MPI | gloo | Open MPI / rcoll | gloo / rcoll |" % c)
    print("|---:|---:|---:|---:|---:|---:|")
    for i in sorted({k[1] for k in t if k[0] == c}):
        rc = t.get((c, i, "rcoll"), {})
        cells = []
        for lib in ("rcoll", "ompi", "gloo"):
            v = t.get((c, i, lib), {})
            cells.append("%.0f" % st.median(v.values()) if v else "-")
        for lib in ("ompi", "gloo"):
            v = t.get((c, i, lib), {})
            q = [v[r] / rc[r] for r in v if r in rc and rc[r] > 0]
            cells.append("%.2f" % st.median(q) if q else "-")
        b = size[(c, i)]
        h = "%d KiB" % (b >> 10) if b < (1 << 20) else "%d MiB" % (b >> 20)
        print("| %s | %s |" % (h, " | ".join(cells)))
EOF
