#!/bin/sh
# Regenerates the build system (configure, Makefile.in) from configure.ac.
set -e
cd "$(dirname "$0")"
mkdir -p config/aux
autoreconf -fi
