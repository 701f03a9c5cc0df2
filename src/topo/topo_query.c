/* Queries on a topology read by topo.c, and the decisions made from it:
 * packages, the PCI path between a GPU and a NIC or two GPUs, the NIC of
 * each GPU, GPUDirect RDMA, the ring order of a job's ranks. */
#include "topo/topo_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- queries ---- */

int rcoll_topo_npackages(const rcoll_topo_t *t) { return t->npkg; }
int rcoll_topo_ngpus(const rcoll_topo_t *t) { return t->ngpu; }
int rcoll_topo_nnics(const rcoll_topo_t *t) { return t->nnic; }

const char *rcoll_topo_gpu_busid(const rcoll_topo_t *t, int g)
{
    return g >= 0 && g < t->ngpu ? t->n[t->gpu[g]].busid : "";
}

const char *rcoll_topo_nic_busid(const rcoll_topo_t *t, int k)
{
    return k >= 0 && k < t->nnic ? t->n[t->nic[k]].busid : "";
}

const char *rcoll_topo_nic_name(const rcoll_topo_t *t, int k)
{
    return k >= 0 && k < t->nnic ? t->nicname[k] : "";
}

static int package_of(const rcoll_topo_t *t, int i)
{
    for (; i >= 0; i = t->n[i].parent)
        if (t->n[i].type == N_PACKAGE) {
            int k = 0; /* its order among the packages */
            for (int j = 0; j < i; j++)
                k += t->n[j].type == N_PACKAGE;
            return k;
        }
    return -1;
}

int rcoll_topo_gpu_package(const rcoll_topo_t *t, int g)
{
    return g >= 0 && g < t->ngpu ? package_of(t, t->gpu[g]) : -1;
}

int rcoll_topo_nic_package(const rcoll_topo_t *t, int k)
{
    return k >= 0 && k < t->nnic ? package_of(t, t->nic[k]) : -1;
}

unsigned long long rcoll_topo_nvlink_bw(const rcoll_topo_t *t, int a, int b)
{
    if (!t->nvl || a < 0 || b < 0 || a >= t->ngpu || b >= t->ngpu)
        return 0;
    return t->nvl[a * t->ngpu + b];
}

/* the path between two PCI devices by the PCIe tree alone */
static rcoll_path_t pci_path(const rcoll_topo_t *t, int a, int b)
{
    if (a == b)
        return RCOLL_PATH_LOC;
    /* the lowest common ancestor */
    int lca = -1;
    for (int x = a; x >= 0 && lca < 0; x = t->n[x].parent)
        for (int y = b; y >= 0; y = t->n[y].parent)
            if (x == y) {
                lca = x;
                break;
            }
    if (lca >= 0 && t->n[lca].type == N_BRIDGE && !t->n[lca].host_bridge) {
        /* below one PCIe switch: PIX when each device is at most one port
         * (bridge) below it, else several switches: PXB */
        int worst = 0;
        for (int side = 0; side < 2; side++) {
            int k = 0;
            for (int x = t->n[side ? b : a].parent; x >= 0 && x != lca;
                 x = t->n[x].parent)
                k += t->n[x].type == N_BRIDGE;
            worst = k > worst ? k : worst;
        }
        return worst <= 1 ? RCOLL_PATH_PIX : RCOLL_PATH_PXB;
    }
    int pa = package_of(t, a), pb = package_of(t, b);
    if (pa >= 0 && pb >= 0)
        return pa == pb ? RCOLL_PATH_PHB : RCOLL_PATH_SYS;
    /* I/O attached to the machine: one CPU, or unknown sockets */
    return t->npkg <= 1 ? RCOLL_PATH_PHB : RCOLL_PATH_SYS;
}

rcoll_path_t rcoll_topo_gpu_nic_path(const rcoll_topo_t *t, int g, int k)
{
    if (g < 0 || g >= t->ngpu || k < 0 || k >= t->nnic)
        return RCOLL_PATH_SYS;
    return pci_path(t, t->gpu[g], t->nic[k]);
}

rcoll_path_t rcoll_topo_gpu_gpu_path(const rcoll_topo_t *t, int a, int b)
{
    if (a < 0 || a >= t->ngpu || b < 0 || b >= t->ngpu)
        return RCOLL_PATH_SYS;
    if (a == b)
        return RCOLL_PATH_LOC;
    if (rcoll_topo_nvlink_bw(t, a, b) > 0)
        return RCOLL_PATH_NVL;
    return pci_path(t, t->gpu[a], t->gpu[b]);
}

void rcoll_topo_choose_nics(const rcoll_topo_t *t, int *nic_of)
{
    int load[TOPO_MAX_DEV] = {0};
    for (int g = 0; g < t->ngpu; g++) {
        int best = -1;
        rcoll_path_t bp = RCOLL_PATH_COUNT;
        for (int k = 0; k < t->nnic; k++) {
            rcoll_path_t p = rcoll_topo_gpu_nic_path(t, g, k);
            if (p < bp || (p == bp && load[k] < load[best])) {
                best = k;
                bp = p;
            }
        }
        nic_of[g] = best;
        if (best >= 0)
            load[best]++;
    }
}

int rcoll_topo_rank_nic(const rcoll_topo_t *t, int local, int nlocal,
                        const char *const *names, int nnames,
                        const char **how)
{
    *how = "block";
    if (nnames <= 1 || nlocal <= 0 || local < 0 || local >= nlocal)
        return 0;
    if (t && t->ngpu == nlocal && t->nnic > 0) {
        int *nic_of = malloc((size_t)t->ngpu * sizeof(int));
        int k = -1;
        if (nic_of) {
            rcoll_topo_choose_nics(t, nic_of);
            k = nic_of[local];
            free(nic_of);
        }
        for (int i = 0; k >= 0 && i < nnames; i++)
            if (!strcmp(names[i], t->nicname[k])) {
                *how = "topology";
                return i;
            }
    }
    return (int)((long long)local * nnames / nlocal);
}

int rcoll_topo_gdr(const rcoll_topo_t *t, int g, int k, rcoll_path_t max)
{
    return rcoll_topo_gpu_nic_path(t, g, k) <= max;
}

static const char *const path_names[RCOLL_PATH_COUNT] = {
    "LOC", "NVL", "PIX", "PXB", "PHB", "SYS"};

const char *rcoll_path_name(rcoll_path_t p)
{
    return (unsigned)p < RCOLL_PATH_COUNT ? path_names[p] : "?";
}

int rcoll_path_parse(const char *s)
{
    for (int i = 0; i < RCOLL_PATH_COUNT; i++)
        if (s && strcasecmp(s, path_names[i]) == 0)
            return i;
    return -1;
}

typedef struct {
    uint64_t id;
    int rank;
} ring_ent_t;

static int ring_ent_cmp(const void *x, const void *y)
{
    const ring_ent_t *a = x, *b = y;
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Hosts are numbered by their lowest rank; the ring (topo) takes each
 * host's ranks in rank order, hosts in that order. O(n log n): the ranks
 * sorted by (host id, rank) give each host's lowest rank, a scan in rank
 * order numbers the hosts, and a counting sort by host builds the ring. */
void rcoll_topo_chan_ring(int n, const int *ring, const int *host_of,
                          int ch, int nch, int *out)
{
    int nrot = (nch + 1) / 2;
    for (int b = 0, k; b < n; b += k) { /* each host's run of the ring */
        for (k = 1; b + k < n && host_of[ring[b + k]] == host_of[ring[b]];)
            k++;
        int rot = (int)((long)(ch / 2) * k / nrot);
        for (int j = 0; j < k; j++)
            out[b + j] = ring[b + (j + rot) % k];
    }
    if (ch & 1)
        for (int i = 0, j = n - 1; i < j; i++, j--) {
            int t = out[i];
            out[i] = out[j];
            out[j] = t;
        }
}

int rcoll_topo_ring_order(int n, const uint64_t *host_id, int topo,
                          int *ring, int *host_of, int *host_size)
{
    int nh = 0;
    size_t sz = (size_t)(n > 0 ? n : 1);
    int *host = host_of ? host_of : malloc(sz * sizeof(int));
    int *count = calloc(sz + 1, sizeof(int));
    int *first = malloc(sz * sizeof(int)); /* rank -> its host's lowest */
    ring_ent_t *e = malloc(sz * sizeof(*e));
    if (!host || !count || !first || !e) {
        if (!host_of)
            free(host);
        free(count);
        free(first);
        free(e);
        for (int r = 0; r < n; r++) {
            ring[r] = r;
            if (host_of)
                host_of[r] = 0;
        }
        *host_size = 0;
        return -1;
    }
    for (int r = 0; r < n; r++)
        e[r] = (ring_ent_t){host_id[r], r};
    qsort(e, sz, sizeof(*e), ring_ent_cmp);
    for (int i = 0; i < n; i++)
        first[e[i].rank] = i > 0 && e[i].id == e[i - 1].id
                               ? first[e[i - 1].rank]
                               : e[i].rank;
    for (int r = 0; r < n; r++) { /* in rank order: hosts by lowest rank */
        host[r] = first[r] == r ? nh++ : host[first[r]];
        count[host[r] + 1]++;
    }
    if (topo) {
        for (int h = 0; h < nh; h++) /* count[h]: host h's first slot */
            count[h + 1] += count[h];
        for (int r = 0; r < n; r++)
            ring[count[host[r]]++] = r;
    } else {
        for (int r = 0; r < n; r++)
            ring[r] = r;
    }
    /* the hosts' sizes again (the counting sort used count) */
    for (int h = 0; h <= nh; h++)
        count[h] = 0;
    for (int r = 0; r < n; r++)
        count[host[r]]++;
    *host_size = n > 0 ? count[0] : 0;
    for (int h = 1; h < nh; h++)
        if (count[h] != count[0])
            *host_size = 0;
    for (int i = 0; i < n && *host_size; i++)
        if (host[ring[i]] != i / *host_size)
            *host_size = 0; /* user order with interleaved hosts */
    if (!host_of)
        free(host);
    free(count);
    free(first);
    free(e);
    return nh;
}
