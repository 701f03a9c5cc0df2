/* Socket helpers: addresses, interface choice, connect/accept with
 * deadlines, full reads/writes, and the secret-based handshake. */
#include "sock.h"
#include "params.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

rcoll_status_t rcoll_sock_parse_addr(const char *str, rcoll_sockaddr_t *addr)
{
    char host[256];
    const char *colon, *port;
    struct addrinfo hints, *res = NULL;
    int rc;

    if (str[0] == '[') {
        const char *end = strchr(str, ']');
        if (!end || end[1] != ':')
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "bad address \"%s\" (want [v6]:port)", str);
        snprintf(host, sizeof(host), "%.*s", (int)(end - str - 1), str + 1);
        port = end + 2;
    } else {
        colon = strrchr(str, ':');
        if (!colon || colon == str)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "bad address \"%s\" (want host:port)", str);
        snprintf(host, sizeof(host), "%.*s", (int)(colon - str), str);
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (*port == '\0' || *end != '\0' || p < 0 || p > 65535)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "bad port in address \"%s\"", str);
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = AF_UNSPEC;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "cannot resolve host \"%s\": %s", host,
                                gai_strerror(rc));
    memset(addr, 0, sizeof(*addr));
    memcpy(&addr->ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (addr->sa.sa_family == AF_INET)
        addr->sin.sin_port = htons((uint16_t)p);
    else
        addr->sin6.sin6_port = htons((uint16_t)p);
    return RCOLL_OK;
}

socklen_t rcoll_sock_addr_len(const rcoll_sockaddr_t *addr)
{
    return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                          : sizeof(struct sockaddr_in);
}

const char *rcoll_sock_addr_str(const rcoll_sockaddr_t *addr, char *buf,
                                size_t len)
{
    char h[INET6_ADDRSTRLEN] = "?";
    if (addr->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &addr->sin.sin_addr, h, sizeof(h));
        snprintf(buf, len, "%s:%d", h, ntohs(addr->sin.sin_port));
    } else if (addr->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &addr->sin6.sin6_addr, h, sizeof(h));
        snprintf(buf, len, "[%s]:%d", h, ntohs(addr->sin6.sin6_port));
    } else {
        snprintf(buf, len, "(none)");
    }
    return buf;
}

int rcoll_sock_addr_is_loopback(const rcoll_sockaddr_t *addr)
{
    if (addr->sa.sa_family == AF_INET)
        return (ntohl(addr->sin.sin_addr.s_addr) >> 24) == 127;
    if (addr->sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&addr->sin6.sin6_addr);
    return 0;
}

/* NCCL_SOCKET_IFNAME-style match: "^" excludes, "=" exact, else prefix. */
int rcoll_sock_ifname_match(const char *spec, const char *name)
{
    char buf[256];
    int neg = 0, exact = 0, hit = 0;
    snprintf(buf, sizeof(buf), "%s", spec);
    char *p = buf, *tok, *save = NULL;
    if (*p == '^') {
        neg = 1;
        p++;
    }
    if (*p == '=') {
        exact = 1;
        p++;
    }
    for (tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (exact ? !strcmp(tok, name) : !strncmp(tok, name, strlen(tok)))
            hit = 1;
    }
    return neg ? !hit : hit;
}

rcoll_status_t rcoll_sock_pick_addr(const rcoll_sockaddr_t *toward,
                                    rcoll_sockaddr_t *addr, char *ifname,
                                    size_t ifname_len)
{
    struct ifaddrs *ifa_list = NULL, *ifa, *pick = NULL, *lo = NULL;
    const char *spec = rcoll_config.socket_ifname;
    rcoll_sockaddr_t src;
    int have_src = 0;

    if (getifaddrs(&ifa_list) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "getifaddrs: %s",
                                strerror(errno));
    if (!spec && toward) {
        /* the source address the kernel would use to reach the root */
        int fd = socket(toward->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        socklen_t sl = sizeof(src);
        if (fd >= 0 &&
            connect(fd, &toward->sa, rcoll_sock_addr_len(toward)) == 0 &&
            getsockname(fd, &src.sa, &sl) == 0)
            have_src = 1;
        if (fd >= 0)
            close(fd);
    }
    for (ifa = ifa_list; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP))
            continue;
        int fam = ifa->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6)
            continue;
        if (fam == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(
                &((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
            continue;
        if (spec) {
            if (rcoll_sock_ifname_match(spec, ifa->ifa_name) &&
                (!pick || (fam == AF_INET &&
                           pick->ifa_addr->sa_family != AF_INET)))
                pick = ifa;
            continue;
        }
        if (have_src) {
            int same = 0;
            if (fam == AF_INET && src.sa.sa_family == AF_INET)
                same = ((struct sockaddr_in *)ifa->ifa_addr)->sin_addr.s_addr ==
                       src.sin.sin_addr.s_addr;
            else if (fam == AF_INET6 && src.sa.sa_family == AF_INET6)
                same = !memcmp(
                    &((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
                    &src.sin6.sin6_addr, sizeof(struct in6_addr));
            if (same) {
                pick = ifa;
                break;
            }
            continue;
        }
        if (ifa->ifa_flags & IFF_LOOPBACK) {
            if (!lo && fam == AF_INET)
                lo = ifa;
            continue;
        }
        if (!strncmp(ifa->ifa_name, "docker", 6) ||
            !strncmp(ifa->ifa_name, "virbr", 5))
            continue;
        if (!pick || (fam == AF_INET && pick->ifa_addr->sa_family != AF_INET))
            pick = ifa;
    }
    if (!pick && have_src) {
        /* routed through an address not on a listed interface: use it */
        freeifaddrs(ifa_list);
        *addr = src;
        if (addr->sa.sa_family == AF_INET)
            addr->sin.sin_port = 0;
        else
            addr->sin6.sin6_port = 0;
        snprintf(ifname, ifname_len, "?");
        return RCOLL_OK;
    }
    if (!pick)
        pick = lo;
    if (!pick) {
        freeifaddrs(ifa_list);
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                                "no usable network interface%s%s",
                                spec ? " matches RCOLL_SOCKET_IFNAME=" : "",
                                spec ? spec : "");
    }
    memset(addr, 0, sizeof(*addr));
    memcpy(&addr->ss, pick->ifa_addr,
           pick->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6));
    snprintf(ifname, ifname_len, "%s", pick->ifa_name);
    if (addr->sa.sa_family == AF_INET)
        addr->sin.sin_port = 0;
    else
        addr->sin6.sin6_port = 0;
    freeifaddrs(ifa_list);
    return RCOLL_OK;
}

int rcoll_sock_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void rcoll_sock_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

rcoll_status_t rcoll_sock_listen(rcoll_sockaddr_t *addr, int reuse, int *fd_p)
{
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    char buf[128];
    socklen_t sl = sizeof(*addr);

    if (fd < 0) {
        int e = errno;
        char hint[320];
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "socket: %s%s", strerror(e),
                                rcoll_fd_limit_hint(e, hint, sizeof(hint)));
    }
    if (reuse)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, &addr->sa, rcoll_sock_addr_len(addr)) != 0) {
        int e = errno;
        close(fd);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "bind %s: %s",
                                rcoll_sock_addr_str(addr, buf, sizeof(buf)),
                                strerror(e));
    }
    if (listen(fd, 4096) != 0 || getsockname(fd, &addr->sa, &sl) != 0) {
        int e = errno;
        close(fd);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "listen: %s", strerror(e));
    }
    rcoll_sock_set_nonblock(fd, 1);
    *fd_p = fd;
    return RCOLL_OK;
}

static int poll_until(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - rcoll_time_sec();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = ev};
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

rcoll_status_t rcoll_sock_connect(const rcoll_sockaddr_t *addr,
                                  double deadline, int *fd_p)
{
    return rcoll_sock_connect_peer(addr, deadline, deadline, fd_p);
}

rcoll_status_t rcoll_sock_connect_peer(const rcoll_sockaddr_t *addr,
                                       double deadline, double refused_until,
                                       int *fd_p)
{
    return rcoll_sock_connect_from(addr, NULL, deadline, refused_until, fd_p);
}

rcoll_status_t rcoll_sock_connect_from(const rcoll_sockaddr_t *addr,
                                       const rcoll_sockaddr_t *src,
                                       double deadline, double refused_until,
                                       int *fd_p)
{
    char buf[128];
    int last_err = 0;
    double delay = 0.001;
    /* An attempt gets 2 s, then 4, up to 8 (a new socket each: a new
     * SYN at once, from a new source port) rather than the kernel's SYN
     * backoff (1, 3, 7, 15, 31 s) to the deadline, which on a lossy link
     * can leave a connection unmade for most of the deadline. */
    double attempt = 2.0;

    while (rcoll_time_sec() < deadline) {
        int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            int e = errno;
            char hint[320];
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "socket: %s%s",
                                    strerror(e),
                                    rcoll_fd_limit_hint(e, hint, sizeof(hint)));
        }
#ifdef IP_BIND_ADDRESS_NO_PORT
        /* the port is chosen at connect, per destination: no ephemeral
         * port is reserved on the address for every socket */
        int one = 1;
        if (src)
            setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
                       sizeof(one));
#endif
        if (src && bind(fd, &src->sa, rcoll_sock_addr_len(src)) != 0) {
            int e = errno;
            close(fd);
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "bind %s: %s",
                                    rcoll_sock_addr_str(src, buf, sizeof(buf)),
                                    strerror(e));
        }
        rcoll_sock_set_nonblock(fd, 1);
        int rc = connect(fd, &addr->sa, rcoll_sock_addr_len(addr));
        if (rc != 0 && errno == EINPROGRESS) {
            double until = RCOLL_MIN(deadline, rcoll_time_sec() + attempt);
            int pr = poll_until(fd, POLLOUT, until);
            attempt = RCOLL_MIN(attempt * 2, 8.0);
            int err = 0;
            socklen_t el = sizeof(err);
            if (pr > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0)
                rc = err ? -1 : 0;
            else
                err = pr == 0 ? ETIMEDOUT : errno;
            errno = err;
        }
        if (rc == 0) {
            rcoll_sock_set_nonblock(fd, 0);
            rcoll_sock_tune(fd);
            *fd_p = fd;
            return RCOLL_OK;
        }
        last_err = errno;
        close(fd);
        if (last_err == ECONNREFUSED && rcoll_time_sec() >= refused_until)
            break; /* nobody listens there any more */
        if (last_err != ECONNREFUSED && last_err != ETIMEDOUT &&
            last_err != ECONNRESET && last_err != EHOSTUNREACH &&
            last_err != ENETUNREACH && last_err != EAGAIN)
            break;
        /* the listener may not be up yet: back off and retry */
        struct timespec ts = {0, (long)(delay * 1e9)};
        nanosleep(&ts, NULL);
        delay = RCOLL_MIN(delay * 2, 0.2);
    }
    return rcoll__set_error(last_err == ECONNREFUSED || !last_err
                                ? RCOLL_ERR_TIMEOUT
                                : RCOLL_ERR_SYSTEM,
                            "connect to %s: %s",
                            rcoll_sock_addr_str(addr, buf, sizeof(buf)),
                            last_err ? strerror(last_err) : "timed out");
}

rcoll_status_t rcoll_sock_accept(int lfd, double deadline, int *fd_p)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            rcoll_sock_set_nonblock(fd, 0);
            rcoll_sock_tune(fd);
            *fd_p = fd;
            return RCOLL_OK;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
            errno != ECONNABORTED)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "accept: %s",
                                    strerror(errno));
        int pr = poll_until(lfd, POLLIN, deadline);
        if (pr == 0)
            return rcoll__set_error(RCOLL_ERR_TIMEOUT,
                                    "accept: no peer connected within "
                                    "RCOLL_TIMEOUT");
        if (pr < 0)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "poll: %s",
                                    strerror(errno));
    }
}

rcoll_status_t rcoll_sock_send_all(int fd, const void *buf, size_t len,
                                   double deadline)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            int pr = poll_until(fd, POLLOUT, deadline);
            if (pr == 0)
                return rcoll__set_error(RCOLL_ERR_TIMEOUT, "send timed out");
            continue;
        }
        return rcoll__set_error(RCOLL_ERR_REMOTE, "send: %s",
                                n < 0 ? strerror(errno) : "closed");
    }
    return RCOLL_OK;
}

rcoll_status_t rcoll_sock_recv_all(int fd, void *buf, size_t len,
                                   double deadline)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return rcoll__set_error(RCOLL_ERR_REMOTE,
                                    "connection closed by peer");
        if (errno == EAGAIN || errno == EINTR) {
            int pr = poll_until(fd, POLLIN, deadline);
            if (pr == 0)
                return rcoll__set_error(RCOLL_ERR_TIMEOUT,
                                        "receive timed out");
            continue;
        }
        return rcoll__set_error(RCOLL_ERR_REMOTE, "recv: %s", strerror(errno));
    }
    return RCOLL_OK;
}

#define AUTH_MAGIC 0x72636f6c6c617531ULL /* "rcollau1" */
#define AUTH_REFUSED RCOLL_AUTH_REFUSED

uint64_t rcoll_auth_mac(const uint8_t secret[16], const uint8_t nonce[16],
                        const void *hello, size_t hlen)
{
    uint8_t msg[16 + RCOLL_AUTH_HELLO_MAX];
    if (hlen > RCOLL_AUTH_HELLO_MAX)
        hlen = RCOLL_AUTH_HELLO_MAX;
    memcpy(msg, nonce, 16);
    memcpy(msg + 16, hello, hlen);
    return rcoll_siphash(secret, msg, 16 + hlen) ^ AUTH_MAGIC;
}

uint64_t rcoll_auth_reply(const uint8_t secret[16], uint64_t mac, int taken)
{
    uint8_t m2[10] = {'o', 'k'};
    if (!taken) {
        m2[0] = 'n';
        m2[1] = 'o';
    }
    memcpy(m2 + 2, &mac, 8);
    return rcoll_siphash(secret, m2, sizeof(m2));
}

rcoll_status_t rcoll_sock_auth_connect(int fd, const uint8_t secret[16],
                                       const void *hello, size_t hlen,
                                       double deadline)
{
    uint8_t nonce[16], msg[16 + RCOLL_AUTH_HELLO_MAX + 8];
    uint64_t mac, ok, expect;
    rcoll_status_t st;

    if (hlen > RCOLL_AUTH_HELLO_MAX)
        return RCOLL_ERR_INTERNAL;
    /* RCOLL_ERR_REMOTE here (closed before the nonce) means the acceptor
     * never looked at us; callers may retry. Later failures are AUTH. */
    st = rcoll_sock_recv_all(fd, nonce, sizeof(nonce), deadline);
    if (st != RCOLL_OK)
        return st;
    memcpy(msg + 16, hello, hlen);
    mac = rcoll_auth_mac(secret, nonce, hello, hlen);
    memcpy(msg + 16 + hlen, &mac, 8);
    st = rcoll_sock_send_all(fd, msg + 16, hlen + 8, deadline);
    if (st != RCOLL_OK)
        return st;
    st = rcoll_sock_recv_all(fd, &ok, sizeof(ok), deadline);
    /* an acceptor that rejects our MAC says so (AUTH_REFUSED) before it
     * closes; a connection that just ends means the acceptor went away
     * (died) in the middle of the handshake */
    if (st != RCOLL_OK)
        return rcoll__set_error(st == RCOLL_ERR_TIMEOUT ? st : RCOLL_ERR_REMOTE,
                                "the peer closed the connection in the "
                                "middle of the handshake (it died or was "
                                "killed?)");
    if (ok == AUTH_REFUSED)
        return rcoll__set_error(RCOLL_ERR_AUTH,
                                "the peer refused our handshake (is the "
                                "secret / unique id the same on all ranks?)");
    expect = rcoll_auth_reply(secret, mac, 1);
    if (ok != expect)
        return rcoll__set_error(RCOLL_ERR_AUTH,
                                "the peer does not know the job secret");
    return RCOLL_OK;
}

rcoll_status_t rcoll_sock_auth_accept(int fd, const uint8_t secret[16],
                                      void *hello, size_t hlen,
                                      double deadline)
{
    uint8_t msg[16 + RCOLL_AUTH_HELLO_MAX + 8];
    uint64_t mac, expect;
    rcoll_status_t st;
    /* a silent or slow stranger must not stall us for long */
    double dl = RCOLL_MIN(deadline, rcoll_time_sec() + 10.0);

    if (hlen > RCOLL_AUTH_HELLO_MAX)
        return RCOLL_ERR_INTERNAL;
    st = rcoll_random_bytes(msg, 16);
    if (st != RCOLL_OK)
        return rcoll__set_error(st, "no random bytes for a nonce");
    st = rcoll_sock_send_all(fd, msg, 16, dl);
    if (st != RCOLL_OK)
        return st;
    st = rcoll_sock_recv_all(fd, msg + 16, hlen + 8, dl);
    if (st != RCOLL_OK)
        return rcoll__set_error(RCOLL_ERR_AUTH,
                                "handshake: no valid hello from the "
                                "connecting process: %s", rcoll_last_error());
    memcpy(&mac, msg + 16 + hlen, 8);
    expect = rcoll_auth_mac(secret, msg, msg + 16, hlen);
    if (mac != expect) {
        uint64_t no = AUTH_REFUSED;
        if (send(fd, &no, sizeof(no), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            /* it learns from the close instead */
        }
        return rcoll__set_error(RCOLL_ERR_AUTH,
                                "handshake: a connection presented a wrong "
                                "secret; dropped");
    }
    uint64_t ok = rcoll_auth_reply(secret, mac, 1);
    st = rcoll_sock_send_all(fd, &ok, sizeof(ok), dl);
    if (st != RCOLL_OK)
        return st;
    memcpy(hello, msg + 16, hlen);
    return RCOLL_OK;
}

/* ---- many handshakes at once ---- */

void rcoll_acceptor_init(rcoll_acceptor_t *a, int lfd,
                         const uint8_t secret[16], size_t hlen,
                         const char *who)
{
    memset(a, 0, sizeof(*a));
    a->lfd = lfd;
    memcpy(a->secret, secret, 16);
    a->hlen = hlen;
    a->who = who;
    a->maxpend = RCOLL_AUTH_PENDING_MAX;
}

static void acceptor_drop(rcoll_acceptor_t *a, int i, const char *why)
{
    rcoll_warn("%s: dropped a connection: %s", a->who, why);
    close(a->pend[i].fd);
    a->pend[i] = a->pend[--a->npend];
    a->dropped++;
}

/* accepts what is waiting on the listener while there is room for its
 * handshake; each gets its nonce at once */
static void acceptor_take(rcoll_acceptor_t *a)
{
    while (a->npend < a->maxpend) {
        int fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                a->nofile = errno; /* the loop fails: nothing else frees one */
            return;
        }
        rcoll_auth_pending_t *p = &a->pend[a->npend];
        p->fd = fd;
        p->got = 0;
        p->deadline = rcoll_time_sec() + RCOLL_AUTH_PENDING_S;
        if (rcoll_random_bytes(p->msg, 16) != RCOLL_OK ||
            send(fd, p->msg, 16, MSG_NOSIGNAL) != 16) {
            close(fd);
            continue;
        }
        a->npend++;
    }
}

/* reads what a pending connection sent; 1 when it is authenticated */
static int acceptor_read(rcoll_acceptor_t *a, int i)
{
    rcoll_auth_pending_t *p = &a->pend[i];
    size_t want = a->hlen + 8;
    ssize_t n = recv(p->fd, p->msg + 16 + p->got, want - p->got, MSG_DONTWAIT);
    if (n == 0 && p->got == 0) {
        /* closed before a byte: a connect that only checks we listen (a
         * bootstrap rank waiting for the root's call), or a port scan */
        close(p->fd);
        a->pend[i] = a->pend[--a->npend];
        return -1;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR)) {
        acceptor_drop(a, i, "closed during the handshake");
        return -1;
    }
    if (n < 0)
        return 0;
    p->got += (size_t)n;
    if (p->got < want)
        return 0;
    uint64_t mac, expect;
    memcpy(&mac, p->msg + 16 + a->hlen, 8);
    expect = rcoll_auth_mac(a->secret, p->msg, p->msg + 16, a->hlen);
    if (mac != expect) {
        uint64_t no = AUTH_REFUSED;
        if (send(p->fd, &no, sizeof(no), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            /* it learns from the close instead */
        }
        acceptor_drop(a, i, "it presented a wrong secret (another job, or "
                            "not rcoll)");
        return -1;
    }
    uint64_t ok = rcoll_auth_reply(a->secret, mac, 1);
    if (send(p->fd, &ok, sizeof(ok), MSG_NOSIGNAL) != (ssize_t)sizeof(ok)) {
        acceptor_drop(a, i, "closed during the handshake");
        return -1;
    }
    return 1;
}

static rcoll_status_t acceptor_loop(rcoll_acceptor_t *a, double deadline,
                                    void *hello, int *fd_p, const int *extra,
                                    int nextra, int *ready, struct pollfd *pfd);

rcoll_status_t rcoll_acceptor_next(rcoll_acceptor_t *a, double deadline,
                                   void *hello, int *fd_p, const int *extra,
                                   int nextra, int *ready)
{
    struct pollfd *pfd = malloc(sizeof(*pfd) *
                                (size_t)(1 + RCOLL_AUTH_PENDING_MAX + nextra));
    rcoll_status_t st = acceptor_loop(a, deadline, hello, fd_p, extra, nextra,
                                      ready, pfd);
    free(pfd);
    return st;
}

static rcoll_status_t acceptor_loop(rcoll_acceptor_t *a, double deadline,
                                    void *hello, int *fd_p, const int *extra,
                                    int nextra, int *ready, struct pollfd *pfd)
{
    if (!pfd)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory", a->who);
    for (;;) {
        double now = rcoll_time_sec();
        for (int i = 0; i < a->npend;) {
            if (now >= a->pend[i].deadline)
                acceptor_drop(a, i, "no valid hello within 10 s (half-open or "
                                    "silent)");
            else
                i++;
        }
        if (now >= deadline)
            return rcoll__set_error(RCOLL_ERR_TIMEOUT, "%s: no peer "
                                    "connected within RCOLL_TIMEOUT", a->who);
        int np = 0;
        /* full: the next connections wait in the backlog */
        pfd[np++] = (struct pollfd){
            .fd = a->npend < a->maxpend ? a->lfd : -1,
            .events = POLLIN};
        double wake = deadline;
        for (int i = 0; i < a->npend; i++) {
            pfd[np++] = (struct pollfd){.fd = a->pend[i].fd, .events = POLLIN};
            wake = RCOLL_MIN(wake, a->pend[i].deadline);
        }
        for (int i = 0; i < nextra; i++)
            pfd[np++] = (struct pollfd){.fd = extra[i], .events = POLLIN};
        int ms = (int)RCOLL_MIN((wake - now) * 1000.0 + 1, 1000.0);
        int n = poll(pfd, (nfds_t)np, ms < 0 ? 0 : ms);
        if (n < 0 && errno != EINTR)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "%s: poll: %s", a->who,
                                    strerror(errno));
        if (n <= 0)
            continue;
        for (int i = 0; i < nextra; i++)
            if (pfd[1 + a->npend + i].revents) {
                *ready = i;
                return RCOLL_INPROGRESS;
            }
        /* pending connections first (indices are stable until a drop) */
        for (int k = a->npend; k >= 1; k--) {
            if (!pfd[k].revents)
                continue;
            int i = k - 1;
            if (acceptor_read(a, i) == 1) {
                rcoll_auth_pending_t *p = &a->pend[i];
                memcpy(hello, p->msg + 16, a->hlen);
                *fd_p = p->fd;
                rcoll_sock_set_nonblock(p->fd, 0);
                rcoll_sock_tune(p->fd);
                a->pend[i] = a->pend[--a->npend];
                return RCOLL_OK;
            }
        }
        if (pfd[0].revents & POLLIN)
            acceptor_take(a);
        if (a->nofile) {
            char hint[320];
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "%s: accept: %s%s",
                                    a->who, strerror(a->nofile),
                                    rcoll_fd_limit_hint(a->nofile, hint,
                                                        sizeof(hint)));
        }
    }
}

void rcoll_acceptor_fini(rcoll_acceptor_t *a)
{
    for (int i = 0; i < a->npend; i++)
        close(a->pend[i].fd);
    a->npend = 0;
}
