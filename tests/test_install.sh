#!/bin/sh
# make install into a staging directory, then build a program with
# `pkg-config --cflags --libs rcoll` and run it on 2 ranks.
# Usage: test_install.sh BUILDDIR
B=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
make -C "$B" install DESTDIR="$d/root" > "$d/install.log" 2>&1 || { tail "$d/install.log"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$B/rcoll.pc")
# the API man pages, where the build made them (configure found doxygen)
if grep -q '^DOXYGEN = .' "$B/Makefile"; then
    m3="$d/root$prefix/share/man/man3"
    [ -f "$m3/rcoll.h.3" ] && [ -f "$m3/rcoll_allreduce.3" ] ||
        { echo "API man pages not installed in $m3"; exit 1; }
    echo "man pages: $(ls "$m3" | wc -l) in man3"
fi
libdir=$(sed -n 's/^libdir=//p' "$B/rcoll.pc" | sed "s|\${exec_prefix}|$prefix|")
export PKG_CONFIG_SYSROOT_DIR="$d/root" PKG_CONFIG_PATH="$d/root$libdir/pkgconfig"
cat > "$d/hello.c" <<'C'
#include <rcoll.h>
#include <stdio.h>
int main(void)
{
    rcoll_comm_t c;
    int r, n, v, s = 0;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("%s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &r);
    rcoll_comm_size(c, &n);
    v = r + 1;
    if (rcoll_allreduce(&v, &s, 1, RCOLL_INT32, RCOLL_SUM, c, NULL) != RCOLL_OK)
        return 1;
    printf("rank %d of %d: sum %d\n", r, n, s);
    rcoll_comm_destroy(c);
    return s == n * (n + 1) / 2 ? 0 : 1;
}
C
cc $(pkg-config --cflags rcoll) -Wall -Werror -std=c99 "$d/hello.c" -o "$d/hello" $(pkg-config --libs rcoll) || exit 1
# only the public API is exported
nm -D --defined-only "$d/root$libdir/librcoll.so" | awk '{print $3}' | grep -v '^rcoll_' && { echo "non-API symbols exported"; exit 1; }
LD_LIBRARY_PATH="$d/root$libdir" "$B/tools/rcoll-run" -n 2 "$d/hello"
rc=$?
[ $rc -eq 0 ] || exit $rc
# librcoll-mpi.so, where an MPI was found, sits next to librcoll.so and
# exports MPI_/PMPI_ entry points (and nothing of rcoll's internals)
if [ -f "$B/.libs/librcoll-mpi.so" ]; then
    m="$d/root$libdir/librcoll-mpi.so"
    [ -f "$m" ] || { echo "librcoll-mpi.so not installed in $libdir"; exit 1; }
    nm -D --defined-only "$m" | awk '{print $3}' | grep -Ev '^P?MPI_' &&
        { echo "librcoll-mpi.so exports more than MPI_/PMPI_ symbols"; exit 1; }
    echo "librcoll-mpi.so: $(nm -D --defined-only "$m" | grep -c ' T PMPI_') PMPI_ entry points"
fi
exit 0
