# The guest's second stage, run as PID 1 from the host's own root (read-only
# 9p plus a tmpfs overlay): mounts, RDMA modules, two namespace "hosts", the
# command, its status back through the transfer share, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
X=/run/rcoll-vm
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# /tmp stays the host's (through the overlay): a build tree may live there
exec > /dev/ttyS1 2>&1 < /dev/null
. $X/env
fail() { echo "rdma-vm guest: $*"; echo 1 > $X/rc; sync; busybox poweroff -f; }
# (tcp_diag: ss's per-connection byte counts, check-rdma's evidence of
# which device carried the traffic)
modprobe -d "$CACHE/root" -a crc32_generic siw rdma_rxe rdma_ucm ib_uverbs veth bridge dummy sch_netem tcp_diag ||
    fail "loading modules"
ip link set lo up
hostname rcoll-vm
net() { # net BRIDGE-NUMBER VETH-PREFIX TYPE: device TYPE$i in namespace h$i
    ip link add br$1 type bridge && ip link set br$1 up || return 1
    for i in 0 1; do
        ip netns list 2> /dev/null | grep -qw h$i || { ip netns add h$i && ip -n h$i link set lo up; } || return 1
        ip link add $2$i type veth peer name p$1$i && ip link set p$1$i master br$1 up &&
        ip link set $2$i netns h$i && ip -n h$i addr add 10.77.$1.$((i + 1))/24 dev $2$i &&
        ip -n h$i link set $2$i up &&
        ip netns exec h$i rdma link add $3$i type $3 netdev $2$i || return 1
    done
}
net 0 v siw || fail "setting up siw"
# rxe (6.1) receives only in the initial namespace: one soft-RoCE device on a
# dummy link there (10.77.9.1), its ranks connect over the device's loopback
ip link add d9 type dummy && ip addr add 10.77.9.1/24 dev d9 && ip link set d9 up &&
    rdma link add rxe0 type rxe netdev d9 || fail "setting up rxe"
ulimit -l unlimited
cd "$CWD" || fail "no $CWD in the guest"
sh $X/cmd
echo $? > $X/rc
sync
busybox poweroff -f
