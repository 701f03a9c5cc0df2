# RCOLL_CHECK_VERBS: libibverbs (RDMA verbs).
# --with-verbs=DIR|yes|no, default: use if found.
AC_DEFUN([RCOLL_CHECK_VERBS], [
  RCOLL_CHECK_LIB([verbs], [infiniband/verbs.h], [ibverbs], [ibv_get_device_list])
])
