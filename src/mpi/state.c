/* librcoll-mpi: the MPI beneath, the settings, an rcoll communicator per
 * MPI communicator, errors, MPI_Finalize.
 *
 * An rcoll communicator is made on a communicator's first blocking
 * collective that runs on rcoll (every rank reaches it in the same order,
 * so the rendezvous id can travel by the MPI's own broadcast) and kept as
 * an attribute: MPI_Comm_dup and split do not inherit it (they get their
 * own on first use), MPI_Comm_free destroys it. Whether it exists is the
 * same on every rank - making it ends with an agreement - so a
 * non-blocking call on a communicator without one goes to MPI everywhere.
 * (What the library prints and its MPI error codes: errors.c.) */
#define _GNU_SOURCE
#include "shim.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

shim_real_t shim_real;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int keyval = MPI_KEYVAL_INVALID;
static int enabled[SHIM_NCALLS];
static int finalized;
static shim_comm_t *all;
/* Each thread remembers the last communicator it looked up (an attribute
 * lookup costs about as much as a small collective's own work); any
 * attribute deletion bumps the generation, so a freed communicator whose
 * handle is reused is never taken for the old one. */
static unsigned comm_gen;
static __thread MPI_Comm last_comm;
static __thread shim_comm_t *last_sc;
static __thread unsigned last_gen;

static const char *const call_names[SHIM_NCALLS] = {
    "allreduce", "allgather", "bcast", "reduce", "reduce_scatter_block",
    "reduce_scatter", "alltoall", "alltoallv", "gather", "scatter",
    "barrier"
};

static void *next_sym(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "rcoll-mpi: %s not found below librcoll-mpi "
                "(is it preloaded into an MPI program?)\n", name);
        abort();
    }
    return f;
}

/* RCOLL_MPI_COLLS: a comma-separated list of call names (the blocking
 * name covers the non-blocking form), "all" (the default) or "none". */
static void parse_colls(const char *s)
{
    for (int i = 0; i < SHIM_NCALLS; i++)
        enabled[i] = !s || !*s || !strcmp(s, "all");
    if (!s || !*s || !strcmp(s, "all") || !strcmp(s, "none"))
        return;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < SHIM_NCALLS; i++)
            if (!strcmp(t, call_names[i]))
                enabled[i] = found = 1;
        if (!found)
            fprintf(stderr, "rcoll-mpi: RCOLL_MPI_COLLS names '%s', which "
                    "is not one of the calls it can take over; ignored\n", t);
    }
    free(copy);
}

/* Sizes handed back to the MPI: a call, a range of communicator sizes
 * and a range of bytes (per rank, as RCOLL_MPI_VERBOSE prints them), for
 * communicators whose ranks share one host. The default is what
 * benchmarks/mpi_preload.sh measured on a 2-core VM against Open MPI 4.1
 * (docs/performance.md); RCOLL_MPI_HANDBACK replaces it
 * ("bcast:2-2:0-256,alltoall:2-3:0-1K" or "none"). */
static const char default_handback[] =
    "bcast:2-2:0-256,bcast:2-2:128K-256K,bcast:4-4:0-16,bcast:4-4:128K-1M,"
    "allreduce:2-2:8M-16M,"
    "allgather:2-2:0-32,allgather:2-2:64K-128K,allgather:2-2:4M-64G,"
    "alltoall:2-2:0-512,alltoall:2-2:64K-128K";
enum { MAX_HANDBACK = 32 };
static struct {
    int call, min_ranks, max_ranks;
    size_t lo, hi; /* [lo, hi) */
} handback[MAX_HANDBACK];
static int nhandback;

static size_t parse_size(const char *s, char **end)
{
    size_t v = strtoull(s, end, 10);
    switch (**end) {
    case 'K': case 'k': v <<= 10; (*end)++; break;
    case 'M': case 'm': v <<= 20; (*end)++; break;
    case 'G': case 'g': v <<= 30; (*end)++; break;
    }
    return v;
}

/* One "call:ranks-ranks:bytes-bytes" entry; 0 if malformed. */
static int parse_handback_entry(char *t)
{
    char *colon = strchr(t, ':');
    if (!colon || nhandback == MAX_HANDBACK)
        return 0;
    *colon = 0;
    int call = -1;
    for (int i = 0; i < SHIM_NCALLS; i++)
        if (!strcmp(t, call_names[i]))
            call = i;
    char *p = colon + 1, *e;
    long r0 = strtol(p, &e, 10), r1;
    if (call < 0 || *e != '-')
        return 0;
    r1 = strtol(e + 1, &e, 10);
    if (*e != ':')
        return 0;
    size_t lo = parse_size(e + 1, &e);
    if (*e != '-')
        return 0;
    size_t hi = parse_size(e + 1, &e);
    if (*e)
        return 0;
    handback[nhandback].call = call;
    handback[nhandback].min_ranks = (int)r0;
    handback[nhandback].max_ranks = (int)r1;
    handback[nhandback].lo = lo;
    handback[nhandback].hi = hi;
    nhandback++;
    return 1;
}

static void parse_handback(const char *s)
{
    if (!s || !strcmp(s, "none"))
        return;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        char *orig = strdup(t);
        if (!parse_handback_entry(t))
            fprintf(stderr, "rcoll-mpi: RCOLL_MPI_HANDBACK entry '%s' is not "
                    "call:ranks-ranks:bytes-bytes; ignored\n", orig);
        free(orig);
    }
    free(copy);
}

int shim_handback(int which, const shim_comm_t *sc, size_t bytes)
{
    if (!sc->one_host)
        return 0;
    for (int i = 0; i < nhandback; i++)
        if (handback[i].call == which && sc->size >= handback[i].min_ranks &&
            sc->size <= handback[i].max_ranks && bytes >= handback[i].lo &&
            bytes < handback[i].hi)
            return 1;
    return 0;
}

static void resolve(void)
{
#define R(n) *(void **)&shim_real.n = next_sym("PMPI_" #n)
    R(Allreduce); R(Allgather); R(Bcast); R(Reduce);
    R(Reduce_scatter_block); R(Reduce_scatter); R(Alltoall); R(Alltoallv);
    R(Gather); R(Scatter); R(Barrier); R(Iallreduce); R(Iallgather);
    R(Ibcast); R(Ireduce); R(Ireduce_scatter_block); R(Ireduce_scatter);
    R(Ialltoall); R(Ialltoallv); R(Igather); R(Iscatter); R(Ibarrier);
    R(Finalize);
#undef R
    /* the settings of this library (the library's own are in rcoll-info -c;
     * these two are read here because it sits above the public API) */
    parse_colls(getenv("RCOLL_MPI_COLLS"));
    const char *hb = getenv("RCOLL_MPI_HANDBACK");
    parse_handback(hb ? hb : default_handback);
    const char *v = getenv("RCOLL_MPI_VERBOSE");
    shim_log_init(v && *v && strcmp(v, "0"));
}

void shim_init(void)
{
    pthread_once(&once, resolve);
}

/* ---- the rcoll communicator of an MPI communicator ---- */

static int attr_delete(MPI_Comm comm, int kv, void *val, void *extra)
{
    (void)comm; (void)kv; (void)extra;
    shim_comm_t *sc = val;
    __atomic_add_fetch(&comm_gen, 1, __ATOMIC_ACQ_REL);
    if (sc->is_static)
        return MPI_SUCCESS; /* the out-of-memory marker */
    pthread_mutex_lock(&lock);
    for (shim_comm_t **p = &all; *p; p = &(*p)->next)
        if (*p == sc) {
            *p = sc->next;
            break;
        }
    pthread_mutex_unlock(&lock);
    if (sc->rc) {
        shim_nb_drain(sc);
        rcoll_comm_destroy(sc->rc);
    }
    free(sc);
    return MPI_SUCCESS;
}

/* Makes the rcoll communicator (all ranks of comm, collectively): rank 0
 * makes the id, the MPI broadcasts it, all join, and an MPI all-reduce
 * agrees whether every rank did; if one did not, none uses it. */
static void comm_make(shim_comm_t *sc, MPI_Comm comm, int can)
{
    struct { int st; rcoll_unique_id_t id; } m;
    memset(&m, 0, sizeof(m));
    if (sc->rank == 0)
        m.st = rcoll_get_unique_id(&m.id);
    shim_real.Bcast(&m, sizeof(m), MPI_BYTE, 0, comm);
    int ok = 0;
    rcoll_comm_t rc = NULL;
    if (m.st == RCOLL_OK && can)
        ok = rcoll_comm_init_rank(&rc, sc->size, &m.id, sc->rank) == RCOLL_OK;
    if (!ok && can)
        fprintf(stderr, "rcoll-mpi: rank %d of a communicator of %d: no "
                "rcoll communicator (%s); its collectives stay with MPI\n",
                sc->rank, sc->size, rcoll_last_error());
    /* whether all ranks share a host (the hand-back table is for those) */
    MPI_Comm node;
    int local = 0;
    if (PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                             &node) == MPI_SUCCESS) {
        PMPI_Comm_size(node, &local);
        PMPI_Comm_free(&node);
    }
    int level = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    int mine[3] = { ok, local == sc->size, level == MPI_THREAD_MULTIPLE };
    int agreed[3] = { 0, 0, 0 };
    shim_real.Allreduce(mine, agreed, 3, MPI_INT, MPI_MIN, comm);
    sc->one_host = agreed[1];
    sc->nb_ok = agreed[2];
    if (agreed[0])
        sc->rc = rc;
    else if (rc)
        rcoll_comm_abort(rc);
}

shim_comm_t *shim_take(int which, MPI_Comm comm, int may_make)
{
    shim_init();
    if (!enabled[which] || finalized || comm == MPI_COMM_NULL)
        return NULL;
    if (keyval == MPI_KEYVAL_INVALID) {
        pthread_mutex_lock(&lock);
        if (keyval == MPI_KEYVAL_INVALID)
            PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, attr_delete,
                                    &keyval, NULL);
        pthread_mutex_unlock(&lock);
    }
    shim_comm_t *sc = NULL;
    unsigned gen = __atomic_load_n(&comm_gen, __ATOMIC_ACQUIRE);
    int flag = 0;
    if (last_sc && comm == last_comm && gen == last_gen) {
        sc = last_sc;
        flag = 1;
    } else {
        PMPI_Comm_get_attr(comm, keyval, &sc, &flag);
        if (flag) {
            last_comm = comm;
            last_sc = sc;
            last_gen = gen;
        }
    }
    /* non-blocking calls (may_make 0) only where every rank runs at
     * MPI_THREAD_MULTIPLE: the completion thread calls into the MPI */
    if (flag)
        return sc->rc && (may_make || sc->nb_ok) ? sc : NULL;
    if (!may_make)
        return NULL;
    sc = calloc(1, sizeof(*sc));
    if (!sc) {
        /* take part in the set-up anyway (the other ranks are in it),
         * saying no, and mark the communicator as staying with MPI */
        static shim_comm_t nomem = { .is_static = 1 };
        nomem.mpi = comm;
        PMPI_Comm_rank(comm, &nomem.rank);
        PMPI_Comm_size(comm, &nomem.size);
        comm_make(&nomem, comm, 0);
        nomem.rc = NULL;
        PMPI_Comm_set_attr(comm, keyval, &nomem);
        return NULL;
    }
    sc->mpi = comm;
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &sc->rank);
    PMPI_Comm_size(comm, &sc->size);
    /* intercommunicators and one rank stay with MPI (the same on all) */
    if (!inter && sc->size > 1)
        comm_make(sc, comm, 1);
    PMPI_Comm_set_attr(comm, keyval, sc);
    pthread_mutex_lock(&lock);
    sc->next = all;
    all = sc;
    pthread_mutex_unlock(&lock);
    return sc->rc ? sc : NULL;
}

/* ---- MPI_Finalize ---- */

SHIM_API int PMPI_Finalize(void)
{
    shim_init();
    shim_nb_stop();
    pthread_mutex_lock(&lock);
    finalized = 1;
    /* the communicators' attributes are deleted by the MPI (MPI_Comm_free,
     * or finalize for the predefined ones); the rcoll side ends here */
    for (shim_comm_t *sc = all; sc; sc = sc->next)
        if (sc->rc) {
            rcoll_comm_destroy(sc->rc);
            sc->rc = NULL;
        }
    pthread_mutex_unlock(&lock);
    return shim_real.Finalize();
}

SHIM_API int MPI_Finalize(void) __attribute__((alias("PMPI_Finalize")));
