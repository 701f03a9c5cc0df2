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
  dnl the CUDA parts (kernels embedded as a fatbin, the driver loaded at
  dnl run time) need nvcc; headers without nvcc build without them
  AM_CONDITIONAL([HAVE_NVCC], [test -n "$NVCC"])
  AS_IF([test -n "$NVCC"],
        [AC_DEFINE([RCOLL_CUDA_KERNELS], [1],
                   [Define to 1 to build the CUDA parts (GPU buffers)])])
  RCOLL_NVCC_GENCODE="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
  AC_ARG_VAR([RCOLL_NVCC_GENCODE], [nvcc -gencode flags for rcoll's kernels (default: sm_80, sm_90, compute_90 PTX)])
])
