/* libFuzzer target: the hwloc XML topology reader (src/topo/topo.c), which
 * reads RCOLL_TOPO_FILE. Every input either fails cleanly with a message
 * or yields a topology whose queries stay in bounds. */
#include "topo/topo.h"
#include "fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)
{
    rcoll_topo_t *t = NULL;
    char err[256] = "";
    rcoll_status_t st = rcoll_topo_parse((const char *)d, n, &t, err,
                                         sizeof(err));
    if (st != RCOLL_OK) {
        FUZZ_ASSERT(t == NULL && err[0] != '\0');
        return 0;
    }
    FUZZ_ASSERT(t != NULL);
    int ng = rcoll_topo_ngpus(t), nn = rcoll_topo_nnics(t);
    FUZZ_ASSERT(ng >= 0 && nn >= 0);
    int nic_of[1024];
    if (ng <= 1024) {
        rcoll_topo_choose_nics(t, nic_of);
        for (int g = 0; g < ng; g++)
            FUZZ_ASSERT(nic_of[g] >= -1 && nic_of[g] < nn);
    }
    for (int g = 0; g < ng && g < 16; g++) {
        (void)strlen(rcoll_topo_gpu_busid(t, g));
        for (int k = 0; k < nn && k < 16; k++) {
            rcoll_path_t p = rcoll_topo_gpu_nic_path(t, g, k);
            FUZZ_ASSERT(p >= RCOLL_PATH_LOC && p < RCOLL_PATH_COUNT);
        }
        for (int h = 0; h < ng && h < 16; h++) {
            rcoll_path_t p = rcoll_topo_gpu_gpu_path(t, g, h);
            FUZZ_ASSERT(p >= RCOLL_PATH_LOC && p < RCOLL_PATH_COUNT);
            FUZZ_ASSERT((p == RCOLL_PATH_LOC) == (g == h));
        }
    }
    for (int k = 0; k < nn && k < 16; k++)
        (void)strlen(rcoll_topo_nic_name(t, k));
    rcoll_topo_free(t);
    return 0;
}
