/*
 * Host topology: the PCIe tree, GPUs, NICs and NVLink of one host, loaded
 * from hwloc's XML format (what `lstopo --of xml` writes; RCOLL_TOPO_FILE),
 * and the decisions taken from it: the path class between a GPU and a NIC,
 * the NIC of each GPU, and whether GPUDirect RDMA pays.
 *
 * Path classes, nearest first, as NCCL and the eRDMA material define them:
 *   NVL  GPU to GPU over NVLink
 *   PIX  through at most one PCIe switch (both below the same switch)
 *   PXB  through several PCIe switches, not through the CPU
 *   PHB  through the PCIe host bridge of one CPU (its root complex)
 *   SYS  across the CPU sockets' interconnect
 * This file reads no system state: detection (hwloc) is a separate step.
 */
#ifndef RCOLL_TOPO_H
#define RCOLL_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "rcoll.h"

typedef enum {
    RCOLL_PATH_LOC = 0, /* the same device */
    RCOLL_PATH_NVL,
    RCOLL_PATH_PIX,
    RCOLL_PATH_PXB,
    RCOLL_PATH_PHB,
    RCOLL_PATH_SYS,
    RCOLL_PATH_COUNT
} rcoll_path_t;

typedef struct rcoll_topo rcoll_topo_t;

/* Parses hwloc XML (version 2 layout; version 1 nesting also reads) from
 * `len` bytes. On error returns RCOLL_ERR_INVALID_ARGUMENT and writes what
 * and where (line) into err. Never reads past len; no recursion limit is
 * hit by hostile input (depth is bounded). */
rcoll_status_t rcoll_topo_parse(const char *xml, size_t len,
                                rcoll_topo_t **out, char *err, size_t errlen);
rcoll_status_t rcoll_topo_load(const char *path, rcoll_topo_t **out,
                               char *err, size_t errlen);
void rcoll_topo_free(rcoll_topo_t *t);

/* This host's topology as hwloc exports it (detect.c): *xml is malloc'd,
 * *len bytes. RCOLL_ERR_NOT_SUPPORTED in a build without hwloc. */
rcoll_status_t rcoll_topo_detect_xml(char **xml, size_t *len, char *err,
                                     size_t errlen);
/* The topology rcoll uses: RCOLL_TOPO_FILE if set, else detected; with
 * RCOLL_TOPO_DUMP_FILE set, its XML is also written there. *source says
 * which ("detected by hwloc" or the file's path). */
rcoll_status_t rcoll_topo_get(rcoll_topo_t **out, const char **source,
                              char *err, size_t errlen);
/* The same, never writing RCOLL_TOPO_DUMP_FILE (for every rank's own use;
 * rank 0 alone dumps, once) */
rcoll_status_t rcoll_topo_read(rcoll_topo_t **out, const char **source,
                               char *err, size_t errlen);

int rcoll_topo_npackages(const rcoll_topo_t *t);
int rcoll_topo_ngpus(const rcoll_topo_t *t);
int rcoll_topo_nnics(const rcoll_topo_t *t);
/* PCI bus id ("0000:3b:00.0") and OS name ("cuda0", "mlx5_0"; "" if none) */
const char *rcoll_topo_gpu_busid(const rcoll_topo_t *t, int gpu);
const char *rcoll_topo_nic_busid(const rcoll_topo_t *t, int nic);
const char *rcoll_topo_nic_name(const rcoll_topo_t *t, int nic);
/* the package (socket) a GPU or NIC hangs from; -1 if unknown */
int rcoll_topo_gpu_package(const rcoll_topo_t *t, int gpu);
int rcoll_topo_nic_package(const rcoll_topo_t *t, int nic);
/* NVLink bandwidth between two GPUs in MB/s, from hwloc's
 * "NVLinkBandwidth" distances matrix (an NVSwitch makes every pair
 * nonzero); 0 if they are not joined by NVLink */
unsigned long long rcoll_topo_nvlink_bw(const rcoll_topo_t *t, int gpu_a,
                                        int gpu_b);

rcoll_path_t rcoll_topo_gpu_nic_path(const rcoll_topo_t *t, int gpu, int nic);
rcoll_path_t rcoll_topo_gpu_gpu_path(const rcoll_topo_t *t, int a, int b);

/* The NIC for each GPU: the nearest by path class; among GPUs that tie on
 * several NICs, spread evenly (the GPU goes to the tied NIC with the fewest
 * GPUs so far, in GPU order). nic_of[gpu] gets -1 if the host has no NIC. */
void rcoll_topo_choose_nics(const rcoll_topo_t *t, int *nic_of);

/* The NIC (an index into names[0..nnames-1], the RDMA devices a rank can
 * use, in the same order on every rank of the host) of the host's rank
 * `local` of `nlocal`. When the topology (t, may be NULL) has one GPU per
 * rank, rank i is taken to drive GPU i (the launchers' LOCAL_RANK =
 * device convention) and gets that GPU's NIC (rcoll_topo_choose_nics)
 * if names has it; otherwise the ranks split into nnames contiguous
 * blocks in local order (rank i: i * nnames / nlocal), so a host's ranks,
 * bound in order, use the NIC of their own half or quarter. *how says
 * which rule gave the answer ("topology" or "block"). */
int rcoll_topo_rank_nic(const rcoll_topo_t *t, int local, int nlocal,
                        const char *const *names, int nnames,
                        const char **how);

/* GPUDirect RDMA between `gpu` and `nic` is used when their path is no
 * farther than `max_level` (RCOLL_GDR_LEVEL; PXB by default). */
int rcoll_topo_gdr(const rcoll_topo_t *t, int gpu, int nic,
                   rcoll_path_t max_level);

const char *rcoll_path_name(rcoll_path_t p);
/* "PIX", "pxb", ... -> the class; -1 if unknown */
int rcoll_path_parse(const char *s);

/* Rank placement: the ring order of n ranks from each rank's host
 * identity (equal values: one host). topo: hosts in the order of their
 * lowest rank, each host's ranks contiguous and in rank order; otherwise
 * rank order. Fills ring[n] (position -> rank) and, when not NULL,
 * host_of[n] (rank -> host index, hosts numbered by lowest rank); returns
 * the number of hosts and sets *host_size to the ranks per host when
 * every host has as many and they are contiguous in the order, else 0.
 * Every rank computes the same answer from the same table. Out of
 * memory: -1 (ring[] and host_of[] are then rank order and host 0, so a
 * caller that goes on reads defined values). */
int rcoll_topo_ring_order(int n, const uint64_t *host_id, int topo,
                          int *ring, int *host_of, int *host_size);
/* Channel ch's ring of nch (coll_sched_build_channels), from the ring
 * order ring[] (position -> rank) and host_of[]: each host's run of the
 * ring rotated by ch / 2 times the run's length over the rotations there
 * are ((nch + 1) / 2), and odd channels backwards, into out[] (position
 * -> rank). With two channels the second ring enters each host where the
 * first leaves it; 4 add two that enter and leave at a host's middle. */
void rcoll_topo_chan_ring(int n, const int *ring, const int *host_of,
                          int ch, int nch, int *out);

#endif
