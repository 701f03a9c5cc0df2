/* librcoll-mpi: non-blocking collectives as MPI generalized requests.
 *
 * A non-blocking call returns a real MPI_Request (MPI_Grequest_start), so
 * MPI_Wait, MPI_Test, MPI_Waitall and the rest complete it together with
 * the program's own requests. MPI never asks a generalized request to make
 * progress, so rcoll's own progress thread moves the data, and one thread
 * of this library watches the posted operations and marks each one's
 * request complete when rcoll has finished it (after unpacking what
 * arrived). The program may sit in its own MPI_Recv or compute meanwhile.
 *
 * The watcher calls into the MPI (MPI_Grequest_complete, MPI_Unpack) from
 * its own thread, which MPI allows only under MPI_THREAD_MULTIPLE (Open
 * MPI 4.1 updates request state without atomics below it): non-blocking
 * calls run on rcoll only on communicators whose ranks all run at
 * MPI_THREAD_MULTIPLE (state.c agrees on it), and go to the MPI
 * otherwise. */
#include "shim.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct nb {
    rcoll_request_t rq;
    MPI_Request greq;
    shim_comm_t *sc;
    const char *call;
    shim_fin_t fin;
    int err;                /* what MPI_Wait reports */
    struct nb *next;
} nb_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t posted = PTHREAD_COND_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER;
static nb_t *pending;
static pthread_t watcher;
static int running, stopping;

static int nb_query(void *extra, MPI_Status *status)
{
    nb_t *nb = extra;
    MPI_Status_set_elements(status, MPI_BYTE, 0);
    MPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    status->MPI_ERROR = nb->err;
    return nb->err;
}

static int nb_free(void *extra)
{
    free(extra);
    return MPI_SUCCESS;
}

static int nb_cancel(void *extra, int complete)
{
    (void)extra; (void)complete;
    return MPI_SUCCESS; /* a collective cannot be cancelled */
}

/* Finishes `nb` (rcoll is done with it): its status, the work after it,
 * then the MPI request. nb may be freed by MPI from here on. */
static void nb_finish(nb_t *nb)
{
    rcoll_status_t st = rcoll_wait(nb->rq);
    int rc = shim_fin_run(&nb->fin, nb->sc->mpi, st == RCOLL_OK);
    nb->err = st != RCOLL_OK ? shim_error_code(nb->sc, nb->call, st) : rc;
    shim_comm_t *sc = nb->sc;
    PMPI_Grequest_complete(nb->greq);
    pthread_mutex_lock(&lock);
    sc->pending--;
    pthread_cond_broadcast(&finished);
    pthread_mutex_unlock(&lock);
}

/* Polls the posted operations; sleeps longer the longer nothing finishes
 * (up to 1 ms: the ranks may share few cores), and on a condition when
 * nothing is posted. */
static void *watch(void *arg)
{
    (void)arg;
    long nap_ns = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!pending && !stopping)
            pthread_cond_wait(&posted, &lock);
        if (!pending && stopping)
            break;
        nb_t *done = NULL;
        for (nb_t **p = &pending; *p;) {
            int fin = 0;
            rcoll_test((*p)->rq, &fin);
            if (fin) {
                nb_t *nb = *p;
                *p = nb->next;
                nb->next = done;
                done = nb;
            } else {
                p = &(*p)->next;
            }
        }
        pthread_mutex_unlock(&lock);
        if (done) {
            nap_ns = 0;
            while (done) {
                nb_t *nb = done;
                done = nb->next;
                nb_finish(nb);
            }
        } else {
            nap_ns = nap_ns ? nap_ns * 2 : 20000;
            if (nap_ns > 1000000)
                nap_ns = 1000000;
            struct timespec ts = { 0, nap_ns };
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int shim_nb_start(shim_comm_t *sc, const char *call, rcoll_request_t rq,
                  const shim_fin_t *fin, MPI_Request *request)
{
    nb_t *nb = calloc(1, sizeof(*nb));
    if (!nb) {
        rcoll_wait(rq);
        shim_fin_t f = *fin;
        shim_fin_run(&f, sc->mpi, 0);
        return MPI_ERR_NO_MEM;
    }
    nb->rq = rq;
    nb->sc = sc;
    nb->call = call;
    nb->fin = *fin;
    int rc = MPI_SUCCESS;
    if (nb->fin.usrc && nb->fin.utype != MPI_DATATYPE_NULL) {
        /* MPI lets the caller free its datatype while the call runs */
        MPI_Datatype dup;
        rc = PMPI_Type_dup(nb->fin.utype, &dup);
        if (rc == MPI_SUCCESS) {
            nb->fin.utype = dup;
            nb->fin.own_utype = 1;
        }
    }
    if (rc == MPI_SUCCESS)
        rc = PMPI_Grequest_start(nb_query, nb_free, nb_cancel, nb, &nb->greq);
    if (rc != MPI_SUCCESS) {
        rcoll_wait(rq);
        shim_fin_run(&nb->fin, sc->mpi, 0);
        free(nb);
        return rc;
    }
    *request = nb->greq;
    pthread_mutex_lock(&lock);
    if (!running) {
        stopping = 0;
        if (pthread_create(&watcher, NULL, watch, NULL) == 0)
            running = 1;
    }
    if (!running) {
        pthread_mutex_unlock(&lock);
        /* no thread: finish it here, before returning */
        sc->pending++;
        nb_finish(nb);
        return MPI_SUCCESS;
    }
    sc->pending++;
    nb->next = pending;
    pending = nb;
    pthread_cond_signal(&posted);
    pthread_mutex_unlock(&lock);
    return MPI_SUCCESS;
}

void shim_nb_drain(shim_comm_t *sc)
{
    pthread_mutex_lock(&lock);
    while (sc->pending > 0)
        pthread_cond_wait(&finished, &lock);
    pthread_mutex_unlock(&lock);
}

void shim_nb_stop(void)
{
    pthread_mutex_lock(&lock);
    if (!running) {
        pthread_mutex_unlock(&lock);
        return;
    }
    stopping = 1;
    pthread_cond_signal(&posted);
    pthread_mutex_unlock(&lock);
    pthread_join(watcher, NULL);
    running = 0;
}
