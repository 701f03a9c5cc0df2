/* Argument checking and error reporting of every public function, on a
 * one-rank communicator; the wrong-secret refusal on a two-rank bootstrap;
 * status strings; init_env without a launcher. Single process (forks
 * its own helpers). */
#include <rcoll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* expect an invalid-argument error whose message names the call */
#define BAD(call, name)                                                      \
    do {                                                                     \
        rcoll_status_t _st = (call);                                         \
        CHECK(_st == RCOLL_ERR_INVALID_ARGUMENT, "%s returned %d (%s)", #call, \
              _st, rcoll_last_error());                                      \
        CHECK(strstr(rcoll_last_error(), name) != NULL,                      \
              "%s: message \"%s\" does not name %s", #call,                  \
              rcoll_last_error(), name);                                     \
    } while (0)

static void bad_arguments(rcoll_comm_t c)
{
    float buf[4] = {0};
    rcoll_request_t req;
    size_t huge = SIZE_MAX / 2;

    /* NULL communicator */
    BAD(rcoll_allreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, NULL, NULL),
        "rcoll_allreduce");
    BAD(rcoll_allgather(buf, buf, 1, RCOLL_FLOAT32, NULL, NULL),
        "rcoll_allgather");
    BAD(rcoll_broadcast(buf, buf, 1, RCOLL_FLOAT32, 0, NULL, NULL),
        "rcoll_broadcast");
    BAD(rcoll_reduce_scatter(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, NULL, NULL),
        "rcoll_reduce_scatter");
    BAD(rcoll_reduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, 0, NULL, NULL),
        "rcoll_reduce");
    BAD(rcoll_barrier(NULL), "rcoll_barrier");
    BAD(rcoll_send(buf, 1, RCOLL_FLOAT32, 0, NULL, NULL), "rcoll_send");
    BAD(rcoll_recv(buf, 1, RCOLL_FLOAT32, 0, NULL, NULL), "rcoll_recv");
    BAD(rcoll_iallreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, NULL, NULL,
                         &req), "rcoll_allreduce");
    BAD(rcoll_ibarrier(NULL, &req), "rcoll_barrier");
    BAD(rcoll_comm_rank(NULL, NULL), "rcoll_comm_rank");
    BAD(rcoll_comm_size(c, NULL), "rcoll_comm_size");
    BAD(rcoll_comm_destroy(NULL), "rcoll_comm_destroy");
    BAD(rcoll_comm_abort(NULL), "rcoll_comm_abort");
    BAD(rcoll_comm_get_async_error(NULL, NULL), "rcoll_comm_get_async_error");
    BAD(rcoll_test(NULL, NULL), "rcoll_test");
    BAD(rcoll_wait(NULL), "rcoll_wait");
    BAD(rcoll_get_unique_id(NULL), "rcoll_get_unique_id");
    BAD(rcoll_comm_init_rank(NULL, 1, NULL, 0), "rcoll_comm_init_rank");
    BAD(rcoll_comm_init_env(NULL), "rcoll_comm_init_env");
    /* NULL request pointer */
    BAD(rcoll_iallreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL, NULL),
        "req");
    /* NULL buffers with count > 0 (count 0 is legal with NULL) */
    BAD(rcoll_allreduce(NULL, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL),
        "sendbuf");
    BAD(rcoll_allreduce(buf, NULL, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL),
        "recvbuf");
    BAD(rcoll_allgather(NULL, buf, 1, RCOLL_FLOAT32, c, NULL), "sendbuf");
    BAD(rcoll_broadcast(buf, NULL, 1, RCOLL_FLOAT32, 0, c, NULL), "recvbuf");
    BAD(rcoll_broadcast(NULL, buf, 1, RCOLL_FLOAT32, 0, c, NULL), "sendbuf");
    BAD(rcoll_reduce_scatter(NULL, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL),
        "sendbuf");
    BAD(rcoll_reduce(buf, NULL, 1, RCOLL_FLOAT32, RCOLL_SUM, 0, c, NULL),
        "recvbuf");
    CHECK(rcoll_allreduce(NULL, NULL, 0, RCOLL_FLOAT32, RCOLL_SUM, c, NULL) ==
              RCOLL_OK, "count 0 with NULL buffers is legal: %s",
          rcoll_last_error());
    /* bad enums */
    BAD(rcoll_allreduce(buf, buf, 1, (rcoll_datatype_t)99, RCOLL_SUM, c, NULL),
        "datatype");
    BAD(rcoll_allreduce(buf, buf, 1, (rcoll_datatype_t)-1, RCOLL_SUM, c, NULL),
        "datatype");
    BAD(rcoll_allreduce(buf, buf, 1, RCOLL_FLOAT32, (rcoll_op_t)5, c, NULL),
        "op");
    BAD(rcoll_reduce(buf, buf, 1, RCOLL_FLOAT32, (rcoll_op_t)-3, 0, c, NULL),
        "op");
    BAD(rcoll_allgather(buf, buf, 1, RCOLL_DATATYPE_COUNT, c, NULL),
        "datatype");
    /* roots and peers out of range */
    BAD(rcoll_broadcast(buf, buf, 1, RCOLL_FLOAT32, 1, c, NULL), "root 1");
    BAD(rcoll_broadcast(buf, buf, 1, RCOLL_FLOAT32, -1, c, NULL), "root -1");
    BAD(rcoll_reduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, 7, c, NULL),
        "root 7");
    BAD(rcoll_send(buf, 1, RCOLL_FLOAT32, 0, c, NULL), "peer 0");
    BAD(rcoll_recv(buf, 1, RCOLL_FLOAT32, 5, c, NULL), "peer 5");
    BAD(rcoll_send_tag(buf, 1, RCOLL_FLOAT32, 0, -1, c, NULL), "tag -1");
    BAD(rcoll_irecv_tag(buf, 1, RCOLL_FLOAT32, 0, -7, c, NULL, &req),
        "tag -7");
    BAD(rcoll_gather(buf, buf, 1, RCOLL_FLOAT32, 1, c, NULL), "root 1");
    BAD(rcoll_scatter(buf, buf, 1, RCOLL_FLOAT32, -1, c, NULL), "root -1");
    BAD(rcoll_alltoall(buf, NULL, 1, RCOLL_FLOAT32, c, NULL), "recvbuf");
    BAD(rcoll_alltoall(buf, buf, SIZE_MAX / 2, RCOLL_FLOAT32, c, NULL),
        "overflow");
    {
        size_t one[1] = {1}, two[1] = {2}, zero[1] = {0};
        BAD(rcoll_alltoallv(buf, one, zero, buf, two, zero, RCOLL_FLOAT32, c,
                            NULL), "sendcounts[0] = 1 but recvcounts[0] = 2");
        BAD(rcoll_alltoallv(buf, NULL, zero, buf, one, zero, RCOLL_FLOAT32, c,
                            NULL), "sendcounts is NULL");
        BAD(rcoll_alltoallv(NULL, one, zero, buf, one, zero, RCOLL_FLOAT32, c,
                            NULL), "sendbuf is NULL");
    }
    BAD(rcoll_group_end(), "no rcoll_group_start");
    /* counts whose byte size overflows */
    BAD(rcoll_allreduce(buf, buf, huge, RCOLL_FLOAT64, RCOLL_SUM, c, NULL),
        "overflow");
    BAD(rcoll_allgather(buf, buf, SIZE_MAX, RCOLL_INT8, c, NULL), "overflow");
    BAD(rcoll_broadcast(buf, buf, SIZE_MAX / 4 + 1, RCOLL_FLOAT32, 0, c, NULL),
        "overflow");
    /* init arguments */
    rcoll_comm_t c2;
    rcoll_unique_id_t id;
    memset(&id, 0, sizeof(id));
    BAD(rcoll_comm_init_rank(&c2, 0, &id, 0), "nranks");
    BAD(rcoll_comm_init_rank(&c2, 2, &id, 2), "rank 2");
    BAD(rcoll_comm_init_rank(&c2, 2, &id, -1), "rank -1");
    BAD(rcoll_comm_init_rank(&c2, 1, &id, 0), "unique id");
}

static void one_rank(void)
{
    rcoll_unique_id_t id;
    rcoll_comm_t c;
    CHECK(rcoll_get_unique_id(&id) == RCOLL_OK, "get id: %s",
          rcoll_last_error());
    CHECK(rcoll_comm_init_rank(&c, 1, &id, 0) == RCOLL_OK, "init 1 rank: %s",
          rcoll_last_error());
    int r = -1, n = -1;
    CHECK(rcoll_comm_rank(c, &r) == RCOLL_OK && r == 0, "rank");
    CHECK(rcoll_comm_size(c, &n) == RCOLL_OK && n == 1, "size");
    bad_arguments(c);
    /* the communicator still works after all those refusals */
    double x[3] = {1, 2, 3}, y[3];
    CHECK(rcoll_allreduce(x, y, 3, RCOLL_FLOAT64, RCOLL_SUM, c, NULL) ==
              RCOLL_OK && y[2] == 3.0, "1-rank allreduce");
    rcoll_status_t e = RCOLL_ERR_INTERNAL;
    CHECK(rcoll_comm_get_async_error(c, &e) == RCOLL_OK && e == RCOLL_OK,
          "no async error");
    CHECK(rcoll_comm_destroy(c) == RCOLL_OK, "destroy: %s", rcoll_last_error());
}

/* Every call on a destroyed or aborted communicator: an argument error
 * naming the call (the handle is checked against the live communicators
 * before it is touched; under ASan this test also proves no freed memory
 * is read). how 2 and 3 make a call first, so that this thread's cache of
 * the last communicator it found live (core/comm.c, live_gen) holds the
 * handle when it dies. */
static void dead_handles(void)
{
    for (int how = 0; how < 4; how++) {
        rcoll_unique_id_t id;
        rcoll_comm_t c;
        float buf[4] = {0};
        rcoll_request_t req;
        void *h;
        int v;
        rcoll_status_t e;
        CHECK(rcoll_get_unique_id(&id) == RCOLL_OK &&
                  rcoll_comm_init_rank(&c, 1, &id, 0) == RCOLL_OK,
              "init: %s", rcoll_last_error());
        if (how >= 2)
            CHECK(rcoll_allreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c,
                                  NULL) == RCOLL_OK &&
                      rcoll_allreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM,
                                      c, NULL) == RCOLL_OK,
                  "a call before it dies: %s", rcoll_last_error());
        if (how % 2 == 0)
            CHECK(rcoll_comm_destroy(c) == RCOLL_OK, "destroy");
        else
            CHECK(rcoll_comm_abort(c) == RCOLL_OK, "abort");
        BAD(rcoll_allreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL),
            "not a live communicator");
        BAD(rcoll_allgather(buf, buf, 1, RCOLL_FLOAT32, c, NULL), "rcoll_allgather");
        BAD(rcoll_broadcast(buf, buf, 1, RCOLL_FLOAT32, 0, c, NULL), "rcoll_broadcast");
        BAD(rcoll_reduce_scatter(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL),
            "rcoll_reduce_scatter");
        BAD(rcoll_reduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, 0, c, NULL),
            "rcoll_reduce");
        BAD(rcoll_barrier(c), "rcoll_barrier");
        BAD(rcoll_send(buf, 1, RCOLL_FLOAT32, 0, c, NULL), "rcoll_send");
        BAD(rcoll_recv(buf, 1, RCOLL_FLOAT32, 0, c, NULL), "rcoll_recv");
        BAD(rcoll_iallreduce(buf, buf, 1, RCOLL_FLOAT32, RCOLL_SUM, c, NULL, &req),
            "rcoll_allreduce");
        BAD(rcoll_ibarrier(c, &req), "rcoll_barrier");
        BAD(rcoll_comm_rank(c, &v), "rcoll_comm_rank");
        BAD(rcoll_comm_size(c, &v), "rcoll_comm_size");
        BAD(rcoll_comm_get_async_error(c, &e), "rcoll_comm_get_async_error");
        BAD(rcoll_comm_register(c, buf, sizeof(buf), &h), "rcoll_comm_register");
        BAD(rcoll_comm_dump(c), "rcoll_comm_dump");
        BAD(rcoll_comm_abort(c), "rcoll_comm_abort");
        BAD(rcoll_comm_destroy(c), "rcoll_comm_destroy"); /* twice */
    }
}

/* A rank presenting the wrong secret is refused with RCOLL_ERR_AUTH, and
 * the real ranks still form their communicator. */
static void wrong_secret(void)
{
    /* fork before the id's root thread exists; ids go through pipes */
    int p1[2], p2[2], status;
    rcoll_unique_id_t id, bad;
    if (pipe(p1) || pipe(p2))
        return;
    pid_t imp = fork();
    if (imp == 0) {
        rcoll_comm_t c;
        if (read(p1[0], &bad, sizeof(bad)) != (ssize_t)sizeof(bad))
            _exit(1);
        rcoll_status_t st = rcoll_comm_init_rank(&c, 2, &bad, 1);
        printf("impostor: %s: %s\n", rcoll_status_string(st),
               rcoll_last_error());
        _exit(st == RCOLL_ERR_AUTH ? 0 : 1);
    }
    pid_t p = fork();
    if (p == 0) {
        rcoll_comm_t c;
        char go;
        /* rank 1 starts only after the impostor was turned away */
        if (read(p2[0], &id, sizeof(id)) != (ssize_t)sizeof(id) ||
            read(p2[0], &go, 1) != 1)
            _exit(1);
        rcoll_status_t st = rcoll_comm_init_rank(&c, 2, &id, 1);
        if (st != RCOLL_OK) {
            printf("rank 1: %s\n", rcoll_last_error());
            _exit(1);
        }
        int v = 5, s = 0;
        st = rcoll_allreduce(&v, &s, 1, RCOLL_INT32, RCOLL_SUM, c, NULL);
        rcoll_comm_destroy(c);
        _exit(st == RCOLL_OK && s == 12 ? 0 : 1);
    }
    CHECK(rcoll_get_unique_id(&id) == RCOLL_OK, "get id");
    bad = id;
    bad.internal[40] ^= 0x55; /* inside the secret */
    bad.internal[41] ^= 0x55;
    CHECK(write(p1[1], &bad, sizeof(bad)) == (ssize_t)sizeof(bad), "pipe");
    waitpid(imp, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the impostor was not refused with RCOLL_ERR_AUTH");
    CHECK(write(p2[1], &id, sizeof(id)) == (ssize_t)sizeof(id) &&
              write(p2[1], "g", 1) == 1, "pipe");
    rcoll_comm_t c;
    rcoll_status_t st = rcoll_comm_init_rank(&c, 2, &id, 0);
    CHECK(st == RCOLL_OK, "rank 0 after the impostor: %s", rcoll_last_error());
    if (st == RCOLL_OK) {
        int v = 7, s = 0;
        CHECK(rcoll_allreduce(&v, &s, 1, RCOLL_INT32, RCOLL_SUM, c, NULL) ==
                  RCOLL_OK && s == 12, "allreduce after the impostor");
        rcoll_comm_destroy(c);
    }
    waitpid(p, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed");
    close(p1[0]); close(p1[1]); close(p2[0]); close(p2[1]);
}

static void strings(void)
{
    int codes[] = {RCOLL_OK, RCOLL_INPROGRESS, RCOLL_ERR_INVALID_ARGUMENT,
                   RCOLL_ERR_NOT_SUPPORTED, RCOLL_ERR_TRUNCATED,
                   RCOLL_ERR_NO_MEMORY,
                   RCOLL_ERR_SYSTEM, RCOLL_ERR_NO_DEVICE, RCOLL_ERR_REMOTE,
                   RCOLL_ERR_MISMATCH, RCOLL_ERR_AUTH, RCOLL_ERR_PROTOCOL,
                   RCOLL_ERR_TIMEOUT, RCOLL_ERR_ABORTED, RCOLL_ERR_INTERNAL};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        CHECK(strcmp(rcoll_status_string((rcoll_status_t)codes[i]),
                     "unknown status") != 0, "string for %d", codes[i]);
    CHECK(!strcmp(rcoll_status_string((rcoll_status_t)12345),
                  "unknown status"), "unknown code");
    CHECK(rcoll_datatype_size(RCOLL_BFLOAT16) == 2 &&
              rcoll_datatype_size(RCOLL_UINT64) == 8 &&
              rcoll_datatype_size((rcoll_datatype_t)77) == 0, "sizes");
    CHECK(!strcmp(rcoll_version(), "0.1.0") || rcoll_version()[0], "version");
}

static void no_launcher(void)
{
    rcoll_comm_t c;
    const char *vars[] = {"RCOLL_RANK", "RCOLL_SIZE", "RCOLL_ROOT", "RANK",
                          "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID",
                          "SLURM_NTASKS", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (getenv(vars[i])) /* run under a launcher: not this case */
            return;
    BAD(rcoll_comm_init_env(&c), "no launcher environment");
}

int main(void)
{
    strings();
    wrong_secret(); /* forks: first, while this process has no threads */
    one_rank();
    dead_handles();
    no_launcher();
    printf("test_api: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
