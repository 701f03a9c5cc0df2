/* The one table of RCOLL_* parameters. Every variable the library reads is
 * declared in config.c with its type, default and doc string; nothing else
 * calls getenv(). rcoll-info -c prints the table. */
#ifndef RCOLL_PARAMS_H
#define RCOLL_PARAMS_H

#include "util.h"

/* A link in the tuner's model: a message costs alpha + bytes / bandwidth. */
typedef struct {
    double alpha_us;
    double gbps;
} rcoll_link_model_t;

typedef struct {
    /* logging */
    int log_level;
    int log_subsys;
    /* errors */
    double timeout;             /* seconds without progress -> error */
    int spin_us;                /* yielding poll before blocking */
    int simd;                   /* vector 16-bit float kernels */
    const char *dump_signal;    /* USR1 | USR2 | none */
    int checksum;               /* CRC32C of each chunk, checked on receipt */
    int cuda;                   /* 0: never load the CUDA driver */
    /* launch / bootstrap */
    const char *rank;           /* raw strings: parsed by init_env */
    const char *size;
    const char *root;
    const char *root_fd;
    const char *secret;
    const char *socket_ifname;
    const char *transports;
    /* tcp transport */
    int tcp_nsocks;
    const char *tcp_connect;    /* auto | eager | lazy */
    int tcp_rails;              /* interfaces per rank TCP uses, 1-4 */
    int rail_failover;          /* a lost socket's traffic moves over */
    double rail_timeout;        /* TCP_USER_TIMEOUT there, seconds */
    double rail_retry;          /* failback attempts' interval, seconds */
    size_t chunk_size;          /* slot payload bytes */
    int nslots;                 /* receive slots per connection */
    size_t shm_cma_min;         /* shm single copy from this size; 0 off */
    size_t shm_cma_max;         /* and for transfers up to this size */
    int shm_cma_all;            /* also for chunks the receiver reduces */
    size_t shm_area;            /* shared-area buffer bytes (coll/area.c) */
    size_t shm_budget;          /* most /dev/shm bytes per rank's segment */
    int shm_pool;               /* a shared pool keeps the chunk in budget */
    size_t shm_area_max;        /* largest input that takes the area */
    size_t shm_rndv_min;        /* shm: whole transfers (RCOLL_TL_WHOLE)
                                   from this size in one single-copy
                                   message; 0 off */
    /* matching (coll/match.c) */
    size_t p2p_eager;           /* larger sends rendezvous */
    size_t unexpected_max;      /* bytes set aside per communicator */
    /* verbs transport */
    const char *ib_hca;         /* device names, ^ excludes */
    const char *ib_nic;         /* auto | boot: a device per rank */
    const char *ib_gid_index;   /* "auto" or an index */
    int ib_qps_per_peer;
    const char *ib_connect;     /* cm | oob */
    const char *ib_imm;         /* auto | 1 | 0 */
    size_t ib_inline;           /* inline sends up to this many bytes */
    size_t ib_place_min;        /* receives in place (RDMA) from this */
    size_t ib_zcopy_min;        /* sends from the caller's buffer from this */
    size_t rcache_max;          /* bytes the registration caches keep */
    /* topology (src/topo; read by rcoll-topo in this release) */
    const char *topo_file;      /* hwloc XML */
    const char *topo_dump_file; /* write the topology in use here */
    const char *gdr_level;      /* PIX | PXB | PHB | SYS */
    /* placement */
    const char *hostid;         /* host identity override */
    const char *ring_order;     /* topo | user */
    /* algorithms */
    const char *algo;
    int nchannels;              /* channels per ring collective; 0: the tuner's */
    /* the tuner's cost model (coll/tuner.c) */
    rcoll_link_model_t tune_shm;
    rcoll_link_model_t tune_tcp;
    double tune_reduce_gbps;    /* one core's dst = a op b, GB/s */
    int crc_soft;               /* portable CRC32C (tests) */
    const char *fault;          /* test fault sites (rcoll_fault) */
} rcoll_config_t;

extern rcoll_config_t rcoll_config;

/* Reads the environment once (thread-safe); later calls are no-ops. Returns
 * RCOLL_ERR_INVALID_ARGUMENT (with a message) on an unparsable value. */
rcoll_status_t rcoll_config_init(void);

typedef struct {
    const char *name;     /* RCOLL_... */
    const char *deflt;
    const char *type;     /* "int", "size", "seconds", "string", ... */
    const char *doc;
} rcoll_param_info_t;

/* For rcoll-info: the table and the current (parsed) value as a string. */
int rcoll_config_nparams(void);
/* Parses `value` as the variable `name` would be, into a scratch copy (the
 * configuration is not changed): RCOLL_OK or RCOLL_ERR_INVALID_ARGUMENT.
 * For tests and the fuzzer. */
rcoll_status_t rcoll_config_parse_value(const char *name, const char *value);
const rcoll_param_info_t *rcoll_config_param(int i);
void rcoll_config_value_string(int i, char *buf, size_t len);
/* 1 if parameter i shapes schedules or the wire, so every rank of a
 * communicator must have the same value (checked at init). */
int rcoll_config_is_shared(int i);

/* Test hook: 1 if the fault site `site` is to fail now (RCOLL_FAULT names
 * it, and this is its time); logs a warning when it fires. Cold paths
 * only: it scans the setting's string. */
int rcoll_fault(const char *site);

/* Parses "1k", "512K", "8M", "2G" (binary) into bytes; -1 on error. */
int rcoll_parse_size(const char *s, size_t *out);

/* RCOLL_DUMP_SIGNAL's value as a signal number: SIGUSR1, SIGUSR2, 0 for
 * none (or empty), -1 if it is none of these. */
int rcoll_dump_signal_number(const char *v);
/* rcoll-info -p PID: the file it creates (empty, mode 0600) before it
 * sends the dump signal, and that process's dump then goes to, ended by a
 * line RCOLL_DUMP_END (core/dump.c). */
#define RCOLL_DUMP_REPLY_FMT "/tmp/rcoll-dump.%d"
#define RCOLL_DUMP_END "rcoll: end of dump"

/* RCOLL_TRANSPORTS: 1 if transport `name` is allowed by `spec`
 * ("tcp,shm" include list, "^shm" exclude list, NULL/empty = all). */
int rcoll_config_name_allowed(const char *spec, const char *name);

#endif
