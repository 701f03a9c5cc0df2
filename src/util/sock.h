/* Socket helpers shared by the bootstrap and the TCP transport. */
#ifndef RCOLL_SOCK_H
#define RCOLL_SOCK_H

#include "util.h"
#include <netinet/in.h>
#include <sys/socket.h>

typedef union {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    struct sockaddr_storage ss;
} rcoll_sockaddr_t;

/* "host:port" or "[v6]:port" -> address (resolves names). */
rcoll_status_t rcoll_sock_parse_addr(const char *str, rcoll_sockaddr_t *addr);
/* Address -> "a.b.c.d:port". */
const char *rcoll_sock_addr_str(const rcoll_sockaddr_t *addr, char *buf,
                                size_t len);
socklen_t rcoll_sock_addr_len(const rcoll_sockaddr_t *addr);
int rcoll_sock_addr_is_loopback(const rcoll_sockaddr_t *addr);

/* Picks this process's address (port 0) for bootstrap/TCP:
 * RCOLL_SOCKET_IFNAME if set; else the source address the kernel uses to
 * reach `toward` (if non-NULL); else the first up non-loopback interface;
 * else loopback. */
rcoll_status_t rcoll_sock_pick_addr(const rcoll_sockaddr_t *toward,
                                    rcoll_sockaddr_t *addr, char *ifname,
                                    size_t ifname_len);

/* Non-blocking listening socket bound to addr (port may be 0); fills the
 * bound address back. */
rcoll_status_t rcoll_sock_listen(rcoll_sockaddr_t *addr, int reuse, int *fd_p);
/* Blocking connect with retries until `deadline` (rcoll_time_sec()); the
 * returned fd is blocking with TCP_NODELAY. */
rcoll_status_t rcoll_sock_connect(const rcoll_sockaddr_t *addr,
                                  double deadline, int *fd_p);
/* accept() that waits until `deadline`. */
rcoll_status_t rcoll_sock_accept(int lfd, double deadline, int *fd_p);
/* As rcoll_sock_connect, but "connection refused" is retried only until
 * refused_until (for a peer known to have been listening: refused means it
 * is gone), while a slow or lossy network is waited out to `deadline`. */
rcoll_status_t rcoll_sock_connect_peer(const rcoll_sockaddr_t *addr,
                                       double deadline, double refused_until,
                                       int *fd_p);
/* As rcoll_sock_connect_peer, from the local address `src` (port 0: any
 * port; NULL: the kernel's choice), so that the connection leaves through
 * that address's interface. */
rcoll_status_t rcoll_sock_connect_from(const rcoll_sockaddr_t *addr,
                                       const rcoll_sockaddr_t *src,
                                       double deadline, double refused_until,
                                       int *fd_p);
/* RCOLL_SOCKET_IFNAME-style match of an interface name against `spec`
 * (comma-separated prefixes; a leading ^ excludes, = asks exact names). */
int rcoll_sock_ifname_match(const char *spec, const char *name);
/* Full send/recv of len bytes on a blocking or non-blocking fd, polling up
 * to `deadline`. Return RCOLL_ERR_REMOTE on EOF/reset, _TIMEOUT. */
rcoll_status_t rcoll_sock_send_all(int fd, const void *buf, size_t len,
                                   double deadline);
rcoll_status_t rcoll_sock_recv_all(int fd, void *buf, size_t len,
                                   double deadline);
int rcoll_sock_set_nonblock(int fd, int on);
void rcoll_sock_tune(int fd); /* TCP_NODELAY, bigger buffers */

/* Connection authentication against the job secret (SipHash MACs).
 * The acceptor sends a 16-byte nonce; the connector answers with
 * {hello, MAC(secret, nonce || hello)}; the acceptor checks it and answers
 * MAC(secret, "ok" || MAC), proving it knows the secret too. `hello` is
 * caller data (e.g. rank and purpose) of `hlen` bytes delivered to the
 * acceptor. */
#define RCOLL_AUTH_HELLO_MAX 256
rcoll_status_t rcoll_sock_auth_connect(int fd, const uint8_t secret[16],
                                       const void *hello, size_t hlen,
                                       double deadline);
rcoll_status_t rcoll_sock_auth_accept(int fd, const uint8_t secret[16],
                                      void *hello, size_t hlen,
                                      double deadline);
/* The handshake's words, for a caller that runs it on non-blocking
 * sockets itself: the connector's MAC over nonce || hello; the acceptor's
 * answer to it, "ok" (taken = 1) or "no" (taken = 0: the acceptor proves
 * it knows the secret but keeps another connection instead, as when two
 * ranks connect to each other at once); RCOLL_AUTH_REFUSED instead of an
 * answer when the MAC is wrong. */
#define RCOLL_AUTH_REFUSED 0x6465737566657221ULL /* "!refused" */
uint64_t rcoll_auth_mac(const uint8_t secret[16], const uint8_t nonce[16],
                        const void *hello, size_t hlen);
uint64_t rcoll_auth_reply(const uint8_t secret[16], uint64_t mac, int taken);

/* A listener that runs the acceptor's side of the handshake for many
 * connections at once, so that a stranger who connects and stays silent,
 * sends garbage, or presents another job's secret delays no one else in
 * its handshake (a flood of 64 such holds new connections in the backlog
 * for up to RCOLL_AUTH_PENDING_S): each
 * connection in its handshake has RCOLL_AUTH_PENDING_S seconds, and is
 * dropped (with a warning) when it fails or runs out of time. At most
 * RCOLL_AUTH_PENDING_MAX are in their handshake; more wait in the
 * listener's backlog (hundreds of ranks of one host connect at once, and
 * on a loaded host their hellos come late: none is dropped for that). */
#define RCOLL_AUTH_PENDING_MAX 64
#define RCOLL_AUTH_PENDING_S 10.0
typedef struct {
    int fd;
    double deadline;
    size_t got;
    uint8_t msg[16 + RCOLL_AUTH_HELLO_MAX + 8]; /* nonce, hello, MAC */
} rcoll_auth_pending_t;

typedef struct {
    int lfd;
    uint8_t secret[16];
    size_t hlen;
    const char *who;          /* for warnings: "bootstrap root" ... */
    int npend;
    int maxpend;              /* at most RCOLL_AUTH_PENDING_MAX (the default) */
    rcoll_auth_pending_t pend[RCOLL_AUTH_PENDING_MAX];
    unsigned long dropped;    /* connections that failed the handshake */
    int nofile;               /* accept failed for want of descriptors */
} rcoll_acceptor_t;

void rcoll_acceptor_init(rcoll_acceptor_t *a, int lfd,
                         const uint8_t secret[16], size_t hlen,
                         const char *who);
/* Serves the listener and the handshakes in progress until one connection
 * is authenticated: RCOLL_OK, its fd (blocking) in *fd_p and its hello in
 * `hello`. Also polls `extra` (nextra fds, may be NULL): when one of them
 * is readable, returns RCOLL_INPROGRESS with its index in *ready.
 * RCOLL_ERR_TIMEOUT at `deadline`. */
rcoll_status_t rcoll_acceptor_next(rcoll_acceptor_t *a, double deadline,
                                   void *hello, int *fd_p, const int *extra,
                                   int nextra, int *ready);
/* Closes the connections still in their handshake (not the listener). */
void rcoll_acceptor_fini(rcoll_acceptor_t *a);

#endif
