/* librcoll-mpi: what it prints (RCOLL_MPI_VERBOSE) and its MPI errors: an
 * error class of its own, and per failure an error code whose string is
 * rcoll's message, so MPI_Error_string and an MPI_ERRORS_ARE_FATAL abort
 * show the call, the rank and the cause. */
#include "shim.h"
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int verbose;
static int world_rank = -1;
static int err_class = -1;
static int err_codes;

void shim_log_init(int v)
{
    verbose = v;
}

void shim_say(const char *call, size_t bytes, const char *who,
              const char *why)
{
    if (!verbose)
        return;
    if (world_rank < 0)
        PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    fprintf(stderr, "rcoll-mpi: rank %d: %s %zu B -> %s%s%s%s\n", world_rank,
            call, bytes, who, why ? " (" : "", why ? why : "",
            why ? ")" : "");
}

/* At most this many distinct error codes are added to the MPI (each
 * failure gets one with its own message; later ones reuse the last). */
enum { MAX_ERR_CODES = 64 };

/* A new error code of this library's class whose string is msg (printed
 * too under RCOLL_MPI_VERBOSE, or when no code could be added). */
static int add_code(const char *msg)
{
    pthread_mutex_lock(&lock);
    static int code = MPI_ERR_OTHER;
    if (err_class < 0 && PMPI_Add_error_class(&err_class) != MPI_SUCCESS)
        err_class = MPI_ERR_OTHER;
    if (err_codes < MAX_ERR_CODES && err_class != MPI_ERR_OTHER &&
        PMPI_Add_error_code(err_class, &code) == MPI_SUCCESS)
        err_codes++;
    if (code != MPI_ERR_OTHER)
        PMPI_Add_error_string(code, msg);
    int c = code;
    pthread_mutex_unlock(&lock);
    if (verbose || c == MPI_ERR_OTHER)
        fprintf(stderr, "%s\n", msg);
    return c;
}

int shim_error_code(const shim_comm_t *sc, const char *call,
                    rcoll_status_t st)
{
    char msg[MPI_MAX_ERROR_STRING];
    snprintf(msg, sizeof(msg), "rcoll-mpi: %s failed on rank %d of %d: %s "
             "(%s)", call, sc ? sc->rank : -1, sc ? sc->size : 0,
             rcoll_status_string(st), rcoll_last_error());
    return add_code(msg);
}

int shim_local_error_code(const shim_comm_t *sc, const char *call, int rc)
{
    char why[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    PMPI_Error_string(rc, why, &len);
    char msg[MPI_MAX_ERROR_STRING];
    snprintf(msg, sizeof(msg), "rcoll-mpi: %s failed on rank %d of %d in "
             "the interposer (packing a non-contiguous buffer, scratch "
             "memory, a count, or its MPI request): %s", call, sc->rank,
             sc->size, why);
    return add_code(msg);
}

int shim_status(shim_comm_t *sc, const char *call, rcoll_status_t st)
{
    if (st == RCOLL_OK)
        return MPI_SUCCESS;
    int code = shim_error_code(sc, call, st);
    PMPI_Comm_call_errhandler(sc->mpi, code);
    return code;
}

