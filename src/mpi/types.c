/* librcoll-mpi: MPI datatypes and ops as rcoll sees them.
 *
 * Reductions run on rcoll only for the predefined integer and floating
 * types rcoll reduces and for SUM, PROD, MIN and MAX: MPI requires the
 * same datatype and op on every rank, so the choice is the same on all.
 * Data movement (broadcast, gathers, all-to-all) runs on rcoll for any
 * datatype, as bytes: MPI lets ranks pass different datatypes with the
 * same type signature, so a choice made from the datatype could differ
 * between ranks; instead a non-contiguous layout is packed on the way in
 * and unpacked on the way out (MPI_Pack of one signature gives the same
 * bytes on every rank of one machine type). */
#include "shim.h"
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int shim_red_type(MPI_Datatype dt, rcoll_datatype_t *rt)
{
    if (dt == MPI_FLOAT) { *rt = RCOLL_FLOAT32; return 1; }
    if (dt == MPI_DOUBLE) { *rt = RCOLL_FLOAT64; return 1; }
    if (dt == MPI_SIGNED_CHAR || dt == MPI_INT8_T) { *rt = RCOLL_INT8; return 1; }
    if (dt == MPI_UNSIGNED_CHAR || dt == MPI_UINT8_T) { *rt = RCOLL_UINT8; return 1; }
    /* the C integer types by their width on this machine */
    int s = 0, u = 0;
    size_t w = 0;
    if (dt == MPI_INT) { s = 1; w = sizeof(int); }
    else if (dt == MPI_LONG) { s = 1; w = sizeof(long); }
    else if (dt == MPI_LONG_LONG) { s = 1; w = sizeof(long long); }
    else if (dt == MPI_INT32_T) { s = 1; w = 4; }
    else if (dt == MPI_INT64_T) { s = 1; w = 8; }
    else if (dt == MPI_UNSIGNED) { u = 1; w = sizeof(unsigned); }
    else if (dt == MPI_UNSIGNED_LONG) { u = 1; w = sizeof(unsigned long); }
    else if (dt == MPI_UNSIGNED_LONG_LONG) { u = 1; w = sizeof(unsigned long long); }
    else if (dt == MPI_UINT32_T) { u = 1; w = 4; }
    else if (dt == MPI_UINT64_T) { u = 1; w = 8; }
    /* Fortran's (its bindings pass these handles down to PMPI_) */
    int fsz = 0, real = 0;
    if (dt == MPI_INTEGER || dt == MPI_INTEGER4 || dt == MPI_INTEGER8)
        s = 1;
    else if (dt == MPI_REAL || dt == MPI_DOUBLE_PRECISION ||
             dt == MPI_REAL4 || dt == MPI_REAL8)
        real = 1;
    if ((s && !w) || real) {
        PMPI_Type_size(dt, &fsz);
        w = (size_t)fsz;
    }
    if (real && (w == 4 || w == 8)) {
        *rt = w == 4 ? RCOLL_FLOAT32 : RCOLL_FLOAT64;
        return 1;
    }
    if (real)
        return 0;
    if (w == 4 && (s || u)) { *rt = s ? RCOLL_INT32 : RCOLL_UINT32; return 1; }
    if (w == 8 && (s || u)) { *rt = s ? RCOLL_INT64 : RCOLL_UINT64; return 1; }
    return 0;
}

int shim_red_op(MPI_Op op, rcoll_op_t *ro)
{
    if (op == MPI_SUM) { *ro = RCOLL_SUM; return 1; }
    if (op == MPI_PROD) { *ro = RCOLL_PROD; return 1; }
    if (op == MPI_MIN) { *ro = RCOLL_MIN; return 1; }
    if (op == MPI_MAX) { *ro = RCOLL_MAX; return 1; }
    return 0;
}

/* The predefined types whose elements are one run of bytes with no
 * padding, and their sizes: looked up here, not asked of the MPI (three
 * calls per buffer otherwise). Filled once, after MPI_Init. */
enum { NPLAIN = 32 };
static struct { MPI_Datatype dt; size_t size; } plain[NPLAIN];
static int nplain = -1;

static void plain_init(void)
{
    MPI_Datatype t[] = {
        MPI_BYTE, MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_SHORT,
        MPI_UNSIGNED_SHORT, MPI_INT, MPI_UNSIGNED, MPI_LONG,
        MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_UNSIGNED_LONG_LONG, MPI_FLOAT,
        MPI_DOUBLE, MPI_INT8_T, MPI_UINT8_T, MPI_INT16_T, MPI_UINT16_T,
        MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T, MPI_UINT64_T, MPI_INTEGER,
        MPI_REAL, MPI_DOUBLE_PRECISION, MPI_C_BOOL
    };
    int n = 0;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]) && n < NPLAIN; i++) {
        int sz = 0;
        MPI_Aint lb, ext;
        if (t[i] == MPI_DATATYPE_NULL || PMPI_Type_size(t[i], &sz) ||
            PMPI_Type_get_extent(t[i], &lb, &ext) || lb != 0 ||
            ext != (MPI_Aint)sz)
            continue;
        plain[n].dt = t[i];
        plain[n].size = (size_t)sz;
        n++;
    }
    __atomic_store_n(&nplain, n, __ATOMIC_RELEASE);
}

static int plain_size(MPI_Datatype dt, size_t *size)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (__atomic_load_n(&nplain, __ATOMIC_ACQUIRE) < 0)
        pthread_once(&once, plain_init);
    for (int i = 0; i < nplain; i++)
        if (plain[i].dt == dt) {
            *size = plain[i].size;
            return 1;
        }
    return 0;
}

size_t shim_type_size(MPI_Datatype dt)
{
    size_t size;
    if (plain_size(dt, &size))
        return size;
    int s = 0;
    PMPI_Type_size(dt, &s);
    return (size_t)s;
}

int shim_contig(int count, MPI_Datatype dt, size_t *size, MPI_Aint *off)
{
    (void)count;
    *off = 0;
    if (plain_size(dt, size))
        return 1;
    /* any other type is packed: a derived type whose size equals its
     * extent may still list its elements out of memory order */
    int sz = 0;
    PMPI_Type_size(dt, &sz);
    *size = (size_t)sz;
    return 0;
}

static int fin_scratch(shim_fin_t *fin, void *p)
{
    int i = fin->scratch[0] ? 1 : 0;
    fin->scratch[i] = p;
    return i;
}

/* Points v at buf's bytes when (count, dt) needs no packing (returns 1),
 * else at new scratch that fin frees (returns 0); -1 on failure, with
 * the MPI error in *rc. */
static int view_init(const void *buf, size_t count, MPI_Datatype dt,
                     shim_view_t *v, shim_fin_t *fin, int *rc)
{
    size_t size;
    MPI_Aint off;
    memset(v, 0, sizeof(*v));
    int contig = shim_contig(count > 1 ? 2 : (int)count, dt, &size, &off);
    v->bytes = size * count;
    if (contig || v->bytes == 0) {
        v->p = (char *)buf + (contig ? off : 0);
        return 1;
    }
    *rc = MPI_ERR_COUNT; /* MPI_Pack counts in int */
    if (count > INT_MAX || v->bytes > INT_MAX)
        return -1;
    *rc = MPI_ERR_NO_MEM;
    if (!(v->p = malloc(v->bytes)))
        return -1;
    fin_scratch(fin, v->p);
    v->packed = 1;
    return 0;
}

/* Packs (buf, count, dt) into v's scratch. */
static int view_pack(const void *buf, size_t count, MPI_Datatype dt,
                     MPI_Comm comm, shim_view_t *v)
{
    int pos = 0;
    int rc = PMPI_Pack(buf, (int)count, dt, v->p, (int)v->bytes, &pos, comm);
    if (rc == MPI_SUCCESS && (size_t)pos != v->bytes)
        rc = MPI_ERR_TYPE;
    return rc;
}

int shim_view_in(const void *buf, size_t count, MPI_Datatype dt,
                 MPI_Comm comm, shim_view_t *v, shim_fin_t *fin)
{
    int rc = MPI_SUCCESS;
    int direct = view_init(buf, count, dt, v, fin, &rc);
    if (direct != 0)
        return direct > 0 ? MPI_SUCCESS : rc;
    return view_pack(buf, count, dt, comm, v);
}

int shim_view_out(void *buf, size_t count, MPI_Datatype dt, MPI_Comm comm,
                  int keep, shim_view_t *v, shim_fin_t *fin)
{
    int rc = MPI_SUCCESS;
    int direct = view_init(buf, count, dt, v, fin, &rc);
    if (direct != 0)
        return direct > 0 ? MPI_SUCCESS : rc;
    fin->usrc = v->p;
    fin->ubytes = v->bytes;
    fin->ubuf = buf;
    fin->ucount = (int)count;
    fin->utype = dt;
    return keep ? view_pack(buf, count, dt, comm, v) : MPI_SUCCESS;
}

int shim_fin_run(shim_fin_t *fin, MPI_Comm comm, int ok)
{
    int rc = MPI_SUCCESS;
    if (ok && fin->usrc && fin->nblocks == 0) {
        int pos = 0;
        rc = PMPI_Unpack(fin->usrc, (int)fin->ubytes, &pos, fin->ubuf,
                         fin->ucount, fin->utype, comm);
    }
    if (ok && fin->nblocks > 0) {
        MPI_Aint lb, ext;
        PMPI_Type_get_extent(fin->utype, &lb, &ext);
        for (int r = 0; r < fin->nblocks && rc == MPI_SUCCESS; r++) {
            int pos = 0;
            size_t size;
            MPI_Aint off;
            shim_contig(1, fin->utype, &size, &off);
            rc = PMPI_Unpack((char *)fin->usrc + fin->voff[r],
                             (int)(size * (size_t)fin->vcounts[r]), &pos,
                             (char *)fin->ubuf + (MPI_Aint)fin->vdispls[r] * ext,
                             fin->vcounts[r], fin->utype, comm);
        }
    }
    if (ok && fin->mbytes)
        memmove(fin->mdst, fin->msrc, fin->mbytes);
    if (fin->own_utype)
        PMPI_Type_free(&fin->utype);
    free(fin->scratch[0]);
    free(fin->scratch[1]);
    free(fin->vcounts);
    free(fin->vdispls);
    free(fin->voff);
    memset(fin, 0, sizeof(*fin));
    return rc;
}
