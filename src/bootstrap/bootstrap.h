/* Out-of-band bootstrap: the rendezvous through rank 0's root service
 * (each rank learns its ring neighbours' entries), then a ring of
 * authenticated sockets, over which the table of every rank's entry is
 * gathered, for all-gather and barrier of small blobs. Used while
 * creating a communicator (transport addresses). */
#ifndef RCOLL_BOOTSTRAP_H
#define RCOLL_BOOTSTRAP_H

#include "util/sock.h"

/* The layout of rcoll_unique_id_t's 128 bytes. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    uint16_t family;
    uint16_t port;         /* network order */
    uint8_t addr[16];      /* IPv4 in the first 4 bytes, or IPv6 */
    uint8_t secret[16];
} rcoll_boot_id_t;

/* What every rank learns about every other rank at the rendezvous. */
typedef struct {
    rcoll_sockaddr_t boot_addr;  /* its bootstrap ring listener */
    uint64_t host_hash;          /* same value on one host */
    int32_t pid;
    int32_t rank;
    char hostname[64];
} rcoll_boot_peer_t;

typedef struct {
    int rank;
    int nranks;
    uint8_t secret[16];
    int listen_fd;
    int next_fd;       /* ring: to rank+1 */
    int prev_fd;       /* ring: from rank-1 */
    int prev_early;    /* prev_fd came while we waited for the root's
                        * call: its go-ahead is not sent yet */
    rcoll_acceptor_t *acc; /* on listen_fd, made at first use: one for the
                            * whole bootstrap, so that a handshake begun
                            * while waiting for the root carries on */
    rcoll_boot_peer_t *peers;
    double timeout;
    rcoll_sockaddr_t root_addr;
} rcoll_bootstrap_t;

/* Packs / unpacks the public id. */
void rcoll_boot_id_pack(const rcoll_sockaddr_t *addr, const uint8_t secret[16],
                        rcoll_unique_id_t *id);
/* Checks the rendezvous table every rank receives (entry i is rank i,
 * with an IPv4/IPv6 address) and NUL-terminates its hostnames. */
rcoll_status_t rcoll_boot_table_check(rcoll_boot_peer_t *peers, int nranks);
rcoll_status_t rcoll_boot_id_unpack(const rcoll_unique_id_t *id,
                                    rcoll_sockaddr_t *addr,
                                    uint8_t secret[16]);

/* Starts the root service on an already listening socket (it takes the fd):
 * a detached thread that serves one rendezvous and exits. */
rcoll_status_t rcoll_boot_root_start(int listen_fd, const uint8_t secret[16],
                                     double timeout);

/* Joins the rendezvous at `root` and connects the ring. Collective. */
rcoll_status_t rcoll_bootstrap_init(rcoll_bootstrap_t *bs,
                                    const rcoll_sockaddr_t *root,
                                    const uint8_t secret[16], int rank,
                                    int nranks, double timeout);
/* All-gather: buf holds nranks * size bytes, ours at rank * size. */
rcoll_status_t rcoll_bootstrap_allgather(rcoll_bootstrap_t *bs, void *buf,
                                         size_t size);
rcoll_status_t rcoll_bootstrap_barrier(rcoll_bootstrap_t *bs);
void rcoll_bootstrap_finalize(rcoll_bootstrap_t *bs);

/* A hash of this host's identity (boot id + hostname). */
uint64_t rcoll_host_hash(void);

#endif
