# RCOLL_CHECK_PMIX: libpmix (rendezvous under mpirun / srun without MPI).
# --with-pmix=DIR|yes|no, default: use if found. Debian installs it under a
# private prefix (.../pmix2) that pkg-config knows.
AC_DEFUN([RCOLL_CHECK_PMIX], [
  rcoll_pmix_guess=
  AS_IF([test "x$PKG_CONFIG" = "x"], [AC_PATH_PROG([PKG_CONFIG], [pkg-config])])
  AS_IF([test -n "$PKG_CONFIG"],
        [rcoll_pmix_guess=`$PKG_CONFIG --variable=prefix pmix 2>/dev/null`])
  RCOLL_CHECK_LIB([pmix], [pmix.h], [pmix], [PMIx_Init], [$rcoll_pmix_guess])
])
