/* librcoll-mpi: the collectives taken over, blocking and non-blocking.
 *
 * Each call is one function with a request argument (NULL: the blocking
 * form). It forwards to the MPI beneath when the call is not enabled, the
 * communicator has no rcoll communicator (intercommunicators, one rank, a
 * failed set-up, or a non-blocking call before any blocking one), or a
 * reduction's datatype or op is one rcoll does not reduce. MPI_IN_PLACE
 * is mapped to rcoll's in-place forms as MPI defines it for each call. */
#include "shim.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define BYTES RCOLL_UINT8

/* The end of a call that ran on rcoll: blocking, finish now; else hand
 * the request and the work after it to the completion thread. */
static int post(shim_comm_t *sc, const char *call, rcoll_status_t st,
                rcoll_request_t rq, shim_fin_t *fin, MPI_Request *req)
{
    if (!req || st != RCOLL_OK) {
        int rc = shim_fin_run(fin, sc->mpi, st == RCOLL_OK);
        return st != RCOLL_OK ? shim_status(sc, call, st) : rc;
    }
    int rc = shim_nb_start(sc, call, rq, fin, req);
    if (rc != MPI_SUCCESS) {
        rc = shim_local_error_code(sc, call, rc);
        PMPI_Comm_call_errhandler(sc->mpi, rc);
    }
    return rc;
}

/* A failure before anything was posted (packing, memory, a size): the
 * communicator's error handler, with a code naming the call and rank. */
static int early(shim_comm_t *sc, const char *call, shim_fin_t *fin, int rc)
{
    shim_fin_run(fin, sc->mpi, 0);
    int code = shim_local_error_code(sc, call, rc);
    PMPI_Comm_call_errhandler(sc->mpi, code);
    return code;
}

static size_t esize(MPI_Datatype dt)
{
    return shim_type_size(dt);
}

#define NAME(b, i) (req ? i : b)

/* ---- reductions ---- */

static int allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                     MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    const char *call = NAME("MPI_Allreduce", "MPI_Iallreduce");
    rcoll_datatype_t rt;
    rcoll_op_t ro;
    shim_comm_t *sc = NULL;
    int ok = count >= 0 && shim_red_type(dt, &rt) && shim_red_op(op, &ro);
    if (ok)
        sc = shim_take(SHIM_ALLREDUCE, comm, !req);
    const char *why = ok ? "communicator" : "datatype or op";
    if (sc && shim_handback(SHIM_ALLREDUCE, sc,
                            (size_t)count * esize(dt))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Iallreduce(sbuf, rbuf, count, dt, op, comm, req)
                   : shim_real.Allreduce(sbuf, rbuf, count, dt, op, comm);
    }
    if (sbuf == MPI_IN_PLACE)
        sbuf = rbuf;
    shim_fin_t fin = { 0 };
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_iallreduce(sbuf, rbuf, count, rt, ro, sc->rc, NULL, &rq)
        : rcoll_allreduce(sbuf, rbuf, count, rt, ro, sc->rc, NULL);
    shim_say(call, count * esize(dt), "rcoll", NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                  MPI_Op op, int root, MPI_Comm comm, MPI_Request *req)
{
    const char *call = NAME("MPI_Reduce", "MPI_Ireduce");
    rcoll_datatype_t rt;
    rcoll_op_t ro;
    shim_comm_t *sc = NULL;
    int ok = count >= 0 && shim_red_type(dt, &rt) && shim_red_op(op, &ro);
    if (ok)
        sc = shim_take(SHIM_REDUCE, comm, !req);
    const char *why = ok ? "communicator" : "datatype or op";
    if (sc && shim_handback(SHIM_REDUCE, sc,
                            (size_t)count * esize(dt))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Ireduce(sbuf, rbuf, count, dt, op, root, comm, req)
                   : shim_real.Reduce(sbuf, rbuf, count, dt, op, root, comm);
    }
    if (sc->rank == root && sbuf == MPI_IN_PLACE)
        sbuf = rbuf;
    if (sc->rank != root)
        rbuf = NULL;
    shim_fin_t fin = { 0 };
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_ireduce(sbuf, rbuf, count, rt, ro, root, sc->rc, NULL, &rq)
        : rcoll_reduce(sbuf, rbuf, count, rt, ro, root, sc->rc, NULL);
    shim_say(call, count * esize(dt), "rcoll", NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int reduce_scatter_block(const void *sbuf, void *rbuf, int rcount,
                                MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                MPI_Request *req)
{
    const char *call = NAME("MPI_Reduce_scatter_block", "MPI_Ireduce_scatter_block");
    rcoll_datatype_t rt;
    rcoll_op_t ro;
    shim_comm_t *sc = NULL;
    int ok = rcount >= 0 && shim_red_type(dt, &rt) && shim_red_op(op, &ro);
    if (ok)
        sc = shim_take(SHIM_REDUCE_SCATTER_BLOCK, comm, !req);
    const char *why = ok ? "communicator" : "datatype or op";
    if (sc && shim_handback(SHIM_REDUCE_SCATTER_BLOCK, sc,
                            (size_t)rcount * esize(dt))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Ireduce_scatter_block(sbuf, rbuf, rcount, dt,
                                                      op, comm, req)
                   : shim_real.Reduce_scatter_block(sbuf, rbuf, rcount, dt,
                                                     op, comm);
    }
    size_t blk = (size_t)rcount * esize(dt);
    shim_fin_t fin = { 0 };
    void *out = rbuf;
    if (sbuf == MPI_IN_PLACE) {
        /* MPI: the input is all of recvbuf, the result its first block;
         * rcoll's in-place form leaves the result at this rank's block */
        sbuf = rbuf;
        out = (char *)rbuf + (size_t)sc->rank * blk;
        if (sc->rank > 0) {
            fin.mdst = rbuf;
            fin.msrc = out;
            fin.mbytes = blk;
        }
    }
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_ireduce_scatter(sbuf, out, rcount, rt, ro, sc->rc, NULL, &rq)
        : rcoll_reduce_scatter(sbuf, out, rcount, rt, ro, sc->rc, NULL);
    shim_say(call, blk, "rcoll", NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int reduce_scatter(const void *sbuf, void *rbuf, const int *rcounts,
                          MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                          MPI_Request *req)
{
    const char *call = NAME("MPI_Reduce_scatter", "MPI_Ireduce_scatter");
    rcoll_datatype_t rt;
    rcoll_op_t ro;
    shim_comm_t *sc = NULL;
    int ok = shim_red_type(dt, &rt) && shim_red_op(op, &ro);
    if (ok)
        sc = shim_take(SHIM_REDUCE_SCATTER, comm, !req);
    if (!sc) {
        shim_say(call, 0, "mpi", ok ? "communicator" : "datatype or op");
        return req ? shim_real.Ireduce_scatter(sbuf, rbuf, rcounts, dt, op,
                                                comm, req)
                   : shim_real.Reduce_scatter(sbuf, rbuf, rcounts, dt, op,
                                               comm);
    }
    size_t total = 0, off = 0, es = esize(dt);
    int equal = 1;
    for (int r = 0; r < sc->size; r++) {
        if (rcounts[r] < 0)
            return early(sc, call, &(shim_fin_t){ 0 }, MPI_ERR_COUNT);
        if (r < sc->rank)
            off += (size_t)rcounts[r];
        total += (size_t)rcounts[r];
        equal &= rcounts[r] == rcounts[0];
    }
    if (equal)
        return reduce_scatter_block(sbuf, rbuf, rcounts[0], dt, op, comm, req);
    /* unequal blocks: all-reduce the whole vector, keep this rank's part */
    shim_fin_t fin = { 0 };
    void *whole = rbuf;
    if (sbuf != MPI_IN_PLACE) {
        whole = fin.scratch[0] = malloc(total * es > 0 ? total * es : 1);
        if (!whole)
            return early(sc, call, &fin, MPI_ERR_NO_MEM);
    } else {
        sbuf = rbuf;
    }
    fin.mdst = rbuf;
    fin.msrc = (char *)whole + off * es;
    fin.mbytes = (size_t)rcounts[sc->rank] * es;
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_iallreduce(sbuf, whole, total, rt, ro, sc->rc, NULL, &rq)
        : rcoll_allreduce(sbuf, whole, total, rt, ro, sc->rc, NULL);
    shim_say(call, total * es, "rcoll", "as an all-reduce");
    return post(sc, call, st, rq, &fin, req);
}

/* ---- data movement (any datatype, as bytes) ---- */

static int bcast(void *buf, int count, MPI_Datatype dt, int root,
                 MPI_Comm comm, MPI_Request *req)
{
    const char *call = NAME("MPI_Bcast", "MPI_Ibcast");
    shim_comm_t *sc = count >= 0 ? shim_take(SHIM_BCAST, comm, !req) : NULL;
    const char *why = "communicator";
    if (sc && shim_handback(SHIM_BCAST, sc,
                            (size_t)count * esize(dt))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Ibcast(buf, count, dt, root, comm, req)
                   : shim_real.Bcast(buf, count, dt, root, comm);
    }
    shim_fin_t fin = { 0 };
    shim_view_t v;
    int rc = sc->rank == root
        ? shim_view_in(buf, count, dt, comm, &v, &fin)
        : shim_view_out(buf, count, dt, comm, 0, &v, &fin);
    if (rc != MPI_SUCCESS)
        return early(sc, call, &fin, rc);
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_ibroadcast(v.p, v.p, v.bytes, BYTES, root, sc->rc, NULL, &rq)
        : rcoll_broadcast(v.p, v.p, v.bytes, BYTES, root, sc->rc, NULL);
    shim_say(call, v.bytes, "rcoll", v.packed ? "packed" : NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int allgather(const void *sbuf, int scount, MPI_Datatype stype,
                     void *rbuf, int rcount, MPI_Datatype rtype,
                     MPI_Comm comm, MPI_Request *req)
{
    const char *call = NAME("MPI_Allgather", "MPI_Iallgather");
    shim_comm_t *sc = rcount >= 0 ? shim_take(SHIM_ALLGATHER, comm, !req)
                                  : NULL;
    const char *why = "communicator";
    if (sc && shim_handback(SHIM_ALLGATHER, sc,
                            (size_t)rcount * esize(rtype))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Iallgather(sbuf, scount, stype, rbuf, rcount,
                                          rtype, comm, req)
                   : shim_real.Allgather(sbuf, scount, stype, rbuf, rcount,
                                         rtype, comm);
    }
    int inplace = sbuf == MPI_IN_PLACE;
    shim_fin_t fin = { 0 };
    shim_view_t r, s;
    int rc = shim_view_out(rbuf, (size_t)sc->size * rcount, rtype, comm, inplace, &r,
                           &fin);
    size_t blk = r.bytes / (size_t)sc->size;
    if (rc == MPI_SUCCESS && inplace) {
        s.p = r.p + (size_t)sc->rank * blk;
        s.bytes = blk;
    } else if (rc == MPI_SUCCESS) {
        rc = shim_view_in(sbuf, scount, stype, comm, &s, &fin);
        if (rc == MPI_SUCCESS && s.bytes != blk)
            rc = MPI_ERR_TRUNCATE;
    }
    if (rc != MPI_SUCCESS)
        return early(sc, call, &fin, rc);
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_iallgather(s.p, r.p, blk, BYTES, sc->rc, NULL, &rq)
        : rcoll_allgather(s.p, r.p, blk, BYTES, sc->rc, NULL);
    shim_say(call, blk, "rcoll", r.packed || s.packed ? "packed" : NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int alltoall(const void *sbuf, int scount, MPI_Datatype stype,
                    void *rbuf, int rcount, MPI_Datatype rtype, MPI_Comm comm,
                    MPI_Request *req)
{
    const char *call = NAME("MPI_Alltoall", "MPI_Ialltoall");
    shim_comm_t *sc = rcount >= 0 ? shim_take(SHIM_ALLTOALL, comm, !req)
                                  : NULL;
    int inplace = sbuf == MPI_IN_PLACE;
    const char *why = "communicator";
    if (sc && shim_handback(SHIM_ALLTOALL, sc,
                            (size_t)rcount * esize(rtype))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Ialltoall(sbuf, scount, stype, rbuf, rcount,
                                         rtype, comm, req)
                   : shim_real.Alltoall(sbuf, scount, stype, rbuf, rcount,
                                        rtype, comm);
    }
    shim_fin_t fin = { 0 };
    shim_view_t r, s;
    int rc = shim_view_out(rbuf, (size_t)sc->size * rcount, rtype, comm, inplace, &r,
                           &fin);
    if (rc == MPI_SUCCESS && inplace)
        s = r;
    else if (rc == MPI_SUCCESS) {
        rc = shim_view_in(sbuf, (size_t)sc->size * scount, stype, comm, &s, &fin);
        if (rc == MPI_SUCCESS && s.bytes != r.bytes)
            rc = MPI_ERR_TRUNCATE;
    }
    if (rc != MPI_SUCCESS)
        return early(sc, call, &fin, rc);
    size_t blk = r.bytes / (size_t)sc->size;
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_ialltoall(s.p, r.p, blk, BYTES, sc->rc, NULL, &rq)
        : rcoll_alltoall(s.p, r.p, blk, BYTES, sc->rc, NULL);
    shim_say(call, blk, "rcoll", r.packed || s.packed ? "packed" : NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int gather(const void *sbuf, int scount, MPI_Datatype stype,
                  void *rbuf, int rcount, MPI_Datatype rtype, int root,
                  MPI_Comm comm, MPI_Request *req)
{
    const char *call = NAME("MPI_Gather", "MPI_Igather");
    shim_comm_t *sc = shim_take(SHIM_GATHER, comm, !req);
    const char *why = "communicator";
    if (sc && shim_handback(SHIM_GATHER, sc, sc->rank == root
                            ? (size_t)rcount * esize(rtype)
                            : (size_t)scount * esize(stype))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Igather(sbuf, scount, stype, rbuf, rcount,
                                       rtype, root, comm, req)
                   : shim_real.Gather(sbuf, scount, stype, rbuf, rcount,
                                      rtype, root, comm);
    }
    shim_fin_t fin = { 0 };
    shim_view_t r = { 0 }, s;
    int rc = MPI_SUCCESS;
    int inplace = sc->rank == root && sbuf == MPI_IN_PLACE;
    size_t blk = 0;
    if (sc->rank == root) {
        rc = shim_view_out(rbuf, (size_t)sc->size * rcount, rtype, comm, inplace, &r,
                           &fin);
        blk = r.bytes / (size_t)sc->size;
    }
    if (rc == MPI_SUCCESS && inplace) {
        s.p = r.p + (size_t)root * blk;
        s.bytes = blk;
    } else if (rc == MPI_SUCCESS) {
        rc = shim_view_in(sbuf, scount, stype, comm, &s, &fin);
        if (rc == MPI_SUCCESS && sc->rank == root && s.bytes != blk)
            rc = MPI_ERR_TRUNCATE;
        blk = s.bytes;
    }
    if (rc != MPI_SUCCESS)
        return early(sc, call, &fin, rc);
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_igather(s.p, r.p, blk, BYTES, root, sc->rc, NULL, &rq)
        : rcoll_gather(s.p, r.p, blk, BYTES, root, sc->rc, NULL);
    shim_say(call, blk, "rcoll", r.packed || s.packed ? "packed" : NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int scatter(const void *sbuf, int scount, MPI_Datatype stype,
                   void *rbuf, int rcount, MPI_Datatype rtype, int root,
                   MPI_Comm comm, MPI_Request *req)
{
    const char *call = NAME("MPI_Scatter", "MPI_Iscatter");
    shim_comm_t *sc = shim_take(SHIM_SCATTER, comm, !req);
    const char *why = "communicator";
    if (sc && shim_handback(SHIM_SCATTER, sc, sc->rank == root
                            ? (size_t)scount * esize(stype)
                            : (size_t)rcount * esize(rtype))) {
        sc = NULL;
        why = "size: the MPI measured faster";
    }
    if (!sc) {
        shim_say(call, 0, "mpi", why);
        return req ? shim_real.Iscatter(sbuf, scount, stype, rbuf, rcount,
                                        rtype, root, comm, req)
                   : shim_real.Scatter(sbuf, scount, stype, rbuf, rcount,
                                       rtype, root, comm);
    }
    shim_fin_t fin = { 0 };
    shim_view_t r, s = { 0 };
    int rc = MPI_SUCCESS;
    int inplace = sc->rank == root && rbuf == MPI_IN_PLACE;
    size_t blk = 0;
    if (sc->rank == root) {
        rc = shim_view_in(sbuf, (size_t)sc->size * scount, stype, comm, &s, &fin);
        blk = s.bytes / (size_t)sc->size;
    }
    if (rc == MPI_SUCCESS && inplace) {
        r.p = s.p + (size_t)root * blk;
        r.bytes = blk;
        r.packed = 0;
    } else if (rc == MPI_SUCCESS) {
        rc = shim_view_out(rbuf, rcount, rtype, comm, 0, &r, &fin);
        if (rc == MPI_SUCCESS && sc->rank == root && r.bytes != blk)
            rc = MPI_ERR_TRUNCATE;
        blk = r.bytes;
    }
    if (rc != MPI_SUCCESS)
        return early(sc, call, &fin, rc);
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_iscatter(s.p, r.p, blk, BYTES, root, sc->rc, NULL, &rq)
        : rcoll_scatter(s.p, r.p, blk, BYTES, root, sc->rc, NULL);
    shim_say(call, blk, "rcoll", r.packed || s.packed ? "packed" : NULL);
    return post(sc, call, st, rq, &fin, req);
}

/* One side of an all-to-allv in bytes: counts and displacements, and the
 * base pointer; a non-contiguous datatype is packed (send) or gets
 * scratch that the finish unpacks block by block (receive). */
static int v_side(const void *buf, const int *counts, const int *displs,
                  MPI_Datatype dt, int n, int out, MPI_Comm comm,
                  size_t *cb, size_t *db, char **base, shim_fin_t *fin)
{
    size_t size, total = 0;
    MPI_Aint off, lb, ext;
    int contig = shim_contig(2, dt, &size, &off);
    PMPI_Type_get_extent(dt, &lb, &ext);
    for (int r = 0; r < n; r++) {
        if (counts[r] < 0)
            return MPI_ERR_COUNT;
        cb[r] = (size_t)counts[r] * size;
        db[r] = contig ? (size_t)((MPI_Aint)displs[r] * ext) : total;
        total += cb[r];
    }
    if (contig) {
        *base = (char *)buf + off;
        return MPI_SUCCESS;
    }
    char *tmp = malloc(total ? total : 1);
    if (!tmp)
        return MPI_ERR_NO_MEM;
    fin->scratch[fin->scratch[0] ? 1 : 0] = tmp;
    *base = tmp;
    if (out) {
        fin->usrc = tmp;
        fin->ubuf = (void *)buf;
        fin->utype = dt;
        fin->nblocks = n;
        fin->vcounts = malloc(n * sizeof(int));
        fin->vdispls = malloc(n * sizeof(int));
        fin->voff = malloc(n * sizeof(size_t));
        if (!fin->vcounts || !fin->vdispls || !fin->voff)
            return MPI_ERR_NO_MEM;
        memcpy(fin->vcounts, counts, n * sizeof(int));
        memcpy(fin->vdispls, displs, n * sizeof(int));
        memcpy(fin->voff, db, n * sizeof(size_t));
        return MPI_SUCCESS;
    }
    for (int r = 0; r < n; r++) {
        int pos = 0;
        int rc = PMPI_Pack((const char *)buf + (MPI_Aint)displs[r] * ext,
                           counts[r], dt, tmp + db[r], (int)cb[r], &pos, comm);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

static int alltoallv(const void *sbuf, const int *scounts, const int *sdispls,
                     MPI_Datatype stype, void *rbuf, const int *rcounts,
                     const int *rdispls, MPI_Datatype rtype, MPI_Comm comm,
                     MPI_Request *req)
{
    const char *call = NAME("MPI_Alltoallv", "MPI_Ialltoallv");
    shim_comm_t *sc = shim_take(SHIM_ALLTOALLV, comm, !req);
    if (!sc) {
        shim_say(call, 0, "mpi", "communicator");
        return req ? shim_real.Ialltoallv(sbuf, scounts, sdispls, stype, rbuf,
                                          rcounts, rdispls, rtype, comm, req)
                   : shim_real.Alltoallv(sbuf, scounts, sdispls, stype, rbuf,
                                         rcounts, rdispls, rtype, comm);
    }
    if (sbuf == MPI_IN_PLACE) {
        sbuf = rbuf;
        scounts = rcounts;
        sdispls = rdispls;
        stype = rtype;
    }
    int n = sc->size;
    shim_fin_t fin = { 0 };
    size_t *a = malloc(4 * (size_t)n * sizeof(size_t));
    if (!a)
        return early(sc, call, &fin, MPI_ERR_NO_MEM);
    char *sp, *rp;
    int rc = v_side(sbuf, scounts, sdispls, stype, n, 0, comm, a, a + n, &sp,
                    &fin);
    if (rc == MPI_SUCCESS)
        rc = v_side(rbuf, rcounts, rdispls, rtype, n, 1, comm, a + 2 * n,
                    a + 3 * n, &rp, &fin);
    if (rc != MPI_SUCCESS) {
        free(a);
        return early(sc, call, &fin, rc);
    }
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req
        ? rcoll_ialltoallv(sp, a, a + n, rp, a + 2 * n, a + 3 * n, BYTES,
                           sc->rc, NULL, &rq)
        : rcoll_alltoallv(sp, a, a + n, rp, a + 2 * n, a + 3 * n, BYTES,
                          sc->rc, NULL);
    size_t tot = 0;
    for (int r = 0; r < n; r++)
        tot += a[r];
    free(a); /* rcoll copies the arrays */
    shim_say(call, tot, "rcoll", fin.usrc || sp != sbuf ? "packed" : NULL);
    return post(sc, call, st, rq, &fin, req);
}

static int barrier(MPI_Comm comm, MPI_Request *req)
{
    const char *call = req ? "MPI_Ibarrier" : "MPI_Barrier";
    shim_comm_t *sc = shim_take(SHIM_BARRIER, comm, !req);
    if (!sc) {
        shim_say(call, 0, "mpi", "communicator");
        return req ? shim_real.Ibarrier(comm, req) : shim_real.Barrier(comm);
    }
    shim_fin_t fin = { 0 };
    rcoll_request_t rq = NULL;
    rcoll_status_t st = req ? rcoll_ibarrier(sc->rc, &rq)
                            : rcoll_barrier(sc->rc);
    shim_say(call, 0, "rcoll", NULL);
    return post(sc, call, st, rq, &fin, req);
}

/* ---- the entry points: PMPI_X, and MPI_X as its alias ---- */

#define ALIAS(n) __attribute__((alias("PMPI_" #n)))

SHIM_API int PMPI_Allreduce(const void *s, void *r, int c, MPI_Datatype d, MPI_Op o,
                   MPI_Comm m)
{ shim_init(); return allreduce(s, r, c, d, o, m, NULL); }
SHIM_API int MPI_Allreduce(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm)
    ALIAS(Allreduce);
SHIM_API int PMPI_Iallreduce(const void *s, void *r, int c, MPI_Datatype d, MPI_Op o,
                    MPI_Comm m, MPI_Request *q)
{ shim_init(); return allreduce(s, r, c, d, o, m, q); }
SHIM_API int MPI_Iallreduce(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm,
                   MPI_Request *) ALIAS(Iallreduce);

SHIM_API int PMPI_Reduce(const void *s, void *r, int c, MPI_Datatype d, MPI_Op o,
                int root, MPI_Comm m)
{ shim_init(); return reduce(s, r, c, d, o, root, m, NULL); }
SHIM_API int MPI_Reduce(const void *, void *, int, MPI_Datatype, MPI_Op, int, MPI_Comm)
    ALIAS(Reduce);
SHIM_API int PMPI_Ireduce(const void *s, void *r, int c, MPI_Datatype d, MPI_Op o,
                 int root, MPI_Comm m, MPI_Request *q)
{ shim_init(); return reduce(s, r, c, d, o, root, m, q); }
SHIM_API int MPI_Ireduce(const void *, void *, int, MPI_Datatype, MPI_Op, int,
                MPI_Comm, MPI_Request *) ALIAS(Ireduce);

SHIM_API int PMPI_Reduce_scatter_block(const void *s, void *r, int c, MPI_Datatype d,
                              MPI_Op o, MPI_Comm m)
{ shim_init(); return reduce_scatter_block(s, r, c, d, o, m, NULL); }
SHIM_API int MPI_Reduce_scatter_block(const void *, void *, int, MPI_Datatype, MPI_Op,
                             MPI_Comm) ALIAS(Reduce_scatter_block);
SHIM_API int PMPI_Ireduce_scatter_block(const void *s, void *r, int c, MPI_Datatype d,
                               MPI_Op o, MPI_Comm m, MPI_Request *q)
{ shim_init(); return reduce_scatter_block(s, r, c, d, o, m, q); }
SHIM_API int MPI_Ireduce_scatter_block(const void *, void *, int, MPI_Datatype, MPI_Op,
                              MPI_Comm, MPI_Request *)
    ALIAS(Ireduce_scatter_block);

SHIM_API int PMPI_Reduce_scatter(const void *s, void *r, const int *c, MPI_Datatype d,
                        MPI_Op o, MPI_Comm m)
{ shim_init(); return reduce_scatter(s, r, c, d, o, m, NULL); }
SHIM_API int MPI_Reduce_scatter(const void *, void *, const int *, MPI_Datatype,
                       MPI_Op, MPI_Comm) ALIAS(Reduce_scatter);
SHIM_API int PMPI_Ireduce_scatter(const void *s, void *r, const int *c, MPI_Datatype d,
                         MPI_Op o, MPI_Comm m, MPI_Request *q)
{ shim_init(); return reduce_scatter(s, r, c, d, o, m, q); }
SHIM_API int MPI_Ireduce_scatter(const void *, void *, const int *, MPI_Datatype,
                        MPI_Op, MPI_Comm, MPI_Request *)
    ALIAS(Ireduce_scatter);

SHIM_API int PMPI_Bcast(void *b, int c, MPI_Datatype d, int root, MPI_Comm m)
{ shim_init(); return bcast(b, c, d, root, m, NULL); }
SHIM_API int MPI_Bcast(void *, int, MPI_Datatype, int, MPI_Comm) ALIAS(Bcast);
SHIM_API int PMPI_Ibcast(void *b, int c, MPI_Datatype d, int root, MPI_Comm m,
                MPI_Request *q)
{ shim_init(); return bcast(b, c, d, root, m, q); }
SHIM_API int MPI_Ibcast(void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *)
    ALIAS(Ibcast);

SHIM_API int PMPI_Allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                   MPI_Datatype rt, MPI_Comm m)
{ shim_init(); return allgather(s, sc, st, r, rc, rt, m, NULL); }
SHIM_API int MPI_Allgather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                  MPI_Comm) ALIAS(Allgather);
SHIM_API int PMPI_Iallgather(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                    MPI_Datatype rt, MPI_Comm m, MPI_Request *q)
{ shim_init(); return allgather(s, sc, st, r, rc, rt, m, q); }
SHIM_API int MPI_Iallgather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                   MPI_Comm, MPI_Request *) ALIAS(Iallgather);

SHIM_API int PMPI_Alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                  MPI_Datatype rt, MPI_Comm m)
{ shim_init(); return alltoall(s, sc, st, r, rc, rt, m, NULL); }
SHIM_API int MPI_Alltoall(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                 MPI_Comm) ALIAS(Alltoall);
SHIM_API int PMPI_Ialltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                   MPI_Datatype rt, MPI_Comm m, MPI_Request *q)
{ shim_init(); return alltoall(s, sc, st, r, rc, rt, m, q); }
SHIM_API int MPI_Ialltoall(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                  MPI_Comm, MPI_Request *) ALIAS(Ialltoall);

SHIM_API int PMPI_Alltoallv(const void *s, const int *sc, const int *sd,
                   MPI_Datatype st, void *r, const int *rc, const int *rd,
                   MPI_Datatype rt, MPI_Comm m)
{ shim_init(); return alltoallv(s, sc, sd, st, r, rc, rd, rt, m, NULL); }
SHIM_API int MPI_Alltoallv(const void *, const int *, const int *, MPI_Datatype,
                  void *, const int *, const int *, MPI_Datatype, MPI_Comm)
    ALIAS(Alltoallv);
SHIM_API int PMPI_Ialltoallv(const void *s, const int *sc, const int *sd,
                    MPI_Datatype st, void *r, const int *rc, const int *rd,
                    MPI_Datatype rt, MPI_Comm m, MPI_Request *q)
{ shim_init(); return alltoallv(s, sc, sd, st, r, rc, rd, rt, m, q); }
SHIM_API int MPI_Ialltoallv(const void *, const int *, const int *, MPI_Datatype,
                   void *, const int *, const int *, MPI_Datatype, MPI_Comm,
                   MPI_Request *) ALIAS(Ialltoallv);

SHIM_API int PMPI_Gather(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                MPI_Datatype rt, int root, MPI_Comm m)
{ shim_init(); return gather(s, sc, st, r, rc, rt, root, m, NULL); }
SHIM_API int MPI_Gather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
               int, MPI_Comm) ALIAS(Gather);
SHIM_API int PMPI_Igather(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                 MPI_Datatype rt, int root, MPI_Comm m, MPI_Request *q)
{ shim_init(); return gather(s, sc, st, r, rc, rt, root, m, q); }
SHIM_API int MPI_Igather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                int, MPI_Comm, MPI_Request *) ALIAS(Igather);

SHIM_API int PMPI_Scatter(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                 MPI_Datatype rt, int root, MPI_Comm m)
{ shim_init(); return scatter(s, sc, st, r, rc, rt, root, m, NULL); }
SHIM_API int MPI_Scatter(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                int, MPI_Comm) ALIAS(Scatter);
SHIM_API int PMPI_Iscatter(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                  MPI_Datatype rt, int root, MPI_Comm m, MPI_Request *q)
{ shim_init(); return scatter(s, sc, st, r, rc, rt, root, m, q); }
SHIM_API int MPI_Iscatter(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
                 int, MPI_Comm, MPI_Request *) ALIAS(Iscatter);

SHIM_API int PMPI_Barrier(MPI_Comm m)
{ shim_init(); return barrier(m, NULL); }
SHIM_API int MPI_Barrier(MPI_Comm) ALIAS(Barrier);
SHIM_API int PMPI_Ibarrier(MPI_Comm m, MPI_Request *q)
{ shim_init(); return barrier(m, q); }
SHIM_API int MPI_Ibarrier(MPI_Comm, MPI_Request *) ALIAS(Ibarrier);
