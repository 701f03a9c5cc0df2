/* librcoll-mpi: MPI collectives on rcoll under an unmodified MPI program
 * (LD_PRELOAD). This library exports PMPI_X (the name Open MPI's Fortran
 * bindings call) and MPI_X as an alias of it, and reaches the MPI beneath
 * through dlsym(RTLD_NEXT, "PMPI_X"), so a profiling tool preloaded before
 * it still sees every call. It uses only rcoll's public API and standard
 * MPI: no MPI implementation's internals.
 *
 * What runs on rcoll is decided only from arguments that are the same on
 * every rank (the call, count, datatype, op, root, communicator), never
 * from local state, so no rank falls back while another does not. */
#ifndef RCOLL_MPI_SHIM_H
#define RCOLL_MPI_SHIM_H

#include <mpi.h>
#include <stddef.h>
#include "rcoll.h"

/* The entry points the library exports (it is built with hidden
 * visibility: nothing else of it is seen by the program). */
#define SHIM_API __attribute__((visibility("default")))

/* The calls that may be taken over (RCOLL_MPI_COLLS names them). */
enum {
    SHIM_ALLREDUCE, SHIM_ALLGATHER, SHIM_BCAST, SHIM_REDUCE,
    SHIM_REDUCE_SCATTER_BLOCK, SHIM_REDUCE_SCATTER, SHIM_ALLTOALL,
    SHIM_ALLTOALLV, SHIM_GATHER, SHIM_SCATTER, SHIM_BARRIER, SHIM_NCALLS
};

/* The MPI beneath: its PMPI_ entry points for the calls this library
 * defines itself. */
typedef struct {
    int (*Allreduce)(const void *, void *, int, MPI_Datatype, MPI_Op,
                     MPI_Comm);
    int (*Allgather)(const void *, int, MPI_Datatype, void *, int,
                     MPI_Datatype, MPI_Comm);
    int (*Bcast)(void *, int, MPI_Datatype, int, MPI_Comm);
    int (*Reduce)(const void *, void *, int, MPI_Datatype, MPI_Op, int,
                  MPI_Comm);
    int (*Reduce_scatter_block)(const void *, void *, int, MPI_Datatype,
                                MPI_Op, MPI_Comm);
    int (*Reduce_scatter)(const void *, void *, const int *, MPI_Datatype,
                          MPI_Op, MPI_Comm);
    int (*Alltoall)(const void *, int, MPI_Datatype, void *, int,
                    MPI_Datatype, MPI_Comm);
    int (*Alltoallv)(const void *, const int *, const int *, MPI_Datatype,
                     void *, const int *, const int *, MPI_Datatype,
                     MPI_Comm);
    int (*Gather)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                  int, MPI_Comm);
    int (*Scatter)(const void *, int, MPI_Datatype, void *, int,
                   MPI_Datatype, int, MPI_Comm);
    int (*Barrier)(MPI_Comm);
    int (*Iallreduce)(const void *, void *, int, MPI_Datatype, MPI_Op,
                      MPI_Comm, MPI_Request *);
    int (*Iallgather)(const void *, int, MPI_Datatype, void *, int,
                      MPI_Datatype, MPI_Comm, MPI_Request *);
    int (*Ibcast)(void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *);
    int (*Ireduce)(const void *, void *, int, MPI_Datatype, MPI_Op, int,
                   MPI_Comm, MPI_Request *);
    int (*Ireduce_scatter_block)(const void *, void *, int, MPI_Datatype,
                                 MPI_Op, MPI_Comm, MPI_Request *);
    int (*Ireduce_scatter)(const void *, void *, const int *, MPI_Datatype,
                           MPI_Op, MPI_Comm, MPI_Request *);
    int (*Ialltoall)(const void *, int, MPI_Datatype, void *, int,
                     MPI_Datatype, MPI_Comm, MPI_Request *);
    int (*Ialltoallv)(const void *, const int *, const int *, MPI_Datatype,
                      void *, const int *, const int *, MPI_Datatype,
                      MPI_Comm, MPI_Request *);
    int (*Igather)(const void *, int, MPI_Datatype, void *, int,
                   MPI_Datatype, int, MPI_Comm, MPI_Request *);
    int (*Iscatter)(const void *, int, MPI_Datatype, void *, int,
                    MPI_Datatype, int, MPI_Comm, MPI_Request *);
    int (*Ibarrier)(MPI_Comm, MPI_Request *);
    int (*Finalize)(void);
} shim_real_t;

extern shim_real_t shim_real;

/* The rcoll communicator kept on an MPI communicator (an attribute). */
typedef struct shim_comm {
    rcoll_comm_t rc;        /* NULL: this communicator stays with MPI */
    MPI_Comm mpi;
    int rank, size;
    int pending;            /* non-blocking operations not yet finished */
    int one_host;           /* every rank on this host */
    int nb_ok;              /* every rank at MPI_THREAD_MULTIPLE: the
                               non-blocking forms may run on rcoll */
    int is_static;          /* not to be freed (out-of-memory marker) */
    struct shim_comm *next; /* every one made, for MPI_Finalize */
} shim_comm_t;

/* Resolves shim_real and reads the settings; once, thread-safe. */
void shim_init(void);
/* The rcoll communicator for `comm` if call `which` is to run on rcoll,
 * making it on first use when `may_make` (a blocking call: every rank
 * reaches it in the same order); NULL: forward to MPI. */
shim_comm_t *shim_take(int which, MPI_Comm comm, int may_make);
/* 1 if a call of `bytes` per rank goes back to the MPI on `sc`
 * (RCOLL_MPI_HANDBACK: sizes where the MPI measured faster). */
int shim_handback(int which, const shim_comm_t *sc, size_t bytes);

/* ---- messages and errors (errors.c) ---- */

/* Turns the per-call lines of shim_say on or off. */
void shim_log_init(int verbose);
/* Prints, under RCOLL_MPI_VERBOSE=1, which library ran a call. */
void shim_say(const char *call, size_t bytes, const char *who,
              const char *why);
/* An MPI error code for an rcoll failure of `call` (its message names the
 * call, the rank and rcoll's reason). */
int shim_error_code(const shim_comm_t *sc, const char *call,
                    rcoll_status_t st);
/* The same for an MPI error `rc` of the interposer itself (packing,
 * memory, a count, the request): the call, the rank, the MPI's reason. */
int shim_local_error_code(const shim_comm_t *sc, const char *call, int rc);
/* Returns MPI_SUCCESS for RCOLL_OK, else calls the communicator's error
 * handler with shim_error_code's code and returns what it returns. */
int shim_status(shim_comm_t *sc, const char *call, rcoll_status_t st);

/* ---- datatypes (types.c) ---- */

/* The rcoll element type for a reduction over `dt`; 0 if none. */
int shim_red_type(MPI_Datatype dt, rcoll_datatype_t *rt);
/* The rcoll op for `op`; 0 if none (user ops, logical/bitwise, MINLOC). */
int shim_red_op(MPI_Op op, rcoll_op_t *ro);

/* Work after an operation finishes: unpacking what arrived into the
 * caller's non-contiguous layout, a move, freeing scratch. */
typedef struct {
    void *scratch[2];
    /* unpack `ubytes` from `usrc` into (ubuf, ucount, utype) */
    void *usrc;
    size_t ubytes;
    void *ubuf;
    int ucount;
    MPI_Datatype utype;
    int own_utype;          /* utype is a duplicate to free (non-blocking:
                               the caller may free its type meanwhile) */
    /* per-block unpack for all-to-allv: block r of `vcounts[r]` elements
     * of utype from usrc + voff[r] to ubuf + vdispls[r] * extent */
    int *vcounts, *vdispls;
    size_t *voff;
    int nblocks;
    /* then a move of `mbytes` from msrc to mdst */
    void *mdst;
    const void *msrc;
    size_t mbytes;
} shim_fin_t;

/* A buffer as contiguous bytes: the caller's memory when (count, dt) is
 * contiguous, else scratch holding its packed form. */
typedef struct {
    char *p;
    size_t bytes;
    int packed;
} shim_view_t;

/* The bytes of (buf, count, dt) to be read (packed now if needed). */
int shim_view_in(const void *buf, size_t count, MPI_Datatype dt,
                 MPI_Comm comm, shim_view_t *v, shim_fin_t *fin);
/* Where (buf, count, dt) is to be written: the caller's memory, or scratch
 * that shim_fin_run unpacks. If `keep` the scratch first holds the
 * buffer's current contents (in-place operations). */
int shim_view_out(void *buf, size_t count, MPI_Datatype dt, MPI_Comm comm,
                  int keep, shim_view_t *v, shim_fin_t *fin);
/* Bytes of one element of dt. */
size_t shim_type_size(MPI_Datatype dt);
/* Bytes of one element of dt, and whether count elements are contiguous
 * (then *off is where the data starts, relative to buf). */
int shim_contig(int count, MPI_Datatype dt, size_t *size, MPI_Aint *off);
/* Runs and clears `fin` (after the operation, successful or not). */
int shim_fin_run(shim_fin_t *fin, MPI_Comm comm, int ok);

/* ---- non-blocking (nb.c) ---- */

/* Makes *request a generalized request that completes when `rq` does,
 * running `fin` first; takes ownership of fin's scratch. */
int shim_nb_start(shim_comm_t *sc, const char *call, rcoll_request_t rq,
                  const shim_fin_t *fin, MPI_Request *request);
/* Waits for this process's non-blocking operations to finish and stops
 * the completion thread (MPI_Finalize). */
void shim_nb_stop(void);
/* Waits until no non-blocking operation of `sc` is pending. */
void shim_nb_drain(shim_comm_t *sc);

#endif
