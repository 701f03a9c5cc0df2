/* The bootstrap's wire format, shared by the root service (boot_root.c)
 * and the ranks (bootstrap.c). */
#ifndef RCOLL_BOOT_WIRE_H
#define RCOLL_BOOT_WIRE_H

#include "bootstrap.h"
#include <stdint.h>

#define BOOT_MAGIC   0x72636f6cU /* "rcol" */
#define BOOT_VERSION 2
#define HELLO_ROOT_V1 1 /* a rank of bootstrap version 1 joins */
#define HELLO_RING   2  /* a rank connects to the next one */
#define HELLO_CALL   3  /* the root calls a rank back with its answer */
#define HELLO_PING   4  /* the root checks that a waiting rank is there */
#define HELLO_ROOT   5  /* a rank joins the rendezvous (version 2) */
/* the root's answer when it has no descriptor to keep for the rank: it
 * calls back (HELLO_CALL) on the rank's listener when all ranks joined */
#define BOOT_LATER  0x72636c74U /* "rclt" */
/* a word before each bootstrap ring block: data follows, or a failure
 * notice (BOOT_NOTICE_LEN bytes) */
#define BOOT_DATA   0x62646174U /* "bdat" */
#define BOOT_NOTICE 0x62666c74U /* "bflt" */
#define BOOT_NOTICE_LEN 256

typedef struct {
    uint32_t purpose;
    int32_t rank;
    int32_t nranks;
    uint32_t info_size;
} boot_hello_t;

/* the root's answer to a hello: then the entries of the rank's ring
 * neighbours (previous, next), or a notice */
typedef struct {
    uint32_t magic;
    int32_t status;     /* 0 or an rcoll_status_t */
} boot_answer_t;

/* boot_root.c: 1 if a root of this process at `root` gave up (its
 * listener is closed), with its status and reason */
int rcoll__boot_root_gave_up(const rcoll_sockaddr_t *root,
                             rcoll_status_t *st, char *why, size_t len);
/* boot_root.c: waits up to secs for the roots of this process to finish
 * telling their ranks */
void rcoll__boot_roots_wait(double secs);

/* boot_join.c: a rank's side of the rendezvous */
/* the acceptor on bs's listener, made at first use (NULL: no memory);
 * _done closes the handshakes still in progress on it */
rcoll_acceptor_t *rcoll__boot_acceptor(rcoll_bootstrap_t *bs);
void rcoll__boot_acceptor_done(rcoll_bootstrap_t *bs);
/* connects to the root and says hello (*fd >= 0 if reached) */
rcoll_status_t rcoll__boot_root_connect(rcoll_bootstrap_t *bs,
                                        const rcoll_sockaddr_t *root,
                                        double deadline, int *fd);
/* the error of a rendezvous that failed after the root was reached */
rcoll_status_t rcoll__boot_rendezvous_failed(const rcoll_bootstrap_t *bs,
                                             const rcoll_sockaddr_t *root,
                                             rcoll_status_t st);
/* sends our entry on fd (closed) and takes the root's answer: the ring
 * neighbours' entries in bs->peers, or the root's notice */
rcoll_status_t rcoll__boot_root_exchange(rcoll_bootstrap_t *bs,
                                         const rcoll_sockaddr_t *root,
                                         const rcoll_boot_peer_t *me, int fd,
                                         double deadline);

#endif
