#!/bin/sh
# Builds the pieces of the RDMA test guest once, into $RCOLL_VM_CACHE
# (default /var/cache/rcoll-rdma-vm): Debian's own kernel and modules, an
# out-of-tree soft-iWARP module (Debian builds its kernel without siw) and a
# busybox initramfs that mounts the host's root read-only over virtio-9p.
# Needs the packages scripts/install-deps.sh installs (qemu-system-x86,
# busybox-static, cpio, kmod, xz-utils, linux-headers-<abi>) and apt access.
# Prints the cache directory; safe to run again (finished pieces are kept).
set -eu
CACHE=${RCOLL_VM_CACHE:-/var/cache/rcoll-rdma-vm}
ABI=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -n 1)
[ -n "$ABI" ] || { echo "build-cache: cannot find the kernel ABI of linux-image-amd64" >&2; exit 1; }
mkdir -p "$CACHE"
cd "$CACHE"
if [ -f "$CACHE/ready" ] && [ "$(cat "$CACHE/ready")" = "$ABI" ]; then
    echo "$CACHE"; exit 0
fi
log() { echo "build-cache: $*" >&2; }
VER=$(apt-cache policy "linux-image-$ABI" | sed -n 's/.*Candidate: //p')
SRCMAJ=$(echo "$ABI" | sed 's/^\([0-9]*\.[0-9]*\).*/\1/')
[ -d "/usr/src/linux-headers-$ABI" ] || {
    log "installing linux-headers-$ABI (to build siw.ko)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "linux-headers-$ABI" >&2; }
if [ ! -d root/lib/modules/$ABI/kernel ]; then
    log "kernel $ABI ($VER)"
    rm -rf root dl && mkdir -p dl root
    (cd dl && apt-get download -q "linux-image-$ABI=$VER" >&2)
    dpkg -x dl/linux-image-*.deb root
    rm -rf dl
fi
if [ ! -f "root/lib/modules/$ABI/updates/siw.ko" ]; then
    log "building siw.ko from linux-source-$SRCMAJ"
    rm -rf src && mkdir -p src
    (cd src && apt-get download -q "linux-source-$SRCMAJ=$VER" >&2 &&
     dpkg -x linux-source-*.deb x && rm -f linux-source-*.deb &&
     tar -xJf x/usr/src/linux-source-$SRCMAJ.tar.xz "linux-source-$SRCMAJ/drivers/infiniband/sw/siw" &&
     rm -rf x)
    make -s -C "/usr/src/linux-headers-$ABI" M="$CACHE/src/linux-source-$SRCMAJ/drivers/infiniband/sw/siw" \
        CONFIG_RDMA_SIW=m modules >&2
    mkdir -p "root/lib/modules/$ABI/updates"
    cp "src/linux-source-$SRCMAJ/drivers/infiniband/sw/siw/siw.ko" "root/lib/modules/$ABI/updates/"
    rm -rf src
fi
depmod -b "$CACHE/root" "$ABI"
# the initramfs: busybox plus the modules that reach the 9p root
rm -rf initrd && mkdir -p initrd/bin initrd/mods
cp /bin/busybox initrd/bin/busybox
for m in virtio_pci 9pnet_virtio 9p overlay; do
    modprobe -d "$CACHE/root" -S "$ABI" --show-depends $m | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' > initrd/mods/order.full
: > initrd/mods/order
while read -r f; do
    b=$(basename "$f")
    case $b in *.xz) xz -dc "$f" > "initrd/mods/${b%.xz}"; b=${b%.xz} ;; *) cp "$f" initrd/mods/ ;; esac
    echo "$b" >> initrd/mods/order
done < initrd/mods/order.full
rm initrd/mods/order.full
cat > initrd/init <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc 2>/dev/null || { mkdir -p /proc; mount -t proc proc /proc; }
mkdir -p /sys /dev /lower /upper /newroot
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r m; do insmod /mods/$m 2>/dev/null; done < /mods/order
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower || { echo "init: cannot mount the host root"; poweroff -f; }
mount -t tmpfs -o size=75% tmpfs /upper
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot || { echo "init: overlay failed"; poweroff -f; }
mkdir -p /newroot/run/rcoll-vm
mount -t 9p -o trans=virtio,version=9p2000.L xfer /newroot/run/rcoll-vm || { echo "init: cannot mount the transfer share"; poweroff -f; }
umount /sys /proc 2>/dev/null
mount --move /dev /newroot/dev 2>/dev/null
exec switch_root /newroot /bin/sh /run/rcoll-vm/stage2
INIT
chmod +x initrd/init
(cd initrd && mkdir -p proc sys dev && find . | cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.img)
rm -rf initrd
cp "root/boot/vmlinuz-$ABI" vmlinuz
echo "$ABI" > ready
log "done: $(du -sh "$CACHE" | cut -f1) in $CACHE"
echo "$CACHE"
