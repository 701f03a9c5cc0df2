#!/usr/bin/env python3
"""Writes the test topologies of tests/topo in hwloc 2's XML format (the
layout `lstopo --of xml` exports: I/O objects below the package they hang
from, host bridge -> root port -> switch ports -> devices; NVLink as the
"NVLinkBandwidth" distances matrix over the GPUs' gp indexes).

  a.xml  8 GPUs with NVLink (full mesh inside a socket, GPU i <-> i+4
         across), 2 sockets, 2 NICs: each NIC on the PCIe switch of 2 of
         its socket's 4 GPUs
  b.xml  8 GPUs on an NVSwitch (every pair), 8 NICs, one per GPU on the
         same leaf switch; leaf switches in pairs below a parent switch
  c.xml  2 sockets, 4 GPUs on PCIe only (a root port each), 1 NIC
  d.xml  CPU only, 2 sockets, an eRDMA NIC on each
Run it to remake them; the files are committed.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class W:
    def __init__(self):
        self.lines, self.gp, self.depth = [], 0, 1

    def open(self, typ, empty=False, **attrs):
        self.gp += 1
        a = " ".join(f'{k}="{v}"' for k, v in
                     [("type", typ), ("gp_index", self.gp)] +
                     list(attrs.items()))
        self.lines.append("  " * self.depth + f"<object {a}"
                          + ("/>" if empty else ">"))
        if not empty:
            self.depth += 1
        return self.gp

    def close(self):
        self.depth -= 1
        self.lines.append("  " * self.depth + "</object>")

    def raw(self, text):
        self.lines.append("  " * self.depth + text)


def cores(w, pkg, ncores=2):
    w.open("NUMANode", empty=True, os_index=pkg, local_memory=68719476736)
    for c in range(ncores):
        w.open("Core", os_index=c)
        w.open("PU", empty=True, os_index=pkg * ncores + c)
        w.close()


def host_bridge(w, dom_bus):
    return w.open("Bridge", bridge_type="0-1", depth=0,
                  bridge_pci=f"0000:[{dom_bus:02x}-{dom_bus + 15:02x}]")


def port(w, busid, sec):
    return w.open("Bridge", pci_busid=busid, pci_type="0604 [1000:c010] "
                  "[1000:a064] b0", bridge_type="1-1", depth=1,
                  bridge_pci=f"0000:[{sec:02x}-{sec:02x}]",
                  pci_link_speed="31.507692")


def gpu(w, busid, idx, gpus):
    g = w.open("PCIDev", pci_busid=busid,
               pci_type="0302 [10de:2330] [10de:16c1] a1",
               pci_link_speed="63.015385")
    gpus.append(w.open("OSDev", empty=True, name=f"cuda{idx}",
                       osdev_type=5, subtype="CUDA"))
    w.close()
    return g


def nic(w, busid, rdma, net, vendor="15b3:101b", cls="0207"):
    w.open("PCIDev", pci_busid=busid, pci_type=f"{cls} [{vendor}] "
           f"[{vendor}] 00", pci_link_speed="31.507692")
    w.open("OSDev", empty=True, name=net, osdev_type=2, subtype="Network")
    w.open("OSDev", empty=True, name=rdma, osdev_type=3,
           subtype="OpenFabrics")
    w.close()


def nvlink(w, gpus, pairs, bw=300000):
    n = len(gpus)
    vals = [0] * (n * n)
    for a, b in pairs:
        vals[a * n + b] = vals[b * n + a] = bw
    w.raw(f'<distances2 type="OSDev" nbobjs="{n}" kind="5" '
          f'name="NVLinkBandwidth" indexing="gp">')
    w.raw(f'  <indexes length="{n}">{" ".join(map(str, gpus))}</indexes>')
    for i in range(0, n * n, 16):
        chunk = vals[i:i + 16]
        w.raw(f'  <u64values length="{len(chunk)}">'
              f'{" ".join(map(str, chunk))}</u64values>')
    w.raw("</distances2>")


def doc(build, comment):
    w = W()
    w.open("Machine", os_index=0)
    gpus = build(w)
    w.close()
    extra = getattr(build, "after", None)
    if extra:
        extra(w, gpus)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
            f'<!-- {comment} (tests/topo/gen.py) -->\n'
            '<topology version="2.0">\n' + "\n".join(w.lines) +
            "\n</topology>\n")


def topo_a(w):
    gpus = []
    for pkg in range(2):
        w.open("Package", os_index=pkg)
        cores(w, pkg)
        host_bridge(w, 0x10 + 0x40 * pkg)
        for sw in range(2):
            base = 0x11 + 0x40 * pkg + 0x10 * sw
            port(w, f"0000:{base - 1:02x}:01.0", base)          # root port
            port(w, f"0000:{base:02x}:00.0", base + 1)          # switch up
            for k in range(2):
                port(w, f"0000:{base + 1:02x}:{k:02x}.0", base + 2 + k)
                gpu(w, f"0000:{base + 2 + k:02x}:00.0", 4 * pkg + 2 * sw + k,
                    gpus)
                w.close()
            if sw == 0:  # the NIC shares the first switch
                port(w, f"0000:{base + 1:02x}:02.0", base + 4)
                nic(w, f"0000:{base + 4:02x}:00.0", f"mlx5_{pkg}",
                    f"ib{pkg}")
                w.close()
            w.close()
            w.close()
        w.close()  # host bridge
        w.close()  # package
    return gpus


topo_a.after = lambda w, gpus: nvlink(
    w, gpus, [(a, b) for a in range(8) for b in range(a + 1, 8)
              if a // 4 == b // 4 or b == a + 4])


def topo_b(w):
    gpus = []
    for pkg in range(2):
        w.open("Package", os_index=pkg)
        cores(w, pkg)
        host_bridge(w, 0x10 + 0x80 * pkg)
        for par in range(2):
            base = 0x11 + 0x80 * pkg + 0x40 * par
            port(w, f"0000:{base - 1:02x}:01.0", base)           # root port
            port(w, f"0000:{base:02x}:00.0", base + 1)           # parent up
            for leaf in range(2):
                g = 4 * pkg + 2 * par + leaf
                lb = base + 2 + 0x10 * leaf
                port(w, f"0000:{base + 1:02x}:{leaf:02x}.0", lb)  # parent dn
                port(w, f"0000:{lb:02x}:00.0", lb + 1)            # leaf up
                port(w, f"0000:{lb + 1:02x}:00.0", lb + 2)        # leaf dn
                gpu(w, f"0000:{lb + 2:02x}:00.0", g, gpus)
                w.close()
                port(w, f"0000:{lb + 1:02x}:01.0", lb + 3)
                nic(w, f"0000:{lb + 3:02x}:00.0", f"mlx5_{g}", f"ib{g}")
                w.close()
                w.close()
                w.close()
            w.close()
            w.close()
        w.close()
        w.close()
    return gpus


topo_b.after = lambda w, gpus: nvlink(
    w, gpus, [(a, b) for a in range(8) for b in range(a + 1, 8)], 900000)


def topo_c(w):
    gpus = []
    for pkg in range(2):
        w.open("Package", os_index=pkg)
        cores(w, pkg)
        host_bridge(w, 0x10 + 0x40 * pkg)
        for k in range(2):
            rp = 0x11 + 0x40 * pkg + 2 * k
            port(w, f"0000:{0x10 + 0x40 * pkg:02x}:{k + 1:02x}.0", rp)
            gpu(w, f"0000:{rp:02x}:00.0", 2 * pkg + k, gpus)
            w.close()
        if pkg == 0:
            port(w, "0000:10:05.0", 0x20)
            nic(w, "0000:20:00.0", "mlx5_0", "eth1", cls="0200")
            w.close()
        w.close()
        w.close()
    return gpus


def topo_d(w):
    for pkg in range(2):
        w.open("Package", os_index=pkg)
        cores(w, pkg, 4)
        host_bridge(w, 0x10 + 0x40 * pkg)
        port(w, f"0000:{0x10 + 0x40 * pkg:02x}:02.0", 0x11 + 0x40 * pkg)
        nic(w, f"0000:{0x11 + 0x40 * pkg:02x}:00.0", f"erdma_{pkg}",
            f"eth{pkg}", vendor="1ded:107f", cls="0200")
        w.close()
        w.close()
        w.close()
    return []


for name, build, what in (
        ("a", topo_a, "8 GPUs NVLink, 2 sockets, 2 NICs, NIC on the switch "
                      "of 2 of its 4 GPUs"),
        ("b", topo_b, "8 GPUs NVSwitch, 8 NICs, one per GPU (PIX)"),
        ("c", topo_c, "2 sockets, 4 GPUs PCIe only, 1 NIC"),
        ("d", topo_d, "CPU only, 2 sockets, 2 eRDMA NICs")):
    with open(os.path.join(HERE, name + ".xml"), "w") as f:
        f.write(doc(build, what))
