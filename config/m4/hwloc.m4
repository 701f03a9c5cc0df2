# RCOLL_CHECK_HWLOC: hwloc (topology discovery).
# --with-hwloc=DIR|yes|no, default: use if found.
AC_DEFUN([RCOLL_CHECK_HWLOC], [
  RCOLL_CHECK_LIB([hwloc], [hwloc.h], [hwloc], [hwloc_topology_init])
])
