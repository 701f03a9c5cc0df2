/* rcoll-topo: prints a host's topology as rcoll reads it (GPUs, NICs and
 * their sockets), the path class between every GPU and NIC and between
 * GPUs, and the decisions taken from it: the NIC of each GPU and whether
 * GPUDirect RDMA is used for it (RCOLL_GDR_LEVEL), with the reason, the
 * NIC each of a host's ranks takes (the ib transport's choice); and,
 * for a job whose ranks' hosts are given (--hosts), the ring order, the
 * hierarchical all-reduce's rings, the locality counts the tuner charges
 * and Rabenseifner's halving order, as a communicator would compute them. */
#include "config.h"
#include "topo/topo.h"
#include "coll/sched.h"
#include "util/params.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rcoll-topo [--xml FILE] [--gdr-level PIX|PXB|PHB|SYS] "
            "[--hosts LIST] [--ranks L]\n"
            "  --xml FILE      read FILE (hwloc XML, as lstopo --of xml "
            "writes)\n"
            "                  instead of RCOLL_TOPO_FILE\n"
            "  --gdr-level L   instead of RCOLL_GDR_LEVEL (default PXB)\n"
            "  --hosts LIST    the host of each rank in rank order, comma-"
            "separated\n"
            "                  (e.g. a,b,a,b): print the ring order "
            "(RCOLL_RING_ORDER)\n"
            "                  and the hierarchical all-reduce's rings,\n"
            "                  the ranks of a host that talk across hosts "
            "in each\n                  kind of step, and Rabenseifner's "
            "halving order\n"
            "  --ranks L       ranks per host for the NIC of each rank "
            "(default: one per GPU,\n"
            "                  else one per NIC)\n");
}

/* The placement a communicator of these ranks computes (comm.c). */
static int placement(const char *list, const char *order)
{
    char *copy = strdup(list), *save = NULL;
    int n = 0, cap = 16;
    char **name = malloc((size_t)cap * sizeof(*name));
    if (!copy || !name)
        return 1;
    for (char *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == cap) {
            char **nn = realloc(name, (size_t)(cap *= 2) * sizeof(*name));
            if (!nn)
                return 1;
            name = nn;
        }
        name[n++] = tok;
    }
    if (n == 0) {
        fprintf(stderr, "rcoll-topo: --hosts names no rank\n");
        return 2;
    }
    uint64_t *id = malloc((size_t)n * sizeof(*id));
    int *ring = malloc((size_t)n * sizeof(int)), *host = malloc((size_t)n * sizeof(int));
    if (!id || !ring || !host)
        return 1;
    for (int r = 0; r < n; r++) {
        id[r] = (uint64_t)r;
        for (int q = 0; q < r; q++)
            if (!strcmp(name[q], name[r])) {
                id[r] = id[q];
                break;
            }
    }
    int topo = strcmp(order, "user") != 0, L;
    int H = rcoll_topo_ring_order(n, id, topo, ring, host, &L);
    if (H < 0) {
        fprintf(stderr, "rcoll-topo: no memory for %d ranks\n", n);
        return 1;
    }
    printf("%d ranks on %d hosts; ring order (RCOLL_RING_ORDER=%s):\n  ", n,
           H, topo ? "topo" : "user");
    int crossings = 0;
    for (int i = 0; i < n; i++) {
        int sep = i && host[ring[i]] != host[ring[i - 1]];
        printf("%s%d", i == 0 ? "" : sep ? " | " : " ", ring[i]);
        crossings += host[ring[i]] != host[ring[(i + 1) % n]];
    }
    printf("\n  the ring crosses between hosts %d times\n", crossings);
    if (H >= 2) { /* the rings of channels (RCOLL_NCHANNELS, or the tuner's
                     with a NIC per rank): 2 use 0 and 1, 4 all four */
        int *cr = malloc((size_t)n * sizeof(int));
        for (int ch = 1; cr && ch < 4; ch++) {
            rcoll_topo_chan_ring(n, ring, host, ch, 4, cr);
            printf("  channel %d's ring%s:", ch, ch == 1 ? " (backwards)" : "");
            for (int i = 0; i < n; i++)
                printf("%s%d", i && host[cr[i]] != host[cr[i - 1]] ? " | " : " ",
                       cr[i]);
            printf("\n");
        }
        free(cr);
    }
    if (H >= 2 && L >= 2) {
        printf("hierarchical all-reduce: %d hosts x %d ranks\n", H, L);
        for (int h = 0; h < H; h++) {
            printf("  host %d (%s) ring:", h, name[ring[h * L]]);
            for (int p = 0; p < L; p++)
                printf(" %d", ring[h * L + p]);
            printf("\n");
        }
        for (int p = 0; p < L; p++) {
            printf("  network ring %d:", p);
            for (int h = 0; h < H; h++)
                printf(" %d", ring[h * L + p]);
            printf("\n");
        }
    } else {
        printf("hierarchical all-reduce: not used (%s); the flat ring "
               "instead\n", H < 2 ? "one host"
                        : L < 2 ? (L == 0 ? "hosts of different sizes or "
                                            "interleaved" : "one rank per host")
                                : "");
    }
    /* what the tuner and the log-step algorithms see (coll_env_t.loc) */
    coll_locality_t loc;
    if (coll_locality_init(&loc, n, host, H, ring) == 0 && H >= 2) {
        coll_env_t e;
        memset(&e, 0, sizeof(e));
        e.loc = loc;
        int p = 1;
        while (p * 2 <= n)
            p *= 2;
        int bit[COLL_LOC_BITS], nb = coll_rabenseifner_order(&e, p, bit);
        int kmax = 0;
        while ((1 << kmax) < n && kmax < COLL_LOC_BITS - 1)
            kmax++;
        printf("ranks of a host talking across hosts at once (the most on "
               "one host):\n  ring successor %d, everyone %d\n"
               "  partner r ^ 2^k, k = 0..%d:", loc.ringq, loc.allq,
               kmax - 1);
        for (int k = 0; k < kmax; k++)
            printf(" %d", loc.xq[k]);
        printf("\n  partner r + 2^k, k = 0..%d:", kmax - 1);
        for (int k = 0; k < kmax; k++)
            printf(" %d", loc.sq[k]);
        printf("\nRabenseifner's all-reduce halves with r ^ 2^k for k =");
        for (int i = 0; i < nb; i++)
            printf(" %d", bit[i]);
        printf(" (then doubles back in reverse)\n");
    }
    free(id);
    free(ring);
    free(host);
    free(name);
    free(copy);
    return 0;
}

/* The RDMA device each of a host's L ranks takes (the ib transport with
 * RCOLL_IB_NIC=auto), the topology's NICs standing for the devices. */
static void rank_nics(const rcoll_topo_t *t, int L)
{
    int nn = rcoll_topo_nnics(t);
    const char **names = malloc((size_t)nn * sizeof(*names));
    if (!names)
        return;
    for (int i = 0; i < nn; i++) { /* by name, as the transport sorts */
        int j = i;
        while (j > 0 && strcmp(names[j - 1], rcoll_topo_nic_name(t, i)) > 0) {
            names[j] = names[j - 1];
            j--;
        }
        names[j] = rcoll_topo_nic_name(t, i);
    }
    printf("\nNIC per rank, %d ranks on this host (the ib transport, "
           "RCOLL_IB_NIC=auto):\n", L);
    for (int r = 0; r < L; r++) {
        const char *how;
        int k = rcoll_topo_rank_nic(t, r, L, names, nn, &how), nic = 0;
        for (int i = 0; i < nn; i++)
            if (!strcmp(rcoll_topo_nic_name(t, i), names[k]))
                nic = i;
        printf("  rank %d -> NIC %d (%s), package %d (%s%s)\n", r, nic,
               names[k], rcoll_topo_nic_package(t, nic), how,
               strcmp(how, "topology") ? "" : ": its GPU's nearest");
    }
    free(names);
}

int main(int argc, char **argv)
{
    rcoll_config_init();
    const char *file = rcoll_config.topo_file;
    const char *level = rcoll_config.gdr_level;
    const char *hosts = NULL;
    int nranks = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--xml") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--gdr-level") == 0 && i + 1 < argc)
            level = argv[++i];
        else if (strcmp(argv[i], "--hosts") == 0 && i + 1 < argc)
            hosts = argv[++i];
        else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc &&
                 (nranks = atoi(argv[i + 1])) > 0)
            i++;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    int lv = rcoll_path_parse(level && level[0] ? level : "PXB");
    if (lv < RCOLL_PATH_PIX) {
        fprintf(stderr, "rcoll-topo: GDR level \"%s\" is not one of PIX, "
                        "PXB, PHB, SYS\n", level);
        return 2;
    }
    if (hosts) {
        int rc = placement(hosts, rcoll_config.ring_order);
        if (rc || !file || !file[0])
            return rc;
        printf("\n");
    }
    rcoll_topo_t *t = NULL;
    char err[512] = "";
    if (!file || !file[0]) {
        /* this host, as hwloc detects it (RCOLL_TOPO_DUMP_FILE: saved) */
        if (rcoll_topo_get(&t, &file, err, sizeof(err)) != RCOLL_OK) {
            fprintf(stderr, "rcoll-topo: no topology: %s\n", err);
            return 1;
        }
    } else if (rcoll_topo_load(file, &t, err, sizeof(err)) != RCOLL_OK) {
        fprintf(stderr, "rcoll-topo: %s\n", err);
        return 1;
    }
    int ng = rcoll_topo_ngpus(t), nn = rcoll_topo_nnics(t);
    printf("topology %s: %d packages, %d GPUs, %d NICs\n", file,
           rcoll_topo_npackages(t), ng, nn);
    for (int g = 0; g < ng; g++)
        printf("  GPU %d  %s  package %d\n", g, rcoll_topo_gpu_busid(t, g),
               rcoll_topo_gpu_package(t, g));
    for (int k = 0; k < nn; k++)
        printf("  NIC %d  %s  %s  package %d\n", k, rcoll_topo_nic_name(t, k),
               rcoll_topo_nic_busid(t, k), rcoll_topo_nic_package(t, k));
    if (ng && nn) {
        printf("\nGPU-NIC paths (NVL < PIX < PXB < PHB < SYS):\n       ");
        for (int k = 0; k < nn; k++)
            printf(" NIC%-2d", k);
        printf("\n");
        for (int g = 0; g < ng; g++) {
            printf("  GPU%-2d", g);
            for (int k = 0; k < nn; k++)
                printf(" %-5s", rcoll_path_name(rcoll_topo_gpu_nic_path(t, g, k)));
            printf("\n");
        }
    }
    if (ng > 1) {
        printf("\nGPU-GPU paths:\n       ");
        for (int h = 0; h < ng; h++)
            printf(" GPU%-2d", h);
        printf("\n");
        for (int g = 0; g < ng; g++) {
            printf("  GPU%-2d", g);
            for (int h = 0; h < ng; h++)
                printf(" %-5s", rcoll_path_name(rcoll_topo_gpu_gpu_path(t, g, h)));
            printf("\n");
        }
    }
    if (ng) {
        int *nic_of = calloc((size_t)ng, sizeof(*nic_of));
        rcoll_topo_choose_nics(t, nic_of);
        printf("\nNIC and GPUDirect RDMA per GPU (RCOLL_GDR_LEVEL=%s):\n",
               rcoll_path_name((rcoll_path_t)lv));
        for (int g = 0; g < ng; g++) {
            int k = nic_of[g];
            if (k < 0) {
                printf("  GPU %d: no NIC on this host\n", g);
                continue;
            }
            rcoll_path_t p = rcoll_topo_gpu_nic_path(t, g, k);
            int gdr = rcoll_topo_gdr(t, g, k, (rcoll_path_t)lv);
            printf("  GPU %d -> NIC %d (%s): path %s, the nearest; GDR %s "
                   "(%s %s %s)\n", g, k, rcoll_topo_nic_name(t, k),
                   rcoll_path_name(p), gdr ? "yes" : "no, staged through "
                   "host memory", rcoll_path_name(p), gdr ? "<=" : ">",
                   rcoll_path_name((rcoll_path_t)lv));
        }
        free(nic_of);
    }
    if (nn)
        rank_nics(t, nranks > 0 ? nranks : ng ? ng : nn);
    printf("\nnot in this release: NVLink from NVML (only the XML's "
           "NVLinkBandwidth matrix), ordering a host's ranks by GPU and NIC "
           "(needs GPU buffers)\n");
    rcoll_topo_free(t);
    return 0;
}
