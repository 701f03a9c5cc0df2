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

#endif
