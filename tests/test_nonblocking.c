/* Non-blocking forms with many operations in flight at once (posted back to
 * back, completed in any order by test/wait), count-0 calls that return at
 * once, idle ranks that back off while they wait for a late one, and two
 * communicators driven from two threads of every process at the same
 * time. Run under rcoll-run. */
#include "ref.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, n;
#define CHECK_RANK rank
#include "check.h"

#define NOPS 12

static void in_flight(rcoll_comm_t c, int salt)
{
    size_t counts[NOPS];
    char *in[NOPS], *out[NOPS], *ex[NOPS];
    rcoll_request_t req[NOPS];
    int kind[NOPS];
    rcoll_datatype_t dt = RCOLL_FLOAT32;
    size_t s = 4;
    for (int i = 0; i < NOPS; i++) {
        size_t c0 = (size_t)(i * 977 + 1) % 70000 + (size_t)n;
        counts[i] = c0;
        kind[i] = i % 4;
        in[i] = malloc(c0 * s * (size_t)n);
        out[i] = malloc(c0 * s * (size_t)n);
        ex[i] = malloc(c0 * s * (size_t)n);
        rcoll_status_t st = RCOLL_OK;
        switch (kind[i]) {
        case 0: /* allreduce */
            ref_fill(in[i], c0, 0, dt, RCOLL_SUM, rank, salt + i);
            ref_reduce(ex[i], c0, 0, dt, RCOLL_SUM, n, salt + i);
            st = rcoll_iallreduce(in[i], out[i], c0, dt, RCOLL_SUM, c, NULL,
                                  &req[i]);
            break;
        case 1: /* allgather */
            ref_fill(in[i], c0, (size_t)rank * c0, dt, RCOLL_SUM, rank,
                     salt + i);
            for (int q = 0; q < n; q++)
                ref_fill(ex[i] + (size_t)q * c0 * s, c0, (size_t)q * c0, dt,
                         RCOLL_SUM, q, salt + i);
            st = rcoll_iallgather(in[i], out[i], c0, dt, c, NULL, &req[i]);
            break;
        case 2: /* broadcast from a rotating root */
            if (rank == i % n)
                ref_fill(in[i], c0, 0, dt, RCOLL_SUM, i % n, salt + i);
            ref_fill(ex[i], c0, 0, dt, RCOLL_SUM, i % n, salt + i);
            st = rcoll_ibroadcast(in[i], out[i], c0, dt, i % n, c, NULL,
                                  &req[i]);
            break;
        case 3: /* reduce_scatter with max */
            ref_fill(in[i], c0 * (size_t)n, 0, dt, RCOLL_MAX, rank, salt + i);
            ref_reduce(ex[i], c0, (size_t)rank * c0, dt, RCOLL_MAX, n,
                       salt + i);
            st = rcoll_ireduce_scatter(in[i], out[i], c0, dt, RCOLL_MAX, c,
                                       NULL, &req[i]);
            break;
        }
        CHECK(st == RCOLL_OK, "post %d: %s", i, rcoll_last_error());
    }
    /* poll the last one first, then wait in reverse order */
    int done = 0;
    rcoll_status_t tst = RCOLL_OK;
    while (!done && tst == RCOLL_OK)
        tst = rcoll_test(req[NOPS - 1], &done);
    CHECK(tst == RCOLL_OK && done, "test: %s", rcoll_last_error());
    for (int i = NOPS - 1; i >= 0; i--) {
        CHECK(rcoll_wait(req[i]) == RCOLL_OK, "wait %d: %s", i,
              rcoll_last_error());
        size_t cnt = kind[i] == 1 ? counts[i] * (size_t)n : counts[i];
        CHECK(ref_count_wrong(out[i], ex[i], cnt, dt) == 0,
              "op %d (kind %d) wrong", i, kind[i]);
        free(in[i]); free(out[i]); free(ex[i]);
    }
    /* a non-blocking barrier and send/recv ring */
    rcoll_request_t b;
    CHECK(rcoll_ibarrier(c, &b) == RCOLL_OK && rcoll_wait(b) == RCOLL_OK,
          "ibarrier");
    if (n > 1) {
        int64_t v = rank * 1000 + salt, got = -1;
        rcoll_request_t rs, rr;
        CHECK(rcoll_isend(&v, 1, RCOLL_INT64, (rank + 1) % n, c, NULL, &rs) ==
                  RCOLL_OK, "isend");
        CHECK(rcoll_irecv(&got, 1, RCOLL_INT64, (rank + n - 1) % n, c, NULL,
                          &rr) == RCOLL_OK, "irecv");
        CHECK(rcoll_wait(rs) == RCOLL_OK && rcoll_wait(rr) == RCOLL_OK,
              "send/recv wait: %s", rcoll_last_error());
        CHECK(got == ((rank + n - 1) % n) * 1000 + salt, "ring value %lld",
              (long long)got);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Count 0 of every collective whose count all ranks pass alike: legal with
 * NULL buffers, touches no buffer, and completes at once without waiting
 * for any peer (Open MPI and NCCL return at once too). Rank n-1 joins
 * 300 ms late; the others' 1,600 such calls (blocking and non-blocking,
 * between real operations) must be done well before it comes, and the
 * real operations around them must still be bit-exact. */
static void zero_count(rcoll_comm_t c)
{
    enum { NK = 8, LATE_MS = 300 };
    int32_t guard[4] = {7, 7, 7, 7};
    int32_t v = rank + 1, sum = 0;
    rcoll_request_t rq[NK], big;
    if (rank == n - 1 && n > 1)
        usleep(LATE_MS * 1000);
    double t0 = now_s();
    /* a real operation in flight across the count-0 calls */
    CHECK(rcoll_iallreduce(&v, &sum, 1, RCOLL_INT32, RCOLL_SUM, c, NULL,
                           &big) == RCOLL_OK, "iallreduce: %s",
          rcoll_last_error());
    int bad = 0;
    for (int it = 0; it < 100; it++) {
        rcoll_status_t st[2 * NK];
        int k = 0;
        /* blocking, NULL buffers */
        st[k++] = rcoll_allreduce(NULL, NULL, 0, RCOLL_FLOAT32, RCOLL_SUM, c,
                                  NULL);
        st[k++] = rcoll_allgather(NULL, NULL, 0, RCOLL_INT8, c, NULL);
        st[k++] = rcoll_broadcast(NULL, NULL, 0, RCOLL_FLOAT64, it % n, c,
                                  NULL);
        st[k++] = rcoll_reduce_scatter(NULL, NULL, 0, RCOLL_INT32, RCOLL_MAX,
                                       c, NULL);
        st[k++] = rcoll_reduce(NULL, NULL, 0, RCOLL_INT64, RCOLL_PROD,
                               (it + 1) % n, c, NULL);
        st[k++] = rcoll_alltoall(NULL, NULL, 0, RCOLL_UINT8, c, NULL);
        st[k++] = rcoll_gather(NULL, NULL, 0, RCOLL_FLOAT32, 0, c, NULL);
        st[k++] = rcoll_scatter(NULL, NULL, 0, RCOLL_FLOAT32, n - 1, c, NULL);
        /* non-blocking, real buffers that must stay untouched */
        int j = 0;
        st[k++] = rcoll_iallreduce(guard, guard + 1, 0, RCOLL_INT32,
                                   RCOLL_SUM, c, NULL, &rq[j++]);
        st[k++] = rcoll_iallgather(guard, guard + 1, 0, RCOLL_INT32, c, NULL,
                                   &rq[j++]);
        st[k++] = rcoll_ibroadcast(guard, guard + 1, 0, RCOLL_INT32, 0, c,
                                   NULL, &rq[j++]);
        st[k++] = rcoll_ireduce_scatter(guard, guard + 1, 0, RCOLL_INT32,
                                        RCOLL_SUM, c, NULL, &rq[j++]);
        st[k++] = rcoll_ireduce(guard, guard + 1, 0, RCOLL_INT32, RCOLL_MIN,
                                0, c, NULL, &rq[j++]);
        st[k++] = rcoll_ialltoall(guard, guard + 1, 0, RCOLL_INT32, c, NULL,
                                  &rq[j++]);
        st[k++] = rcoll_igather(guard, guard + 1, 0, RCOLL_INT32, 0, c, NULL,
                                &rq[j++]);
        st[k++] = rcoll_iscatter(guard, guard + 1, 0, RCOLL_INT32, 0, c, NULL,
                                 &rq[j++]);
        for (int i = 0; i < k; i++)
            bad += st[i] != RCOLL_OK;
        for (int i = 0; i < j; i++) {
            int done = 0;
            if (st[NK + i] != RCOLL_OK)
                continue;
            bad += rcoll_test(rq[i], &done) != RCOLL_OK || !done;
            bad += rcoll_wait(rq[i]) != RCOLL_OK;
        }
    }
    double dt = now_s() - t0;
    CHECK(bad == 0, "count-0 calls: %d failed (last error: %s)", bad,
          rcoll_last_error());
    CHECK(guard[0] == 7 && guard[1] == 7 && guard[2] == 7 && guard[3] == 7,
          "a count-0 call wrote a buffer");
    if (rank != n - 1)
        CHECK(dt < LATE_MS * 1e-3 / 2, "1600 count-0 calls took %.0f ms: "
              "they waited for rank %d (late by %d ms)", dt * 1e3, n - 1,
              LATE_MS);
    CHECK(rcoll_wait(big) == RCOLL_OK && sum == n * (n + 1) / 2,
          "allreduce across count-0 calls: %d (%s)", (int)sum,
          rcoll_last_error());
    /* and the collectives after them still match up */
    int32_t s2 = 0;
    CHECK(rcoll_allreduce(&v, &s2, 1, RCOLL_INT32, RCOLL_SUM, c, NULL) ==
              RCOLL_OK && s2 == n * (n + 1) / 2,
          "allreduce after count-0 calls: %d (%s)", (int)s2,
          rcoll_last_error());
}

/* CPU time of the whole process: the caller and the library's threads */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Idle ranks back off. Rank n-1 joins an all-reduce, then a non-blocking
 * one finished by rcoll_wait, IDLE_MS late each; the others wait in them,
 * and over each wait their process (the caller and every thread of the
 * library) may use at most a tenth of a core: they poll for RCOLL_SPIN_US,
 * yielding, then sleep until a message comes (under 1 ms of CPU per
 * 400 ms wait measured, shm and tcp, 5 ranks; 205-318 ms with
 * RCOLL_SPIN_US=2000000). Ranks here share 2 cores, so a waiter that kept
 * spinning would take the late rank's core. */
static void idle_backoff(rcoll_comm_t c)
{
    enum { IDLE_MS = 400 };
    if (n < 2)
        return;
    for (int form = 0; form < 2; form++) {
        int32_t v = rank + 1, sum = 0;
        CHECK(rcoll_barrier(c) == RCOLL_OK, "barrier: %s",
              rcoll_last_error());
        if (rank == n - 1)
            usleep(IDLE_MS * 1000);
        double w0 = now_s(), c0 = cpu_s();
        rcoll_status_t st;
        if (form == 0) {
            st = rcoll_allreduce(&v, &sum, 1, RCOLL_INT32, RCOLL_SUM, c,
                                 NULL);
        } else {
            rcoll_request_t rq;
            st = rcoll_iallreduce(&v, &sum, 1, RCOLL_INT32, RCOLL_SUM, c,
                                  NULL, &rq);
            if (st == RCOLL_OK)
                st = rcoll_wait(rq);
        }
        double w = now_s() - w0, cpu = cpu_s() - c0;
        CHECK(st == RCOLL_OK && sum == n * (n + 1) / 2,
              "%s for a late rank: %d (%s)",
              form ? "iallreduce+wait" : "allreduce", (int)sum,
              rcoll_last_error());
        /* a rank that did not wait long (the barrier let it go late
         * itself) has nothing to show */
        if (rank != n - 1 && w > IDLE_MS * 1e-3 / 2)
            CHECK(cpu < 0.1 * w,
                  "%s: waiting %.0f ms for rank %d took %.0f ms of CPU "
                  "(more than a tenth of a core: no back-off)",
                  form ? "iallreduce+wait" : "allreduce", w * 1e3, n - 1,
                  cpu * 1e3);
    }
}

typedef struct {
    rcoll_unique_id_t id;
    int salt;
} thr_arg_t;

static void *thread_main(void *p)
{
    thr_arg_t *a = p;
    rcoll_comm_t c;
    rcoll_status_t st = rcoll_comm_init_rank(&c, n, &a->id, rank);
    CHECK(st == RCOLL_OK, "thread init: %s", rcoll_last_error());
    if (st != RCOLL_OK)
        return NULL;
    for (int it = 0; it < 3; it++)
        in_flight(c, a->salt + it * 100);
    for (int it = 0; it < 50; it++) {
        int32_t v = rank + a->salt, s = 0;
        CHECK(rcoll_allreduce(&v, &s, 1, RCOLL_INT32, RCOLL_SUM, c, NULL) ==
                  RCOLL_OK, "thread allreduce: %s", rcoll_last_error());
        CHECK(s == n * (n - 1) / 2 + n * a->salt, "thread sum %d", s);
    }
    CHECK(rcoll_comm_destroy(c) == RCOLL_OK, "thread destroy");
    return NULL;
}

int main(void)
{
    rcoll_comm_t world;
    rcoll_status_t st = rcoll_comm_init_env(&world);
    if (st != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(world, &rank);
    rcoll_comm_size(world, &n);
    in_flight(world, 1);
    zero_count(world);
    idle_backoff(world);

    /* two more communicators, one per thread, ids made on rank 0 */
    thr_arg_t args[2];
    if (rank == 0)
        for (int t = 0; t < 2; t++)
            CHECK(rcoll_get_unique_id(&args[t].id) == RCOLL_OK, "id");
    for (int t = 0; t < 2; t++) {
        CHECK(rcoll_broadcast(&args[t].id, &args[t].id, sizeof(args[t].id),
                              RCOLL_UINT8, 0, world, NULL) == RCOLL_OK,
              "bcast id");
        args[t].salt = 7 + t * 3;
    }
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, thread_main, &args[t]);
    /* the world communicator keeps working meanwhile */
    for (int it = 0; it < 20; it++)
        CHECK(rcoll_barrier(world) == RCOLL_OK, "world barrier");
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);

    /* communicators created one after another from the same launcher
     * environment (the same RCOLL_ROOT port each time) */
    for (int k = 0; k < 3; k++) {
        rcoll_comm_t again;
        st = rcoll_comm_init_env(&again);
        CHECK(st == RCOLL_OK, "init_env #%d: %s", k + 2, rcoll_last_error());
        if (st != RCOLL_OK)
            break;
        int32_t v = rank, s = -1;
        CHECK(rcoll_allreduce(&v, &s, 1, RCOLL_INT32, RCOLL_SUM, again,
                              NULL) == RCOLL_OK && s == n * (n - 1) / 2,
              "init_env #%d allreduce", k + 2);
        CHECK(rcoll_comm_destroy(again) == RCOLL_OK, "destroy #%d", k + 2);
    }

    int64_t f = failures, tot = 0;
    rcoll_allreduce(&f, &tot, 1, RCOLL_INT64, RCOLL_SUM, world, NULL);
    if (rank == 0)
        printf("test_nonblocking: %d ranks, %d checks on rank 0, %lld "
               "failures\n", n, checks, (long long)tot);
    CHECK(rcoll_comm_destroy(world) == RCOLL_OK, "destroy");
    return tot || failures ? 1 : 0;
}
