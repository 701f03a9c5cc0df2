# RCOLL_CHECK_RDMACM: librdmacm (RDMA connection manager, needed for iWARP/eRDMA).
# --with-rdmacm=DIR|yes|no, default: use if found.
AC_DEFUN([RCOLL_CHECK_RDMACM], [
  RCOLL_CHECK_LIB([rdmacm], [rdma/rdma_cma.h], [rdmacm], [rdma_create_id])
])
