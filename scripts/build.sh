#!/bin/sh
# Configures and builds rcoll in ./build (out of tree), installing the build
# dependencies first. Extra arguments go to configure.
set -e
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
[ -x configure ] || ./autogen.sh > /dev/null
mkdir -p build
cd build
if [ ! -f Makefile ] || [ $# -gt 0 ]; then
    ../configure "$@" > configure.out || { tail -30 configure.out; exit 1; }
    grep -A12 'configuration summary' configure.out | sed 's/^configure: //'
fi
make -j"$(nproc)" > make.out 2>&1 || { tail -40 make.out; exit 1; }
