/* The parameter table and its parser. */
#include "params.h"
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

rcoll_config_t rcoll_config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static rcoll_status_t config_status = RCOLL_OK;
static char config_error[512];

typedef int (*param_parse_fn)(const char *s, void *dst);
typedef void (*param_print_fn)(const void *dst, char *buf, size_t len);

typedef struct {
    rcoll_param_info_t info;
    size_t offset;
    param_parse_fn parse;
    param_print_fn print;
} param_t;

static int parse_int(const char *s, void *dst)
{
    char *end;
    long v = strtol(s, &end, 0);
    if (end == s || *end != '\0' || v < 0 || v > 1 << 30)
        return -1;
    *(int *)dst = (int)v;
    return 0;
}
static void print_int(const void *dst, char *b, size_t l)
{
    snprintf(b, l, "%d", *(const int *)dst);
}

int rcoll_parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s || s[0] == '-')
        return -1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': v <<= 10; end++; break;
    case 'M': v <<= 20; end++; break;
    case 'G': v <<= 30; end++; break;
    default: return -1;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)v;
    return 0;
}
static int parse_size(const char *s, void *dst)
{
    return rcoll_parse_size(s, (size_t *)dst);
}
static void print_size(const void *dst, char *b, size_t l)
{
    snprintf(b, l, "%zu", *(const size_t *)dst);
}

static int parse_seconds(const char *s, void *dst)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v > 0))
        return -1;
    *(double *)dst = v;
    return 0;
}
static void print_seconds(const void *dst, char *b, size_t l)
{
    snprintf(b, l, "%g", *(const double *)dst);
}

static int parse_link(const char *s, void *dst)
{
    rcoll_link_model_t m;
    char extra;
    if (sscanf(s, "%lf,%lf%c", &m.alpha_us, &m.gbps, &extra) != 2 ||
        !(m.alpha_us >= 0) || !(m.gbps > 0))
        return -1;
    *(rcoll_link_model_t *)dst = m;
    return 0;
}
static void print_link(const void *dst, char *b, size_t l)
{
    const rcoll_link_model_t *m = dst;
    snprintf(b, l, "%g,%g", m->alpha_us, m->gbps);
}

static int parse_string(const char *s, void *dst)
{
    *(const char **)dst = s[0] ? s : NULL;
    return 0;
}
static void print_string(const void *dst, char *b, size_t l)
{
    const char *s = *(const char *const *)dst;
    snprintf(b, l, "%s", s ? s : "");
}

static int parse_level(const char *s, void *dst)
{
    static const char *const names[] = {"none", "warn", "info", "debug",
                                        "trace"};
    for (int i = 0; i < 5; i++) {
        if (!strcasecmp(s, names[i])) {
            *(int *)dst = i;
            return 0;
        }
    }
    return -1;
}
static void print_level(const void *dst, char *b, size_t l)
{
    static const char *const names[] = {"none", "warn", "info", "debug",
                                        "trace"};
    snprintf(b, l, "%s", names[*(const int *)dst]);
}

static const struct {
    const char *name;
    int bit;
} subsys_names[] = {{"init", RCOLL_SUBSYS_INIT}, {"boot", RCOLL_SUBSYS_BOOT},
                    {"net", RCOLL_SUBSYS_NET},   {"coll", RCOLL_SUBSYS_COLL},
                    {"tune", RCOLL_SUBSYS_TUNE}, {"all", RCOLL_SUBSYS_ALL}};
#define NSUBSYS ((int)(sizeof(subsys_names) / sizeof(subsys_names[0])))

static int parse_subsys(const char *s, void *dst)
{
    char buf[256];
    int mask = 0, neg = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    char *p = buf, *tok, *save = NULL;
    if (*p == '^') {
        neg = 1;
        p++;
    }
    for (tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int i;
        for (i = 0; i < NSUBSYS; i++)
            if (!strcasecmp(tok, subsys_names[i].name))
                break;
        if (i == NSUBSYS)
            return -1;
        mask |= subsys_names[i].bit;
    }
    *(int *)dst = neg ? (RCOLL_SUBSYS_ALL & ~mask) : mask;
    return 0;
}
static void print_subsys(const void *dst, char *b, size_t l)
{
    int m = *(const int *)dst;
    size_t off = 0;
    b[0] = '\0';
    if (m == RCOLL_SUBSYS_ALL) {
        snprintf(b, l, "all");
        return;
    }
    for (int i = 0; i < NSUBSYS - 1 && off < l; i++)
        if (m & subsys_names[i].bit)
            off += (size_t)snprintf(b + off, l - off, "%s%s", off ? "," : "",
                                    subsys_names[i].name);
}

#define P(_name, _def, _type, _field, _kind, _doc)                           \
    {{"RCOLL_" _name, _def, _type, _doc},                                    \
     offsetof(rcoll_config_t, _field), parse_##_kind, print_##_kind}

static const param_t params[] = {
    P("DEBUG", "warn", "level", log_level, level,
      "log level: none, warn, info, debug, trace (to stderr)"),
    P("DEBUG_SUBSYS", "all", "list", log_subsys, subsys,
      "subsystems logged at info and below: init,boot,net,coll,tune,all; "
      "^list excludes"),
    P("TIMEOUT", "300", "seconds", timeout, seconds,
      "an operation or bootstrap step that makes no progress for this long "
      "fails with RCOLL_ERR_TIMEOUT naming the rank it waits for and the "
      "root cause found by following the chain of waits (up to 2 s more "
      "per rank that does not answer)"),
    P("DUMP_SIGNAL", "USR1", "string", dump_signal, string,
      "kill -USR1 (or USR2) makes the process print every communicator and "
      "each operation in flight with the step and peer it waits for (as "
      "rcoll_comm_dump(NULL)), each transport's lanes and counters, to "
      "stderr, or to rcoll-info -p PID when that asked; none turns it off. "
      "Installed only if the application has no handler of its own"),
    P("CHECKSUM", "0", "int", checksum, int,
      "1: every chunk carries a CRC32C of its header and payload, checked "
      "before the data is used; a mismatch fails the operation with "
      "RCOLL_ERR_CORRUPT naming the sender (off by default: it costs a pass "
      "over the data on both sides)"),
    P("TOPO_FILE", "", "path", topo_file, string,
      "the host's topology in hwloc's XML format (lstopo --of xml): GPUs, "
      "NICs, the PCIe tree and NVLink, instead of detecting it with hwloc "
      "(virtual machines hide the real PCIe tree); rcoll-topo explains the "
      "decisions taken from it; the ib transport takes each rank's NIC "
      "from it (RCOLL_IB_NIC=spread)"),
    P("TOPO_DUMP_FILE", "", "path", topo_dump_file, string,
      "rank 0 writes the topology in use (RCOLL_TOPO_FILE's, else the one "
      "hwloc detects) to this file in hwloc's XML when a communicator is "
      "created; rcoll-topo --xml reads it back"),
    P("GDR_LEVEL", "PXB", "string", gdr_level, string,
      "farthest GPU-NIC path class (PIX, PXB, PHB, SYS) at which GPUDirect "
      "RDMA is used; farther paths stage through host memory (shown by "
      "rcoll-topo; GPUDirect RDMA is not built yet: GPU buffers stage "
      "through host memory)"),
    P("CUDA", "1", "int", cuda, int,
      "0: never load the CUDA driver (every buffer is host memory); 1: "
      "load libcuda.so.1 at the first collective, if present, to tell "
      "device buffers from host buffers"),
    P("SPIN_US", "200", "int", spin_us, int,
      "microseconds a waiting rank polls (yielding the CPU between looks) "
      "before it blocks; 0 blocks at once"),
    P("RANK", "", "int", rank, string,
      "this process's rank (set by rcoll-run, or by hand with RCOLL_SIZE and "
      "RCOLL_ROOT)"),
    P("SIZE", "", "int", size, string, "number of ranks (rcoll_comm_init_env)"),
    P("ROOT", "", "host:port", root, string,
      "where rank 0 listens for the bootstrap and the others connect "
      "(rcoll_comm_init_env)"),
    P("ROOT_FD", "", "int", root_fd, string,
      "an open listening socket at RCOLL_ROOT's port that rank 0 takes for "
      "its first rendezvous (set by rcoll-run, which holds the port from "
      "choosing it until rank 0 runs, so that no other socket takes it)"),
    P("SECRET", "", "hex", secret, string,
      "the job's 128-bit secret as 32 hex digits (set by rcoll-run); when "
      "unset with RCOLL_ROOT a secret is derived from RCOLL_ROOT and "
      "RCOLL_SIZE, which only guards against accidents"),
    P("SOCKET_IFNAME", "", "list", socket_ifname, string,
      "network interfaces for bootstrap and TCP (prefixes, comma-separated; "
      "^ excludes, = exact); default: the interface that routes to the root, "
      "else the first non-loopback interface, else loopback"),
    P("TRANSPORTS", "", "list", transports, string,
      "transports to use (shm, ib, tcp); ^name excludes; empty: all usable; each "
      "pair of ranks uses the first both can use that reaches (shm: same "
      "host)"),
    P("SIMD", "1", "int", simd, int,
      "0: portable reduction loops for float16/bfloat16 instead of the "
      "F16C/AVX2 kernels (for comparison; results are identical)"),
    P("TCP_NSOCKS", "2", "int", tcp_nsocks, int,
      "TCP connections per peer, 1 to 16; messages are striped over them"),
    P("TCP_CONNECT", "auto", "string", tcp_connect, string,
      "eager: every TCP socket a rank needs is connected at init (a full "
      "mesh among its TCP peers); lazy: a socket is connected when the "
      "first message is sent on it, by the sender alone (the listener "
      "stays open), so a rank holds sockets only to the peers it talks "
      "to; auto: lazy from 33 ranks, eager below"),
    P("TCP_RAILS", "4", "int", tcp_rails, int,
      "network interfaces (rails) per rank that TCP spreads its sockets "
      "over, 1 to 4: the bootstrap's, then every other up interface of its "
      "address family (RCOLL_SOCKET_IFNAME's matches when set); socket k to "
      "a peer leaves through the k-th pair of rails in one subnet (mod the "
      "pairs), so RCOLL_TCP_NSOCKS should be at least the rail count; 1: "
      "the bootstrap's interface only"),
    P("RAIL_FAILOVER", "1", "int", rail_failover, int,
      "1: when one of a peer's TCP sockets, or ib queue pairs over several "
      "devices (RCOLL_IB_NIC=all), fails (its rail's link or NIC is lost) "
      "and another rail still reaches the peer, its messages go again over "
      "the others and the job goes on, with a warning naming the link and "
      "the peer (sends then go from a copy); 0: the peer fails as over one "
      "rail"),
    P("RAIL_TIMEOUT", "10", "seconds", rail_timeout, seconds,
      "where RCOLL_RAIL_FAILOVER can move a TCP socket's traffic to "
      "another rail, data unacknowledged this long ends the socket "
      "(TCP_USER_TIMEOUT; Linux also counts a peer whose receive window "
      "stays shut, a process that does not read at all: raise it to stop "
      "a rank in a debugger); 0: the kernel's default (minutes). ib: a "
      "queue pair with messages outstanding that hears nothing from the "
      "peer this long, while another to it answers, is lost, and so is one "
      "not connected this long after its first attempt on first use "
      "(RCOLL_IB_CONNECT=lazy) while another to the peer is; 0: only "
      "errors and events count"),
    P("RAIL_RETRY", "2", "seconds", rail_retry, seconds,
      "after RCOLL_RAIL_FAILOVER moved a lost TCP socket's (or ib queue "
      "pair's) traffic to the other rails, the lower rank of the pair "
      "connects it again this often, once nothing of it is left to send "
      "again; a rail that answers carries its share again (failback); 0: "
      "never"),
    P("CHUNK_SIZE", "512K", "size", chunk_size, size,
      "pipeline chunk = receive slot size in bytes (64 to 256M)"),
    P("NSLOTS", "4", "int", nslots, int,
      "receive slots (and so credits) per connection (at least 1; tcp: "
      "16x as many, up to 1024 in small communicators, at most this many "
      "holding a message over 4 KiB, or over 16 KiB up to 5 ranks)"),
    P("SHM_CMA_MIN", "0", "size", shm_cma_min, size,
      "shm messages of at least this many bytes that the receiver only "
      "copies (all-gather, broadcast, all-to-all chunks) are read straight "
      "out of the sender's memory (process_vm_readv: one copy instead of "
      "two), in transfers up to RCOLL_SHM_CMA_MAX; 0 (default): off, "
      "whether it pays depends on the host (docs/design.md)"),
    P("SHM_CMA_MAX", "4M", "size", shm_cma_max, size,
      "the largest transfer (one step's bytes to one peer) whose messages "
      "RCOLL_SHM_CMA_MIN reads in one copy; past it the two copies through "
      "the receive ring measured faster (docs/design.md)"),
    P("SHM_CMA_ALL", "0", "int", shm_cma_all, int,
      "1: single copy also for chunks the receiver reduces (it then fetches "
      "them into a bounce buffer first; slower, for tests)"),
    P("SHM_AREA", "64K", "size", shm_area, size,
      "bytes of each half of the data space in a rank's shared area (its "
      "/dev/shm segment), through which ranks that all share one host run "
      "small collectives with flags instead of messages; 0 turns the area "
      "off"),
    P("SHM_BUDGET", "15M", "size", shm_budget, size,
      "the most /dev/shm bytes one rank's segment takes (its receive rings, "
      "one per local peer, any pool, and its shared area): where the "
      "host's ranks need more at RCOLL_CHUNK_SIZE, a pool of slots shared "
      "by the peers keeps the chunk (RCOLL_SHM_POOL), or else the "
      "communicator's chunk is lowered (4 KiB steps, not below 4 KiB) "
      "until the rings fit; so memory grows with the ranks of a host, not "
      "their square; 0: no bound"),
    P("SHM_POOL", "1", "int", shm_pool, int,
      "1: where receive rings of RCOLL_CHUNK_SIZE slots for every local "
      "peer would pass RCOLL_SHM_BUDGET, a rank's rings get 4 KiB slots "
      "and its segment a pool of chunk-sized slots that all its peers "
      "draw from (2-3 x RCOLL_NSLOTS, as many as the budget holds), "
      "so the chunk stays RCOLL_CHUNK_SIZE; 0: the chunk is lowered "
      "instead"),
    P("SHM_AREA_MAX", "16K", "size", shm_area_max, size,
      "the largest input per rank (bytes) that a collective runs through "
      "the shared area (RCOLL_SHM_AREA); all-reduce, reduce and "
      "reduce-scatter use it while n times that is at most 4x this, "
      "broadcast (one input, copied once by each rank) up to 4x this; "
      "larger calls take the algorithms that send messages"),
    P("SHM_RNDV_MIN", "256K", "size", shm_rndv_min, size,
      "shm: a whole transfer of at least this many bytes that nothing "
      "pipelines (all-to-all, gather, scatter, point to point) moves as "
      "one message the receiver reads straight into its buffer "
      "(process_vm_readv, one copy); 0 turns it off"),
    P("P2P_EAGER", "64K", "size", p2p_eager, size,
      "point-to-point sends up to this many bytes go at once (eager); "
      "larger ones are announced and move once the receive is posted "
      "(rendezvous); must be the same on every rank"),
    P("UNEXPECTED_MAX", "1G", "size", unexpected_max, size,
      "bytes of messages a communicator may hold for operations not "
      "posted yet (small sends, early collective chunks) before the "
      "operation that waits fails with RCOLL_ERR_NO_MEMORY"),
    P("IB_HCA", "", "list", ib_hca, string,
      "RDMA devices the ib transport may use (names or prefixes, "
      "comma-separated; ^ excludes, = exact); default: every device with "
      "an active port and an IPv4 address (RCOLL_IB_NIC picks one per "
      "rank)"),
    P("IB_NIC", "auto", "string", ib_nic, string,
      "which allowed RDMA device each rank uses when its host has several "
      "with an IPv4 address: spread shares a host's ranks out over them "
      "(rank i of the host drives GPU i when the topology has one GPU per "
      "rank and takes that GPU's nearest NIC; else the ranks split into "
      "contiguous blocks, one per device in name order: every device must "
      "reach every other); auto: spread when the devices' addresses are in "
      "one subnet, else boot; boot: every rank the device that owns the "
      "bootstrap address; all: every rank all of them (up to 4), queue "
      "pair k of a pair over the k-th pair of devices on one subnet (set "
      "RCOLL_IB_QPS_PER_PEER to the device count or a multiple); a device "
      "lost mid-job then fails over (RCOLL_RAIL_FAILOVER: sends copy "
      "through staging) and is used again once it is back "
      "(RCOLL_RAIL_RETRY); receives in place register on each device"),
    P("IB_GID_INDEX", "auto", "int", ib_gid_index, string,
      "GID table index for RCOLL_IB_CONNECT=oob on RoCE; auto: "
      "(RoCE v2 with an IPv4 address first, never link-local)"),
    P("IB_QPS_PER_PEER", "1", "int", ib_qps_per_peer, int,
      "RC queue pairs per peer, 1 to 16; messages are striped over them"),
    P("IB_CONNECT", "auto", "string", ib_connect, string,
      "cm: connect every queue pair at init with librdmacm (works on "
      "iWARP, RoCE, IB); lazy: librdmacm too, but a peer's queue pairs, "
      "with their registered rings, are made when the first message goes "
      "to it (either side may start; the lower rank's attempt wins a "
      "tie), so a rank holds them only for the peers it talks to; auto: "
      "lazy from 33 ranks, cm below; oob: exchange queue pair numbers "
      "through the bootstrap and move them to RTS by hand (RoCE and "
      "InfiniBand only, at init)"),
    P("IB_IMM", "auto", "string", ib_imm, string,
      "1: signal each message with RDMA WRITE_WITH_IMM; 0: an RDMA WRITE "
      "then a small SEND (for iWARP devices without immediate data, e.g. "
      "siw); auto: 0 on iWARP devices other than erdma, else 1"),
    P("IB_INLINE", "128", "size", ib_inline, size,
      "messages up to this many payload bytes go inline in the work "
      "request (no staging copy; capped by the device)"),
    P("IB_PLACE_MIN", "1M", "size", ib_place_min, size,
      "receives of at least this many bytes whose destination nothing else "
      "touches (point to point, pairwise all-to-all, direct gather and "
      "scatter) register it and the sender RDMA-writes the data straight "
      "into it, not into a slot; 0: never (each one costs an ibv_reg_mr)"),
    P("IB_ZCOPY_MIN", "64K", "size", ib_zcopy_min, size,
      "ib messages of at least this many bytes are sent from the caller's "
      "buffer (the NIC reads it through a cached registration, no staging "
      "copy); 0: always through staging"),
    P("RCACHE_MAX", "1G", "size", rcache_max, size,
      "bytes of buffers a registration cache (one per RDMA device and "
      "communicator) keeps registered while unused; the least recently used "
      "go first. A buffer freed or unmapped is never used through its old "
      "registration (a userfaultfd monitor sees it go; without one, "
      "nothing is kept: rcoll-info -t says which)"),
    P("HOSTID", "", "string", hostid, string,
      "overrides this process's host identity: ranks with the same value "
      "are on one host (shared memory between them, one block of the ring "
      "order, one intra-host phase of hierarchical collectives); default: "
      "the kernel's boot id, the hostname and the network namespace"),
    P("RING_ORDER", "topo", "string", ring_order, string,
      "topo: rings and chains visit the ranks of each host contiguously "
      "(hosts in the order of their lowest rank, ranks by rank within a "
      "host), so a ring crosses the network once per host; user: rank "
      "order. Results land in user rank order either way"),
    P("ALGO", "", "list", algo, string,
      "force algorithms: e.g. broadcast:tree,allreduce:ring "
      "(rcoll-info -a lists them)"),
    P("NCHANNELS", "0", "int", nchannels, int,
      "channels of a ring all-reduce, all-gather, reduce-scatter or chain "
      "broadcast, 1 to 8: the data split in contiguous parts, each on its "
      "own ring (channel 1 runs the ring backwards; 2 and 3 rotate each "
      "host's ranks by half), so a host's traffic enters and leaves through "
      "several ranks and their NICs; 0: the tuner's choice, as many as the "
      "NICs one host's ranks use between them (ib with a device per rank) "
      "across hosts of at least that many ranks from 1 MiB a channel, "
      "else 1"),
    P("TUNE_SHM", "0.66,14.7", "us,GB/s", tune_shm, link,
      "the tuner's model of a shared-memory message: latency in "
      "microseconds, bandwidth in GB/s; the default was measured on the "
      "development machine with benchmarks/fit_tuner"),
    P("TUNE_TCP", "11.7,5.2", "us,GB/s", tune_tcp, link,
      "the tuner's model of a TCP message (benchmarks/fit_tuner)"),
    P("TUNE_REDUCE_GBPS", "8.7", "GB/s", tune_reduce_gbps, seconds,
      "the tuner's reduction bandwidth of one core (benchmarks/membw.c)"),
    P("CRC_SOFT", "0", "int", crc_soft, int,
      "1: the portable CRC32C (RCOLL_CHECKSUM) instead of SSE4.2's "
      "(results are identical; for tests)"),
    P("FAULT", "", "list", fault, string,
      "for tests: fault sites to trigger, comma-separated site[:n] (n: "
      "only its n-th time, a site named again fires again at its own n; "
      "default every time). Sites: tcp_unplace_nomem "
      "(ending a receive in place finds no memory to move a landed "
      "message into, which fails the peer); ib_cq_small (the completion "
      "queue gets room for the receives and 8 more entries, as on a device "
      "with a small max_cqe); tcp_failover_any (a peer's TCP sockets may "
      "fail over with one rail: over loopback); tcp_sock_drop (a send "
      "shuts its socket down after queueing, as if its rail failed); "
      "tcp_rejoin_cut (a failback's new connection is taken without "
      "its yes and cut at once, as if the answer was lost with the "
      "rail)"),
};
#define NPARAMS ((int)(sizeof(params) / sizeof(params[0])))

static void config_load(void)
{
    for (int i = 0; i < NPARAMS; i++) {
        const param_t *p = &params[i];
        void *dst = (char *)&rcoll_config + p->offset;
        if (p->parse(p->info.deflt, dst) != 0 && p->info.deflt[0]) {
            config_status = RCOLL_ERR_INTERNAL;
            snprintf(config_error, sizeof(config_error),
                     "bad default for %s", p->info.name);
            return;
        }
        const char *v = getenv(p->info.name);
        if (v && p->parse(v, dst) != 0) {
            config_status = RCOLL_ERR_INVALID_ARGUMENT;
            snprintf(config_error, sizeof(config_error),
                     "cannot parse %s=\"%s\" (expected %s: %s)", p->info.name,
                     v, p->info.type, p->info.doc);
            p->parse(p->info.deflt, dst);
        }
    }
    /* chunks travel with a 32-bit length */
    if (rcoll_config.chunk_size < 64)
        rcoll_config.chunk_size = 64;
    if (rcoll_config.chunk_size > ((size_t)256 << 20))
        rcoll_config.chunk_size = (size_t)256 << 20;
    if (rcoll_config.nslots < 1)
        rcoll_config.nslots = 1;
    if (rcoll_config.tcp_nsocks < 1)
        rcoll_config.tcp_nsocks = 1;
    if (rcoll_config.tcp_nsocks > 16)
        rcoll_config.tcp_nsocks = 16;
    rcoll_config.tcp_rails = RCOLL_MAX(1, RCOLL_MIN(rcoll_config.tcp_rails, 4));
    /* 0: the tuner's; at most COLL_CHAN_MAX (coll/sched.h) */
    rcoll_config.nchannels = RCOLL_MAX(0, RCOLL_MIN(rcoll_config.nchannels, 8));
    if (rcoll_config.ib_qps_per_peer < 1)
        rcoll_config.ib_qps_per_peer = 1;
    if (rcoll_config.ib_qps_per_peer > 16)
        rcoll_config.ib_qps_per_peer = 16;
    if (rcoll_config.nslots > 1024) /* the immediate's slot field */
        rcoll_config.nslots = 1024;
    rcoll__log_level = rcoll_config.log_level;
    rcoll__log_subsys = rcoll_config.log_subsys;
}

rcoll_status_t rcoll_config_init(void)
{
    pthread_once(&config_once, config_load);
    if (config_status != RCOLL_OK)
        return rcoll__set_error(config_status, "%s", config_error);
    return RCOLL_OK;
}

rcoll_status_t rcoll_config_parse_value(const char *name, const char *value)
{
    rcoll_config_t scratch = rcoll_config;
    for (int i = 0; i < NPARAMS; i++) {
        const param_t *p = &params[i];
        if (strcmp(p->info.name, name) != 0)
            continue;
        return p->parse(value, (char *)&scratch + p->offset) == 0
                   ? RCOLL_OK
                   : RCOLL_ERR_INVALID_ARGUMENT;
    }
    return RCOLL_ERR_INVALID_ARGUMENT;
}

int rcoll_config_nparams(void)
{
    return NPARAMS;
}

/* The settings that shape schedules or the wire: ranks that differ in one
 * of them would exchange messages of other lengths or meanings (a hang,
 * a size mismatch, or worse, messages of equal length and different
 * meaning). rcoll_comm_init* compares them across ranks (core/comm.c).
 * Settings that stay local (timeouts, logging, spin, which transports a
 * rank offers, memory bounds) are not here. A new setting that shapes a
 * schedule or a message goes here too. */
static const char *const shared_params[] = {
    "RCOLL_CHECKSUM",    "RCOLL_CHUNK_SIZE",      "RCOLL_NSLOTS",
    "RCOLL_TCP_NSOCKS",  "RCOLL_TCP_CONNECT", "RCOLL_P2P_EAGER",       "RCOLL_IB_QPS_PER_PEER",
    "RCOLL_IB_CONNECT",  "RCOLL_IB_IMM",          "RCOLL_RING_ORDER",
    "RCOLL_ALGO",        "RCOLL_TUNE_SHM",        "RCOLL_TUNE_TCP",
    "RCOLL_TUNE_REDUCE_GBPS", "RCOLL_SHM_AREA",       "RCOLL_SHM_AREA_MAX",
    "RCOLL_SHM_BUDGET",  "RCOLL_SHM_POOL",    "RCOLL_RAIL_FAILOVER",
    "RCOLL_NCHANNELS"};

int rcoll_config_is_shared(int i)
{
    for (size_t k = 0; k < sizeof(shared_params) / sizeof(shared_params[0]);
         k++)
        if (!strcmp(params[i].info.name, shared_params[k]))
            return 1;
    return 0;
}

const rcoll_param_info_t *rcoll_config_param(int i)
{
    return (i >= 0 && i < NPARAMS) ? &params[i].info : NULL;
}

void rcoll_config_value_string(int i, char *buf, size_t len)
{
    rcoll_config_init();
    params[i].print((const char *)&rcoll_config + params[i].offset, buf, len);
}

#define FAULT_SITES 16
static int fault_hits[FAULT_SITES];

int rcoll_fault(const char *site)
{
    const char *p = rcoll_config.fault;
    size_t n = strlen(site);
    int fire = 0;
    for (int i = 0; p && *p; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len >= n && !strncmp(p, site, n) && (len == n || p[n] == ':')) {
            long nth = len > n ? strtol(p + n + 1, NULL, 10) : 0;
            int hit = __atomic_add_fetch(&fault_hits[i % FAULT_SITES], 1,
                                         __ATOMIC_RELAXED);
            /* (a site named again with another count fires again then:
             * every entry counts every call) */
            if (!fire && (nth <= 0 || hit == nth)) {
                rcoll_warn("RCOLL_FAULT: %s, its time %d", site, hit);
                fire = 1;
            }
        }
        p = e ? e + 1 : NULL;
    }
    return fire;
}

int rcoll_config_name_allowed(const char *spec, const char *name)
{
    char buf[256];
    int neg = 0, found = 0;
    if (!spec || !spec[0])
        return 1;
    snprintf(buf, sizeof(buf), "%s", spec);
    char *p = buf, *tok, *save = NULL;
    if (*p == '^') {
        neg = 1;
        p++;
    }
    for (tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (!strcmp(tok, name))
            found = 1;
    return neg ? !found : found;
}

int rcoll_dump_signal_number(const char *v)
{
    if (!v || !*v || !strcmp(v, "0") || !strcasecmp(v, "none"))
        return 0;
    if (!strcasecmp(v, "USR1") || !strcasecmp(v, "SIGUSR1"))
        return SIGUSR1;
    if (!strcasecmp(v, "USR2") || !strcasecmp(v, "SIGUSR2"))
        return SIGUSR2;
    return -1;
}
