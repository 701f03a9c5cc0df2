/* The TCP transport's rails (tcp.h): the network interfaces a rank's
 * sockets leave through. Rail 0 is the bootstrap's address (the interface
 * that routes to the root, or RCOLL_SOCKET_IFNAME's first match); every
 * other up interface of the same address family (RCOLL_SOCKET_IFNAME's
 * other matches, when it is set) is one more rail, up to RCOLL_TCP_RAILS.
 * Ranks exchange their rails through the bootstrap, and a rank pairs its
 * rails with a peer's by subnet: two addresses in one subnet reach each
 * other without a router, so their pair is a path of its own (NCCL and
 * aws-ofi-nccl pair NICs the same way, by what each NIC reaches). */
#include "transport/tcp/tcp.h"
#include <ifaddrs.h>
#include <net/if.h>

static int prefix_len(const struct sockaddr *mask)
{
    const uint8_t *b;
    int n = 0, len;
    if (!mask)
        return -1;
    if (mask->sa_family == AF_INET) {
        b = (const uint8_t *)&((const struct sockaddr_in *)mask)->sin_addr;
        len = 4;
    } else if (mask->sa_family == AF_INET6) {
        b = (const uint8_t *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
        len = 16;
    } else {
        return -1;
    }
    for (int i = 0; i < len; i++)
        n += __builtin_popcount(b[i]);
    return n;
}

/* The address bytes of an AF_INET/AF_INET6 sockaddr (4 or 16 of them). */
static int addr_bytes(const struct sockaddr *sa, uint8_t out[16])
{
    memset(out, 0, 16);
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 4;
    }
    memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    return 16;
}

static void rail_set(tcp_rail_t *r, const struct sockaddr *sa, int prefix,
                     const char *ifname)
{
    memset(r, 0, sizeof(*r));
    r->family = sa->sa_family == AF_INET ? 4 : 6;
    addr_bytes(sa, r->addr);
    r->prefix = (uint8_t)(prefix < 0 ? (r->family == 4 ? 32 : 128) : prefix);
    snprintf(r->ifname, sizeof(r->ifname), "%s", ifname);
}

static int rail_on(const tcp_rails_t *rs, const char *ifname,
                   const uint8_t addr[16])
{
    for (int i = 0; i < rs->nrails; i++)
        if (!strcmp(rs->rail[i].ifname, ifname) ||
            !memcmp(rs->rail[i].addr, addr, 16))
            return 1;
    return 0;
}

/* Container bridges, overlays and tunnels: their subnets span hosts by
 * design (or are private to each), so pairing them would send a rail's
 * share through an encapsulating path; left out unless
 * RCOLL_SOCKET_IFNAME names them. */
static const char *const not_rails[] = {
    "docker", "virbr", "br-", "cni", "flannel", "cali", "vxlan", "weave",
    "kube", "lxc", "lxd", "wg", "tun", "tap", "tailscale", "zt", NULL};

/* Whether an interface address may be a rail besides rail 0. */
static int rail_candidate(const struct ifaddrs *ifa, int family,
                          const char *spec)
{
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family ||
        !(ifa->ifa_flags & IFF_UP) || !(ifa->ifa_flags & IFF_RUNNING) ||
        (ifa->ifa_flags & (IFF_LOOPBACK | IFF_POINTOPOINT)))
        return 0;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(
            &((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
        return 0;
    if (spec)
        return rcoll_sock_ifname_match(spec, ifa->ifa_name);
    for (int i = 0; not_rails[i]; i++)
        if (!strncmp(ifa->ifa_name, not_rails[i], strlen(not_rails[i])))
            return 0;
    return 1;
}

void tcp_rails_find(const rcoll_sockaddr_t *boot, int max, tcp_rails_t *rs)
{
    struct ifaddrs *list = NULL;
    int family = boot->sa.sa_family;
    uint8_t a0[16];
    memset(rs, 0, sizeof(*rs));
    addr_bytes(&boot->sa, a0);
    rail_set(&rs->rail[0], &boot->sa, -1, "?");
    rs->nrails = 1;
    if (getifaddrs(&list) != 0)
        return;
    /* rail 0's interface and subnet, where the address is one of ours */
    for (struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        uint8_t a[16];
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family)
            continue;
        addr_bytes(ifa->ifa_addr, a);
        if (!memcmp(a, a0, 16)) {
            rail_set(&rs->rail[0], ifa->ifa_addr,
                     prefix_len(ifa->ifa_netmask), ifa->ifa_name);
            break;
        }
    }
    /* over loopback every peer is on this host: one rail is all there is */
    for (struct ifaddrs *ifa = list; ifa && !rcoll_sock_addr_is_loopback(boot);
         ifa = ifa->ifa_next) {
        uint8_t a[16];
        if (rs->nrails >= RCOLL_MIN(max, TCP_MAX_RAILS))
            break;
        if (!rail_candidate(ifa, family, rcoll_config.socket_ifname))
            continue;
        addr_bytes(ifa->ifa_addr, a);
        if (rail_on(rs, ifa->ifa_name, a))
            continue;
        rail_set(&rs->rail[rs->nrails++], ifa->ifa_addr,
                 prefix_len(ifa->ifa_netmask), ifa->ifa_name);
    }
    freeifaddrs(list);
}

static int same_subnet(const tcp_rail_t *a, const tcp_rail_t *b)
{
    int bits = RCOLL_MIN(a->prefix, b->prefix);
    if (a->family != b->family)
        return 0;
    for (int i = 0; i < 16 && bits > 0; i++, bits -= 8) {
        uint8_t m = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
        if ((a->addr[i] & m) != (b->addr[i] & m))
            return 0;
    }
    return 1;
}

/* A peer's rail with an address of ours, on another host, is a network
 * private to each host (a container bridge has the same address on every
 * host): a connection there would reach this host. */
static int host_local(const tcp_rails_t *me, const tcp_rails_t *peer,
                      const tcp_rail_t *r)
{
    if (!memcmp(me->rail[0].addr, peer->rail[0].addr, 16))
        return 0; /* the same host: its addresses are ours */
    for (int i = 0; i < me->nrails; i++)
        if (!memcmp(me->rail[i].addr, r->addr, 16))
            return 1;
    return 0;
}

int tcp_rails_pair(const tcp_rails_t *me, const tcp_rails_t *peer,
                   uint8_t pairs[][2])
{
    int n = 1, taken[TCP_MAX_RAILS] = {1};
    pairs[0][0] = pairs[0][1] = 0; /* the bootstrap's path: it reached */
    for (int i = 1; i < me->nrails && i < TCP_MAX_RAILS; i++)
        for (int j = 1; j < peer->nrails && j < TCP_MAX_RAILS; j++)
            if (!taken[j] && same_subnet(&me->rail[i], &peer->rail[j]) &&
                !host_local(me, peer, &peer->rail[j])) {
                taken[j] = 1;
                pairs[n][0] = (uint8_t)i;
                pairs[n][1] = (uint8_t)j;
                n++;
                break;
            }
    return n;
}

void tcp_rail_addr(const tcp_rail_t *r, uint16_t port, rcoll_sockaddr_t *sa)
{
    memset(sa, 0, sizeof(*sa));
    if (r->family == 4) {
        sa->sin.sin_family = AF_INET;
        memcpy(&sa->sin.sin_addr, r->addr, 4);
        sa->sin.sin_port = htons(port);
    } else {
        sa->sin6.sin6_family = AF_INET6;
        memcpy(&sa->sin6.sin6_addr, r->addr, 16);
        sa->sin6.sin6_port = htons(port);
    }
}

int tcp_rail_of(const tcp_rails_t *rs, int fd)
{
    rcoll_sockaddr_t sa;
    socklen_t sl = sizeof(sa);
    uint8_t a[16];
    if (getsockname(fd, &sa.sa, &sl) != 0 ||
        (sa.sa.sa_family != AF_INET && sa.sa.sa_family != AF_INET6))
        return -1;
    addr_bytes(&sa.sa, a);
    for (int i = 0; i < rs->nrails; i++)
        if (!memcmp(rs->rail[i].addr, a, 16))
            return i;
    return -1;
}

void tcp_rails_str(const tcp_rails_t *rs, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < rs->nrails && off < len; i++) {
        rcoll_sockaddr_t sa;
        char a[96];
        tcp_rail_addr(&rs->rail[i], 0, &sa);
        rcoll_sock_addr_str(&sa, a, sizeof(a));
        /* the port (":0") says nothing here */
        char *colon = strrchr(a, ':');
        if (colon)
            *colon = '\0';
        off += (size_t)snprintf(buf + off, len - off, "%s%d %s %s/%d",
                                i ? ", " : "", i, rs->rail[i].ifname, a,
                                rs->rail[i].prefix);
    }
}

int tcp_ep_fo(tcp_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    uint8_t pairs[TCP_MAX_RAILS][2];
    if (ep->fo >= 0)
        return ep->fo;
    if (!rcoll_config.rail_failover || ctx->nsocks < 2)
        return ep->fo = 0;
    if (!ctx->rails || !ctx->rails[ctx->p.rank].nrails ||
        !ctx->rails[ep->peer].nrails)
        return 0; /* the rails are not known yet */
    ep->fo = tcp_rails_pair(&ctx->rails[ctx->p.rank], &ctx->rails[ep->peer],
                            pairs) >= 2 ||
             rcoll_fault("tcp_failover_any"); /* (tests: one rail) */
    return ep->fo;
}
