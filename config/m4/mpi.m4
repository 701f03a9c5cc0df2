# RCOLL_CHECK_MPI: an MPI's C compiler wrapper, for librcoll-mpi (the PMPI
# interposition library) and its tests. --with-mpi=DIR|yes|no (DIR: the
# MPI's prefix, whose bin/ holds mpicc), default: build it if mpicc works.
# The flags come from the wrapper itself (Open MPI: --showme:compile /
# --showme:link; MPICH: -compile-info / -link-info).
AC_DEFUN([RCOLL_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=DIR@:>@],
      [build librcoll-mpi.so against the MPI under DIR (default: if mpicc is found)])],
    [], [with_mpi=check])
  rcoll_have_mpi=no
  MPI_CPPFLAGS= MPI_LIBS=
  AS_IF([test "x$with_mpi" != "xno"], [
    rcoll_mpi_path=$PATH
    AS_IF([test "x$with_mpi" != "xyes" && test "x$with_mpi" != "xcheck"],
          [rcoll_mpi_path="$with_mpi/bin"])
    AC_PATH_PROG([MPICC], [mpicc], [], [$rcoll_mpi_path])
    AS_IF([test -n "$MPICC"], [
      MPI_CPPFLAGS=`$MPICC --showme:compile 2>/dev/null` &&
        MPI_LIBS=`$MPICC --showme:link 2>/dev/null` || {
        MPI_CPPFLAGS=`$MPICC -compile-info 2>/dev/null | sed 's/^[[^ ]]* //'`
        MPI_LIBS=`$MPICC -link-info 2>/dev/null | sed 's/^[[^ ]]* //'`; }
      rcoll_save_CPPFLAGS=$CPPFLAGS rcoll_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $MPI_CPPFLAGS" LIBS="$MPI_LIBS $LIBS"
      AC_MSG_CHECKING([whether $MPICC's flags build a program that calls PMPI_Allreduce])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                       [[return PMPI_Allreduce(0, 0, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);]])],
                     [rcoll_have_mpi=yes])
      AC_MSG_RESULT([$rcoll_have_mpi])
      CPPFLAGS=$rcoll_save_CPPFLAGS LIBS=$rcoll_save_LIBS])
    AS_IF([test "x$rcoll_have_mpi" = "xno" && test "x$with_mpi" != "xcheck"],
          [AC_MSG_ERROR([--with-mpi: no working mpicc found])])
    AS_IF([test "x$rcoll_have_mpi" = "xno" && test "x$with_mpi" = "xcheck"],
          [AC_MSG_WARN([no MPI found (mpicc): librcoll-mpi is not built])])
  ])
  AC_SUBST([MPI_CPPFLAGS])
  AC_SUBST([MPI_LIBS])
  AM_CONDITIONAL([HAVE_MPI], [test "x$rcoll_have_mpi" = "xyes"])
])
