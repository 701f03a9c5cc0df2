/* The topology's representation, shared by the hwloc XML reader (topo.c)
 * and the queries and decisions (topo_query.c). */
#ifndef RCOLL_TOPO_INT_H
#define RCOLL_TOPO_INT_H

#include "topo/topo.h"

#define TOPO_MAX_DEPTH 64
#define TOPO_MAX_NODES 65536
#define TOPO_MAX_BYTES (64u << 20)
#define TOPO_MAX_DEV 1024

typedef enum {
    N_OTHER, N_MACHINE, N_PACKAGE, N_NUMA, N_GROUP, N_BRIDGE, N_PCIDEV,
    N_OSDEV
} ntype_t;

typedef struct {
    ntype_t type;
    int parent;               /* node index, -1 for the root */
    int host_bridge;          /* N_BRIDGE: host-to-PCI (bridge_type 0-x) */
    unsigned pci_class;       /* N_PCIDEV: 0x0302, ... */
    unsigned pci_vendor;
    int osdev_type;           /* N_OSDEV: hwloc 2's number, -1 if absent */
    unsigned long long gp;    /* gp_index, 0 if absent */
    char busid[20];
    char name[64];
    char subtype[32];
    /* N_PCIDEV: what its OS devices say it is */
    int cuda;                 /* a CUDA/NVML OS device */
    char rdma[64], net[64];   /* its RDMA device and netdev names */
} node_t;

struct rcoll_topo {
    node_t *n;
    int nn, cap;
    int npkg;
    int gpu[TOPO_MAX_DEV], ngpu; /* PCIDev node of each GPU */
    int nic[TOPO_MAX_DEV], nnic;
    char nicname[TOPO_MAX_DEV][64];
    unsigned long long *nvl;     /* ngpu x ngpu MB/s */
};


#endif
