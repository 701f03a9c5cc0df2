#!/usr/bin/env python3
"""Which files of src/ call each other (a cycle of two): from the built
objects' symbol tables (nm), a file A calls B when A's object refers to a
global symbol B's object defines. Prints each such pair and exits 1 if
there is one. Usage: check-calls.py BUILDDIR"""
import glob
import os
import subprocess
import sys


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    objs = [o for o in glob.glob(os.path.join(build, "src", "**", "*.o"),
                                 recursive=True)]
    if not objs:
        print("check-calls: no objects under %s/src" % build)
        return 2
    defs, uses = {}, {}
    for o in objs:
        name = os.path.relpath(o, build)
        # libtool: src/x/.libs/librcoll_core_la-y.o -> src/x/y
        base = os.path.basename(name).split("-", 1)[-1][:-2]
        f = os.path.join(os.path.dirname(name).replace("/.libs", ""), base)
        out = subprocess.run(["nm", "-P", o], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) < 2:
                continue
            sym, kind = p[0], p[1]
            if kind in "TDBR":
                defs[sym] = f
            elif kind == "U":
                uses.setdefault(f, set()).add(sym)
    edges = set()
    for f, syms in uses.items():
        for s in syms:
            g = defs.get(s)
            if g and g != f:
                edges.add((f, g))
    bad = sorted((a, b) for a, b in edges if (b, a) in edges and a < b)
    for a, b in bad:
        ab = sorted(s for s in uses[a] if defs.get(s) == b)
        ba = sorted(s for s in uses[b] if defs.get(s) == a)
        print("%s <-> %s: %s / %s" % (a, b, ",".join(ab[:4]),
                                      ",".join(ba[:4])))
    print("check-calls: %d files, %d call edges, %d pairs that call each "
          "other" % (len(set(defs.values())), len(edges), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
