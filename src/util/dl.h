/* Optional libraries loaded at run time. librcoll has no link-time
 * dependency on libibverbs, librdmacm, hwloc or PMIx: dl.c defines each
 * function rcoll calls under the library's own name (hidden in librcoll)
 * and forwards it to the symbol dlopen/dlsym found, so one build serves
 * hosts with and without them. The headers are still needed to build. */
#ifndef RCOLL_DL_H
#define RCOLL_DL_H

#include <stddef.h>

typedef enum {
    RCOLL_DL_VERBS, RCOLL_DL_RDMACM, RCOLL_DL_HWLOC, RCOLL_DL_PMIX,
    RCOLL_DL_NLIBS
} rcoll_dl_lib_t;

/* Loads the library once (later calls return the first answer). 0 when
 * it is loaded; otherwise -1 and `why` says which file failed and why. */
int rcoll_dl_open(rcoll_dl_lib_t lib, char *why, size_t len);

/* The file the library was loaded from or last tried ("libibverbs.so.1"). */
const char *rcoll_dl_file(rcoll_dl_lib_t lib);

#endif
