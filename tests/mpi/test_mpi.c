/* An ordinary MPI program (it knows nothing of rcoll) that checks every
 * collective librcoll-mpi takes over against values computed here:
 * blocking and non-blocking, in place and not, on MPI_COMM_WORLD, a dup
 * and a split, non-blocking ones mixed with the program's own
 * isend/irecv in one MPI_Waitall, derived datatypes (packed), and the
 * calls that must stay with MPI (a user op, MINLOC, a derived type in a
 * reduction). Run it with and without LD_PRELOAD=librcoll-mpi.so: the
 * results must be the same. `errors` instead checks that a failure
 * reaches an MPI_ERRORS_RETURN handler with rcoll's message.
 * Usage: mpirun -np N test_mpi [errors|single] */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails, checks, wrank;

#define CHECK(cond, ...) do { checks++; if (!(cond)) { fails++; \
    if (fails < 20) { fprintf(stderr, "rank %d: FAIL %s:%d: ", wrank, \
        __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); \
        fprintf(stderr, "\n"); } } } while (0)

/* element i of rank r's contribution: small integers, so that sums of
 * doubles are exact in any order */
static int64_t val(int r, size_t i) { return (int64_t)((r + 1) * 3 + (i % 97)); }

static const size_t counts[] = { 0, 1, 7, 1000, 70001 };
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static void allreduce(MPI_Comm comm, const char *name, int nb)
{
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    for (size_t k = 0; k < NCOUNTS; k++) {
        size_t c = counts[k];
        int64_t *a = malloc((c + 1) * 8), *b = malloc((c + 1) * 8);
        double *d = malloc((c + 1) * sizeof(double));
        for (size_t i = 0; i < c; i++) {
            a[i] = val(rank, i);
            d[i] = (double)val(rank, i);
        }
        MPI_Request rq[2];
        if (nb) {
            MPI_Iallreduce(a, b, (int)c, MPI_INT64_T, MPI_SUM, comm, &rq[0]);
            MPI_Iallreduce(MPI_IN_PLACE, d, (int)c, MPI_DOUBLE, MPI_MAX, comm,
                           &rq[1]);
            MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        } else {
            MPI_Allreduce(a, b, (int)c, MPI_INT64_T, MPI_SUM, comm);
            MPI_Allreduce(MPI_IN_PLACE, d, (int)c, MPI_DOUBLE, MPI_MAX, comm);
        }
        for (size_t i = 0; i < c; i++) {
            int64_t s = 0;
            for (int r = 0; r < n; r++)
                s += val(r, i);
            CHECK(b[i] == s, "%s allreduce sum c=%zu i=%zu: %lld != %lld",
                  name, c, i, (long long)b[i], (long long)s);
            CHECK(d[i] == (double)val(n - 1, i), "%s allreduce max in place "
                  "c=%zu i=%zu", name, c, i);
            if (b[i] != s || d[i] != (double)val(n - 1, i))
                break;
        }
        free(a); free(b); free(d);
    }
}

static void reduce_family(MPI_Comm comm, const char *name, int nb)
{
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    int c = 1001;
    int root = n - 1;
    int *a = malloc(sizeof(int) * c * n), *b = malloc(sizeof(int) * c * n);
    for (int i = 0; i < c * n; i++)
        a[i] = (int)val(rank, i);
    MPI_Request rq = MPI_REQUEST_NULL;
    /* reduce, out of place and in place at the root */
    memcpy(b, a, sizeof(int) * c);
    if (nb)
        MPI_Ireduce(rank == root ? MPI_IN_PLACE : a, b, c, MPI_INT, MPI_MIN,
                    root, comm, &rq), MPI_Wait(&rq, MPI_STATUS_IGNORE);
    else
        MPI_Reduce(rank == root ? MPI_IN_PLACE : a, b, c, MPI_INT, MPI_MIN,
                   root, comm);
    if (rank == root)
        for (int i = 0; i < c; i++) {
            CHECK(b[i] == (int)val(0, i), "%s reduce min i=%d", name, i);
            if (b[i] != (int)val(0, i)) break;
        }
    /* reduce_scatter_block: out of place, then in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        memcpy(b, a, sizeof(int) * c * n);
        const void *s = inplace ? MPI_IN_PLACE : a;
        if (nb)
            MPI_Ireduce_scatter_block(s, b, c, MPI_INT, MPI_SUM, comm, &rq),
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
        else
            MPI_Reduce_scatter_block(s, b, c, MPI_INT, MPI_SUM, comm);
        for (int i = 0; i < c; i++) {
            int e = 0;
            for (int r = 0; r < n; r++)
                e += (int)val(r, rank * c + i);
            CHECK(b[i] == e, "%s reduce_scatter_block%s i=%d: %d != %d",
                  name, inplace ? " in place" : "", i, b[i], e);
            if (b[i] != e) break;
        }
    }
    /* reduce_scatter with unequal counts (rank r gets r + 3 elements) */
    int *rc = malloc(sizeof(int) * n), total = 0, off = 0;
    for (int r = 0; r < n; r++) {
        rc[r] = r + 3;
        if (r < rank) off += rc[r];
        total += rc[r];
    }
    for (int inplace = 0; inplace < 2; inplace++) {
        memcpy(b, a, sizeof(int) * total);
        const void *s = inplace ? MPI_IN_PLACE : a;
        if (nb)
            MPI_Ireduce_scatter(s, b, rc, MPI_INT, MPI_SUM, comm, &rq),
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
        else
            MPI_Reduce_scatter(s, b, rc, MPI_INT, MPI_SUM, comm);
        for (int i = 0; i < rc[rank]; i++) {
            int e = 0;
            for (int r = 0; r < n; r++)
                e += (int)val(r, off + i);
            CHECK(b[i] == e, "%s reduce_scatter%s i=%d", name,
                  inplace ? " in place" : "", i);
        }
    }
    free(rc); free(a); free(b);
}

static void movement(MPI_Comm comm, const char *name, int nb)
{
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    MPI_Request rq = MPI_REQUEST_NULL;
#define WAIT() do { if (nb) MPI_Wait(&rq, MPI_STATUS_IGNORE); } while (0)
    for (size_t k = 0; k < NCOUNTS; k++) {
        int c = (int)counts[k];
        size_t tot = (size_t)c * n;
        int32_t *s = malloc(4 * (tot + 1)), *r = malloc(4 * (tot + 1));
        int root = (int)(k % n);
        /* bcast */
        for (int i = 0; i < c; i++)
            s[i] = rank == root ? (int32_t)val(root, i) : -1;
        if (nb) MPI_Ibcast(s, c, MPI_INT32_T, root, comm, &rq);
        else MPI_Bcast(s, c, MPI_INT32_T, root, comm);
        WAIT();
        for (int i = 0; i < c; i++) {
            CHECK(s[i] == (int32_t)val(root, i), "%s bcast c=%d i=%d", name, c, i);
            if (s[i] != (int32_t)val(root, i)) break;
        }
        /* allgather, out of place and in place */
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < tot; i++) r[i] = -1;
            for (int i = 0; i < c; i++) s[i] = (int32_t)val(rank, i);
            if (inplace) memcpy(r + (size_t)rank * c, s, 4 * (size_t)c);
            const void *sb = inplace ? MPI_IN_PLACE : s;
            if (nb) MPI_Iallgather(sb, c, MPI_INT32_T, r, c, MPI_INT32_T, comm, &rq);
            else MPI_Allgather(sb, c, MPI_INT32_T, r, c, MPI_INT32_T, comm);
            WAIT();
            for (size_t i = 0; i < tot; i++) {
                int32_t e = (int32_t)val((int)(i / c), i % c);
                CHECK(r[i] == e, "%s allgather%s c=%d i=%zu", name,
                      inplace ? " in place" : "", c, i);
                if (r[i] != e) break;
            }
        }
        /* alltoall, out of place and in place: block p of rank q's input
         * is val(q, p * c + i) */
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < tot; i++) s[i] = (int32_t)val(rank, i);
            if (inplace) memcpy(r, s, 4 * tot);
            const void *sb = inplace ? MPI_IN_PLACE : s;
            if (nb) MPI_Ialltoall(sb, c, MPI_INT32_T, r, c, MPI_INT32_T, comm, &rq);
            else MPI_Alltoall(sb, c, MPI_INT32_T, r, c, MPI_INT32_T, comm);
            WAIT();
            for (size_t i = 0; i < tot; i++) {
                int q = (int)(i / c);
                int32_t e = (int32_t)val(q, (size_t)rank * c + i % c);
                CHECK(r[i] == e, "%s alltoall%s c=%d i=%zu", name,
                      inplace ? " in place" : "", c, i);
                if (r[i] != e) break;
            }
        }
        /* gather and scatter, the root in place and not */
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int i = 0; i < c; i++) s[i] = (int32_t)val(rank, i);
            for (size_t i = 0; i < tot; i++) r[i] = -1;
            int ip = inplace && rank == root;
            if (ip) memcpy(r + (size_t)root * c, s, 4 * (size_t)c);
            const void *sb = ip ? MPI_IN_PLACE : s;
            if (nb) MPI_Igather(sb, c, MPI_INT32_T, r, c, MPI_INT32_T, root, comm, &rq);
            else MPI_Gather(sb, c, MPI_INT32_T, r, c, MPI_INT32_T, root, comm);
            WAIT();
            if (rank == root)
                for (size_t i = 0; i < tot; i++) {
                    int32_t e = (int32_t)val((int)(i / c), i % c);
                    CHECK(r[i] == e, "%s gather%s c=%d i=%zu", name,
                          inplace ? " in place" : "", c, i);
                    if (r[i] != e) break;
                }
            /* scatter: the root's block p is val(root, p * c + i) */
            for (size_t i = 0; i < tot; i++) s[i] = (int32_t)val(root, i);
            for (size_t i = 0; i < tot; i++) r[i] = -1;
            void *rb = ip ? MPI_IN_PLACE : r;
            if (nb) MPI_Iscatter(s, c, MPI_INT32_T, rb, c, MPI_INT32_T, root, comm, &rq);
            else MPI_Scatter(s, c, MPI_INT32_T, rb, c, MPI_INT32_T, root, comm);
            WAIT();
            int32_t *got = ip ? s + (size_t)root * c : r;
            for (int i = 0; i < c; i++) {
                int32_t e = (int32_t)val(root, (size_t)rank * c + i);
                CHECK(got[i] == e, "%s scatter%s c=%d i=%d", name,
                      inplace ? " in place" : "", c, i);
                if (got[i] != e) break;
            }
        }
        free(s); free(r);
    }
    /* alltoallv: rank q sends (q + p) % 3 * 5 + 1 elements to rank p,
     * placed in reverse block order with gaps */
    int *sc = malloc(4 * n), *sd = malloc(4 * n), *rc = malloc(4 * n), *rd = malloc(4 * n);
    int so = 0, ro = 0;
    for (int p = n - 1; p >= 0; p--) {
        sc[p] = (rank + p) % 3 * 5 + 1; sd[p] = so; so += sc[p] + 2;
        rc[p] = (p + rank) % 3 * 5 + 1; rd[p] = ro; ro += rc[p] + 3;
    }
    int32_t *s = malloc(4 * so), *r = malloc(4 * ro);
    for (int p = 0; p < n; p++)
        for (int i = 0; i < sc[p]; i++) s[sd[p] + i] = (int32_t)(rank * 1000 + p * 10 + i);
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int i = 0; i < ro; i++) r[i] = -7;
        if (inplace)
            for (int p = 0; p < n; p++)
                for (int i = 0; i < rc[p]; i++) r[rd[p] + i] = (int32_t)(rank * 1000 + p * 10 + i);
        const void *sb = inplace ? MPI_IN_PLACE : s;
        if (nb) MPI_Ialltoallv(sb, sc, sd, MPI_INT32_T, r, rc, rd, MPI_INT32_T, comm, &rq);
        else MPI_Alltoallv(sb, sc, sd, MPI_INT32_T, r, rc, rd, MPI_INT32_T, comm);
        WAIT();
        for (int p = 0; p < n; p++)
            for (int i = 0; i < rc[p]; i++)
                CHECK(r[rd[p] + i] == p * 1000 + rank * 10 + i, "%s alltoallv%s "
                      "from %d i=%d", name, inplace ? " in place" : "", p, i);
    }
    free(s); free(r); free(sc); free(sd); free(rc); free(rd);
    if (nb) MPI_Ibarrier(comm, &rq);
    else MPI_Barrier(comm);
    WAIT();
#undef WAIT
}

/* A non-contiguous datatype (every other int) in bcast, allgather and
 * alltoallv (packed on rcoll), and a reduction rcoll cannot do (stays with MPI). */
static void derived(MPI_Comm comm)
{
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    MPI_Datatype every2;
    MPI_Type_vector(50, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    int *buf = malloc(sizeof(int) * 100 * n), *out = malloc(sizeof(int) * 50 * n);
    for (int i = 0; i < 100; i++) buf[i] = rank == 0 ? i : -1;
    MPI_Bcast(buf, 1, every2, 0, comm);
    for (int i = 0; i < 100; i++)
        CHECK(buf[i] == (i % 2 == 0 ? i : (rank == 0 ? i : -1)),
              "bcast vector type i=%d", i);
    for (int i = 0; i < 100; i++) buf[i] = rank * 100 + i;
    MPI_Allgather(buf, 1, every2, out, 50, MPI_INT, comm);
    for (int q = 0; q < n; q++)
        for (int i = 0; i < 50; i++)
            CHECK(out[q * 50 + i] == q * 100 + 2 * i, "allgather vector type");
    /* a non-blocking broadcast into a derived type that the program
     * frees before the wait (MPI allows it) */
    MPI_Datatype v2;
    MPI_Type_vector(50, 1, 2, MPI_INT, &v2);
    MPI_Type_commit(&v2);
    for (int i = 0; i < 100; i++) buf[i] = rank == 0 ? 1000 + i : -1;
    MPI_Request rq;
    MPI_Ibcast(buf, 1, v2, 0, comm, &rq);
    MPI_Type_free(&v2);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    for (int i = 0; i < 100; i++)
        CHECK(buf[i] == (i % 2 == 0 || rank == 0 ? 1000 + i : -1),
              "ibcast into a freed vector type i=%d", i);
    /* a reduction over a type rcoll does not reduce (16-bit integers)
     * goes to MPI, and is right */
    short *red = malloc(sizeof(short) * 100), *sh = malloc(sizeof(short) * 100);
    for (int i = 0; i < 100; i++) { sh[i] = (short)(rank + i); red[i] = -5; }
    MPI_Allreduce(sh, red, 100, MPI_SHORT, MPI_SUM, comm);
    for (int i = 0; i < 100; i++)
        CHECK(red[i] == (short)(n * (n - 1) / 2 + n * i), "allreduce short (MPI) i=%d", i);
    free(sh);
    free(red); free(buf); free(out);
    MPI_Type_free(&every2);
}

static void my_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* calls that stay with MPI: a user op, MINLOC */
static void fallbacks(MPI_Comm comm)
{
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    MPI_Op op;
    MPI_Op_create(my_sum, 1, &op);
    int a[3] = { rank, 2 * rank, 3 }, b[3];
    MPI_Allreduce(a, b, 3, MPI_INT, op, comm);
    CHECK(b[0] == n * (n - 1) / 2 && b[1] == n * (n - 1) && b[2] == 3 * n,
          "allreduce user op");
    MPI_Op_free(&op);
    struct { double v; int i; } in = { (double)(rank % 2), rank }, o;
    MPI_Allreduce(&in, &o, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm);
    CHECK(o.v == 0.0 && o.i == 0, "allreduce minloc");
}

/* Non-blocking collectives in one MPI_Waitall with the program's own
 * isend/irecv around a ring. */
static void mixed(MPI_Comm comm)
{
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    enum { C = 4096 };
    int *a = malloc(4 * C), *b = malloc(4 * C), *g = malloc(4 * n);
    for (int i = 0; i < C; i++) a[i] = (int)val(rank, i);
    int to = (rank + 1) % n, from = (rank + n - 1) % n, sv = rank * 7, rv = -1;
    MPI_Request rq[4];
    MPI_Irecv(&rv, 1, MPI_INT, from, 5, comm, &rq[0]);
    MPI_Iallreduce(a, b, C, MPI_INT, MPI_SUM, comm, &rq[1]);
    MPI_Isend(&sv, 1, MPI_INT, to, 5, comm, &rq[2]);
    MPI_Iallgather(&sv, 1, MPI_INT, g, 1, MPI_INT, comm, &rq[3]);
    MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
    CHECK(rv == from * 7, "irecv in a waitall with collectives");
    for (int q = 0; q < n; q++)
        CHECK(g[q] == q * 7, "iallgather in a waitall");
    for (int i = 0; i < C; i++) {
        int e = 0;
        for (int q = 0; q < n; q++) e += (int)val(q, i);
        CHECK(b[i] == e, "iallreduce in a waitall i=%d", i);
        if (b[i] != e) break;
    }
    /* a non-blocking all-reduce progresses while this rank sits in a
     * blocking receive that the last rank sends only after its own
     * all-reduce finished */
    MPI_Request r1;
    MPI_Iallreduce(a, b, C, MPI_INT, MPI_SUM, comm, &r1);
    if (rank == n - 1) {
        MPI_Wait(&r1, MPI_STATUS_IGNORE);
        for (int q = 0; q < n - 1; q++)
            MPI_Send(&sv, 1, MPI_INT, q, 9, comm);
    } else {
        MPI_Recv(&rv, 1, MPI_INT, n - 1, 9, comm, MPI_STATUS_IGNORE);
        MPI_Wait(&r1, MPI_STATUS_IGNORE);
    }
    CHECK(b[0] == (int)(3 * n * (n + 1) / 2), "iallreduce across MPI_Recv");
    free(a); free(b); free(g);
}

/* MPI_THREAD_MULTIPLE: two threads, each with its own communicator (a
 * dup), run all-reduces and broadcasts at once; the first calls make the
 * two rcoll communicators concurrently. */
typedef struct { MPI_Comm comm; int id, bad; } thr_t;

static void *thr_main(void *arg)
{
    thr_t *t = arg;
    int rank, n;
    MPI_Comm_rank(t->comm, &rank);
    MPI_Comm_size(t->comm, &n);
    enum { C = 3000 };
    int *a = malloc(4 * C), *b = malloc(4 * C);
    for (int it = 0; it < 50; it++) {
        for (int i = 0; i < C; i++) a[i] = rank + i + it + t->id;
        MPI_Allreduce(a, b, C, MPI_INT, MPI_SUM, t->comm);
        for (int i = 0; i < C; i++)
            if (b[i] != n * (n - 1) / 2 + n * (i + it + t->id)) { t->bad++; break; }
        b[0] = rank == it % n ? it * 11 + t->id : -1;
        MPI_Bcast(b, 1, MPI_INT, it % n, t->comm);
        if (b[0] != it * 11 + t->id) t->bad++;
    }
    free(a); free(b);
    return NULL;
}

static void threads(void)
{
    thr_t t[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &t[k].comm);
        t[k].id = k;
        t[k].bad = 0;
    }
    for (int k = 0; k < 2; k++)
        pthread_create(&th[k], NULL, thr_main, &t[k]);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        CHECK(t[k].bad == 0, "thread %d: %d wrong results", k, t[k].bad);
        MPI_Comm_free(&t[k].comm);
    }
}

/* Ranks call different collectives on one communicator: rcoll fails the
 * call, and an MPI_ERRORS_RETURN handler sees an error with a message. */
static int errors(void)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int x[4] = { 1, 2, 3, 4 }, y[4];
    MPI_Barrier(c); /* makes the rcoll communicator */
    /* every rank sends 2 ints into blocks of 1: refused before posting,
     * with a message naming the call and the rank */
    int g[64];
    char m0[MPI_MAX_ERROR_STRING] = "";
    int l0 = 0, r0 = MPI_Allgather(x, 2, MPI_INT, g, 1, MPI_INT, c);
    if (r0 != MPI_SUCCESS)
        MPI_Error_string(r0, m0, &l0);
    printf("rank %d: allgather with short blocks returned %d: %s\n", wrank,
           r0, m0);
    if (r0 == MPI_SUCCESS || !strstr(m0, "MPI_Allgather failed on rank"))
        return MPI_Finalize(), 1;
    int rc = wrank == 0 ? MPI_Allreduce(x, y, 4, MPI_INT, MPI_SUM, c)
                        : MPI_Bcast(x, 4, MPI_INT, 0, c);
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, msg, &len);
    printf("rank %d: mismatched call returned %d: %s\n", wrank, rc, msg);
    int bad = rc == MPI_SUCCESS || !strstr(msg, "rcoll");
    MPI_Finalize();
    return bad;
}

int main(int argc, char **argv)
{
    /* "single": MPI_Init (MPI_THREAD_SINGLE); else THREAD_MULTIPLE */
    int provided, single = argc > 1 && !strcmp(argv[1], "single");
    if (single)
        MPI_Init(&argc, &argv);
    else
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if (argc > 1 && !strcmp(argv[1], "errors"))
        return errors();
    /* the first calls on a communicator are blocking (they make its rcoll
     * communicator); non-blocking ones before that stay with MPI */
    MPI_Comm dup, split;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, -wrank, &split);
    MPI_Comm comms[3] = { MPI_COMM_WORLD, dup, split };
    const char *names[3] = { "world", "dup", "split" };
    for (int k = 0; k < 3; k++) {
        for (int nb = 0; nb < 2; nb++) {
            allreduce(comms[k], names[k], nb);
            reduce_family(comms[k], names[k], nb);
            movement(comms[k], names[k], nb);
        }
    }
    derived(MPI_COMM_WORLD);
    fallbacks(MPI_COMM_WORLD);
    mixed(MPI_COMM_WORLD);
    mixed(split);
    if (!single && provided == MPI_THREAD_MULTIPLE)
        threads();
    MPI_Comm_free(&dup);
    MPI_Comm_free(&split);
    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0)
        printf("test_mpi: %d checks on rank 0, %d failures on all ranks\n",
               checks, all);
    MPI_Finalize();
    return all != 0;
}
