# RCOLL_CHECK_CUDA: the CUDA toolkit (headers, libcudart, nvcc).
# --with-cuda=DIR|yes|no, default: use if found (also looks in /usr/local/cuda).
AC_DEFUN([RCOLL_CHECK_CUDA], [
  rcoll_cuda_guess=
  AS_IF([test -d /usr/local/cuda/include], [rcoll_cuda_guess=/usr/local/cuda])
  RCOLL_CHECK_LIB([cuda], [cuda_runtime_api.h], [cudart], [cudaGetDeviceCount],
                  [$rcoll_cuda_guess])
  NVCC=
  AS_IF([test "x$rcoll_have_cuda" = "xyes"], [
    rcoll_cuda_bin=
    AS_IF([test -n "$rcoll_cuda_dir"], [rcoll_cuda_bin="$rcoll_cuda_dir/bin$PATH_SEPARATOR"])
    AC_PATH_PROG([NVCC], [nvcc], [], [$rcoll_cuda_bin$PATH])
  ])
  AC_SUBST([NVCC])
])
