/* rcoll_comm_init_env: rank, size and rendezvous from the launcher.
 *
 * Order: RCOLL_RANK/RCOLL_SIZE/RCOLL_ROOT (rcoll-run or by hand), torchrun
 * (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; rank 0 listens on MASTER_PORT+1
 * because torchrun's agent may already serve a TCPStore on MASTER_PORT),
 * Open MPI (OMPI_COMM_WORLD_RANK/SIZE), Slurm (SLURM_PROCID/NTASKS) and any
 * PMIx launcher (PMIX_RANK). The last three take the rendezvous from
 * RCOLL_ROOT when set, else through PMIx: rank 0 makes a unique id and
 * publishes it, the others read it after a fence. */
#include "core.h"
#include "util/dl.h"
#include "util/params.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#ifdef HAVE_PMIX
#include <pmix.h>
#endif

/* Launcher variables are not RCOLL_* parameters: they belong to the
 * launchers, so they are read here and only here. */
static const char *lenv(const char *name)
{
    const char *v = getenv(name);
    return (v && v[0]) ? v : NULL;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 0 || v > (1 << 24))
        return -1;
    *out = (int)v;
    return 0;
}

/* Secret for hand-started jobs without RCOLL_SECRET: derived from what all
 * ranks share. It stops accidental cross-talk between jobs, not attackers;
 * rcoll-run always sets a random RCOLL_SECRET. */
static void derive_secret(const char *root, int size, uint8_t secret[16])
{
    char buf[300];
    uint8_t k1[16] = "rcoll-secret-k1", k2[16] = "rcoll-secret-k2";
    snprintf(buf, sizeof(buf), "%s/%d", root, size);
    uint64_t a = rcoll_siphash(k1, buf, strlen(buf));
    uint64_t b = rcoll_siphash(k2, buf, strlen(buf));
    memcpy(secret, &a, 8);
    memcpy(secret + 8, &b, 8);
}

/* The listening socket rcoll-run opened at the root's port and left open
 * in rank 0 (RCOLL_ROOT_FD), taken once: the port was never free between
 * rcoll-run choosing it and rank 0 listening, where another process's
 * connection could take it ("Address already in use"). -1 if none, or
 * not a listener at that port. */
static int root_fd_inherited(const rcoll_sockaddr_t *want)
{
    static int taken;
    const char *v = rcoll_config.root_fd;
    char *end;
    if (!v || !*v || __atomic_exchange_n(&taken, 1, __ATOMIC_ACQ_REL))
        return -1;
    long fd = strtol(v, &end, 10);
    int listening = 0;
    socklen_t l = sizeof(listening);
    rcoll_sockaddr_t a;
    socklen_t al = sizeof(a);
    if (*end || fd < 0 || fd > 65535 ||
        getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l) ||
        !listening || getsockname((int)fd, &a.sa, &al) ||
        a.sa.sa_family != want->sa.sa_family ||
        (a.sa.sa_family == AF_INET ? a.sin.sin_port != want->sin.sin_port
                                   : a.sin6.sin6_port != want->sin6.sin6_port))
        return -1;
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    rcoll_sock_set_nonblock((int)fd, 1);
    rcoll_info(RCOLL_SUBSYS_INIT, "rank 0: the root listens on the socket "
               "rcoll-run opened (RCOLL_ROOT_FD=%ld)", fd);
    return (int)fd;
}

/* Rank 0 of a RCOLL_ROOT-style job serves the rendezvous itself. */
rcoll_status_t rcoll__root_listen(const rcoll_sockaddr_t *want,
                                  const uint8_t secret[16])
{
    rcoll_sockaddr_t a = *want;
    int fd = root_fd_inherited(want);
    char buf[128];
    rcoll_status_t st;
    if (fd >= 0)
        return rcoll_boot_root_start(fd, secret, rcoll_config.timeout);
    /* the previous communicator's root may still hold the port for a
     * moment after serving its rendezvous */
    double until = rcoll_time_sec() + 2.0;
    while ((st = rcoll_sock_listen(&a, 1, &fd)) != RCOLL_OK &&
           rcoll_time_sec() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        a = *want;
    }
    if (st != RCOLL_OK) {
        /* the name may resolve to an address of another interface: listen
         * on all of them at that port */
        rcoll_sockaddr_t any;
        memset(&any, 0, sizeof(any));
        any.sa.sa_family = want->sa.sa_family;
        if (any.sa.sa_family == AF_INET)
            any.sin.sin_port = want->sin.sin_port;
        else
            any.sin6.sin6_port = want->sin6.sin6_port;
        st = rcoll_sock_listen(&any, 1, &fd);
        if (st != RCOLL_OK)
            return rcoll__set_error(st, "rank 0 cannot listen on the root "
                                    "address %s: %s",
                                    rcoll_sock_addr_str(want, buf,
                                                        sizeof(buf)),
                                    rcoll_last_error());
    }
    return rcoll_boot_root_start(fd, secret, rcoll_config.timeout);
}

static rcoll_status_t init_with_root(rcoll_comm_t *comm, int rank, int size,
                                     const char *root_str, const char *who)
{
    rcoll_sockaddr_t root;
    uint8_t secret[16];
    rcoll_unique_id_t id;
    rcoll_status_t st;

    if ((st = rcoll_sock_parse_addr(root_str, &root)) != RCOLL_OK)
        return rcoll__set_error(st, "rcoll_comm_init_env (%s): %s", who,
                                rcoll_last_error());
    if (rcoll_config.secret) {
        if (rcoll_hex_decode(rcoll_config.secret, secret, 16) != 0)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "rcoll_comm_init_env: RCOLL_SECRET must "
                                    "be 32 hex digits");
    } else {
        derive_secret(root_str, size, secret);
    }
    if (rank == 0 && (st = rcoll__root_listen(&root, secret)) != RCOLL_OK)
        return st;
    rcoll_boot_id_pack(&root, secret, &id);
    rcoll_info(RCOLL_SUBSYS_BOOT, "init_env (%s): rank %d of %d, root %s",
               who, rank, size, root_str);
    return rcoll_comm_init_rank(comm, size, &id, rank);
}

#ifdef HAVE_PMIX
static int pmix_epoch; /* one key per communicator made through PMIx */

static rcoll_status_t init_with_pmix(rcoll_comm_t *comm, const char *who)
{
    pmix_proc_t me, proc;
    pmix_value_t *val = NULL, v;
    pmix_info_t info;
    rcoll_unique_id_t id;
    char key[64], hex[2 * sizeof(id) + 1];
    int rank, size;
    rcoll_status_t st;
    pmix_status_t rc;

    char why[320];
    if (rcoll_dl_open(RCOLL_DL_PMIX, why, sizeof(why)) != 0)
        return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED,
                                "rcoll_comm_init_env (%s): PMIx: %s; set "
                                "RCOLL_ROOT=host:port instead", who, why);
    rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED,
                                "rcoll_comm_init_env (%s): PMIx_Init failed "
                                "(%s); set RCOLL_ROOT=host:port instead", who,
                                PMIx_Error_string(rc));
    rank = (int)me.rank;
    PMIX_PROC_CONSTRUCT(&proc);
    PMIX_LOAD_PROCID(&proc, me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&proc, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) {
        PMIx_Finalize(NULL, 0);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "rcoll_comm_init_env (%s): "
                                "PMIx_Get(job size): %s", who,
                                PMIx_Error_string(rc));
    }
    size = (int)val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    snprintf(key, sizeof(key), "rcoll.uid.%d", pmix_epoch++);
    if (rank == 0) {
        if ((st = rcoll_get_unique_id(&id)) != RCOLL_OK) {
            PMIx_Finalize(NULL, 0);
            return st;
        }
        rcoll_hex_encode(&id, sizeof(id), hex, sizeof(hex));
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_STRING;
        v.data.string = hex;
        rc = PMIx_Put(PMIX_GLOBAL, key, &v);
        if (rc == PMIX_SUCCESS)
            rc = PMIx_Commit();
    }
    PMIX_INFO_CONSTRUCT(&info);
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    if (rc == PMIX_SUCCESS) {
        PMIX_LOAD_PROCID(&proc, me.nspace, PMIX_RANK_WILDCARD);
        rc = PMIx_Fence(&proc, 1, &info, 1);
    }
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_SUCCESS && rank != 0) {
        PMIX_LOAD_PROCID(&proc, me.nspace, 0);
        rc = PMIx_Get(&proc, key, NULL, 0, &val);
        if (rc == PMIX_SUCCESS && val && val->type == PMIX_STRING &&
            rcoll_hex_decode(val->data.string, &id, sizeof(id)) == 0) {
            PMIX_VALUE_RELEASE(val);
        } else {
            if (val)
                PMIX_VALUE_RELEASE(val);
            if (rc == PMIX_SUCCESS)
                rc = PMIX_ERROR;
        }
    }
    if (rc != PMIX_SUCCESS) {
        PMIx_Finalize(NULL, 0);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "rcoll_comm_init_env (%s): "
                                "PMIx exchange of the unique id failed: %s",
                                who, PMIx_Error_string(rc));
    }
    PMIx_Finalize(NULL, 0);
    rcoll_info(RCOLL_SUBSYS_BOOT, "init_env (%s via PMIx): rank %d of %d",
               who, rank, size);
    return rcoll_comm_init_rank(comm, size, &id, rank);
}
#endif

RCOLL_API rcoll_status_t rcoll_comm_init_env(rcoll_comm_t *comm)
{
    rcoll_status_t st;
    const char *r, *s;
    int rank, size;

    rcoll__clear_error();
    if ((st = rcoll_config_init()) != RCOLL_OK)
        return st;
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_comm_init_env: comm is NULL");

    /* rcoll-run, or by hand */
    if (rcoll_config.rank || rcoll_config.size) {
        if (!rcoll_config.rank || !rcoll_config.size || !rcoll_config.root ||
            parse_int(rcoll_config.rank, &rank) || parse_int(rcoll_config.size,
                                                             &size) ||
            size < 1 || rank >= size)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "rcoll_comm_init_env: RCOLL_RANK, "
                                    "RCOLL_SIZE and RCOLL_ROOT must all be set "
                                    "(0 <= rank < size, root host:port)");
        return init_with_root(comm, rank, size, rcoll_config.root, "rcoll");
    }
    /* torchrun */
    if ((r = lenv("RANK")) && (s = lenv("WORLD_SIZE"))) {
        const char *addr = lenv("MASTER_ADDR"), *port = lenv("MASTER_PORT");
        char root[300];
        int p;
        if (parse_int(r, &rank) || parse_int(s, &size) || size < 1 ||
            rank >= size)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "rcoll_comm_init_env: bad RANK/WORLD_SIZE "
                                    "(%s/%s)", r, s);
        if (rcoll_config.root) {
            snprintf(root, sizeof(root), "%s", rcoll_config.root);
        } else {
            if (!addr || !port || parse_int(port, &p) || p >= 65535)
                return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                        "rcoll_comm_init_env: torchrun-style "
                                        "RANK/WORLD_SIZE without MASTER_ADDR/"
                                        "MASTER_PORT or RCOLL_ROOT");
            snprintf(root, sizeof(root), strchr(addr, ':') ? "[%s]:%d"
                                                            : "%s:%d",
                     addr, p + 1);
        }
        return init_with_root(comm, rank, size, root, "torchrun");
    }
    /* Open MPI, Slurm, other PMIx launchers */
    const char *who = NULL;
    if ((r = lenv("OMPI_COMM_WORLD_RANK")) &&
        (s = lenv("OMPI_COMM_WORLD_SIZE")))
        who = "mpirun";
    else if ((r = lenv("SLURM_PROCID")) && (s = lenv("SLURM_NTASKS")))
        who = "slurm";
    else if ((r = lenv("PMIX_RANK")))
        who = "pmix";
    if (who) {
        if (rcoll_config.root && s) {
            if (parse_int(r, &rank) || parse_int(s, &size) || size < 1 ||
                rank >= size)
                return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                        "rcoll_comm_init_env (%s): bad rank/"
                                        "size %s/%s", who, r, s);
            return init_with_root(comm, rank, size, rcoll_config.root, who);
        }
#ifdef HAVE_PMIX
        return init_with_pmix(comm, who);
#else
        return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED,
                                "rcoll_comm_init_env (%s): this build has no "
                                "PMIx; set RCOLL_ROOT=host:port (rank 0's "
                                "address) for the rendezvous", who);
#endif
    }
    return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                            "rcoll_comm_init_env: no launcher environment "
                            "found: set RCOLL_RANK, RCOLL_SIZE and RCOLL_ROOT, "
                            "or start under rcoll-run, torchrun, mpirun or "
                            "srun");
}
