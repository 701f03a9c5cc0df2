/* Optional libraries loaded at run time (dl.h). Each function rcoll calls
 * from libibverbs, librdmacm, hwloc or PMIx is defined here under its own
 * name: the first call loads the library (dlopen) and the symbol (dlsym),
 * later calls jump through the saved pointer. The definitions are local
 * to librcoll (its exports are rcoll_* only), so a program that links the
 * real library keeps its own. A call while the library cannot be loaded
 * fails as the library would (NULL or -1 with errno ENOSYS, PMIx's
 * PMIX_ERR_NOT_SUPPORTED); callers check rcoll_dl_open first to say why.
 * A function used from the headers' inline code must be listed here: the
 * link (-no-undefined, no -l for these libraries) fails otherwise. */
#include "config.h"
#include "util/dl.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#if HAVE_VERBS && HAVE_RDMACM
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#endif
#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif
#ifdef HAVE_PMIX
#include <pmix.h>
#endif

#ifndef VERBS_LIBDIR
#define VERBS_LIBDIR ""
#endif
#ifndef RDMACM_LIBDIR
#define RDMACM_LIBDIR ""
#endif
#ifndef HWLOC_LIBDIR
#define HWLOC_LIBDIR ""
#endif
#ifndef PMIX_LIBDIR
#define PMIX_LIBDIR ""
#endif

/* the ABI rcoll is built against: the soname, and the directory
 * configure found it in (--with-X=DIR) as the last resort. hwloc and PMIx
 * load their own plugins, which need their symbols global. */
static const struct {
    const char *soname, *dir;
    int global;
} spec[RCOLL_DL_NLIBS] = {
    [RCOLL_DL_VERBS] = {"libibverbs.so.1", VERBS_LIBDIR, 0},
    [RCOLL_DL_RDMACM] = {"librdmacm.so.1", RDMACM_LIBDIR, 0},
    [RCOLL_DL_HWLOC] = {"libhwloc.so.15", HWLOC_LIBDIR, 1},
    [RCOLL_DL_PMIX] = {"libpmix.so.2", PMIX_LIBDIR, 1},
};

static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;
static void *dl_handle[RCOLL_DL_NLIBS];
static int dl_state[RCOLL_DL_NLIBS]; /* 0 not tried, 1 loaded, -1 failed */
static char dl_why[RCOLL_DL_NLIBS][320];
static char dl_path[RCOLL_DL_NLIBS][256];

static void dl_load(rcoll_dl_lib_t lib)
{
    int flags = RTLD_NOW | (spec[lib].global ? RTLD_GLOBAL : RTLD_LOCAL);
    const char *err = "not found";
    /* the copy the process already has (an MPI's libpmix), then the search
     * path, then configure's directory: never a second copy */
    snprintf(dl_path[lib], sizeof(dl_path[lib]), "%s", spec[lib].soname);
    dl_handle[lib] = dlopen(dl_path[lib], flags | RTLD_NOLOAD);
    if (!dl_handle[lib] && !(dl_handle[lib] = dlopen(dl_path[lib], flags)))
        err = dlerror();
    if (!dl_handle[lib] && spec[lib].dir[0]) {
        snprintf(dl_path[lib], sizeof(dl_path[lib]), "%s/%s", spec[lib].dir,
                 spec[lib].soname);
        if (!(dl_handle[lib] = dlopen(dl_path[lib], flags)))
            err = dlerror();
    }
    dl_state[lib] = dl_handle[lib] ? 1 : -1;
    if (!dl_handle[lib])
        snprintf(dl_why[lib], sizeof(dl_why[lib]), "%s could not be loaded "
                 "(%s)", spec[lib].soname, err ? err : "dlopen failed");
}

int rcoll_dl_open(rcoll_dl_lib_t lib, char *why, size_t len)
{
    pthread_mutex_lock(&dl_lock);
    if (!dl_state[lib])
        dl_load(lib);
    int ok = dl_state[lib] == 1;
    if (!ok && why && len)
        snprintf(why, len, "%s", dl_why[lib]);
    pthread_mutex_unlock(&dl_lock);
    return ok ? 0 : -1;
}

const char *rcoll_dl_file(rcoll_dl_lib_t lib)
{
    return dl_path[lib][0] ? dl_path[lib] : spec[lib].soname;
}

/* The library's symbol `name`, saved in *slot; NULL when the library or
 * the symbol is missing (a library older than the headers). */
__attribute__((unused)) static void *dl_bind(rcoll_dl_lib_t lib,
                                             const char *name, void **slot)
{
    if (rcoll_dl_open(lib, NULL, 0) != 0)
        return NULL;
    void *f = dlsym(dl_handle[lib], name);
    if (f)
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    return f;
}

/* ret name params { forward args }; `fail` is returned when unloadable */
#define DL_FN(lib, ret, name, params, args, fail)                            \
    ret(name) params                                                         \
    {                                                                        \
        static void *dl_slot_;                                               \
        void *dl_f_ = __atomic_load_n(&dl_slot_, __ATOMIC_ACQUIRE);          \
        if (!dl_f_ && !(dl_f_ = dl_bind(lib, #name, &dl_slot_))) {           \
            errno = ENOSYS;                                                  \
            return fail;                                                     \
        }                                                                    \
        return ((ret(*) params)dl_f_) args;                                  \
    }
#define DL_VFN(lib, name, params, args)                                      \
    void(name) params                                                        \
    {                                                                        \
        static void *dl_slot_;                                               \
        void *dl_f_ = __atomic_load_n(&dl_slot_, __ATOMIC_ACQUIRE);          \
        if (dl_f_ || (dl_f_ = dl_bind(lib, #name, &dl_slot_)))               \
            ((void(*) params)dl_f_) args;                                    \
    }

#if HAVE_VERBS && HAVE_RDMACM
#define V RCOLL_DL_VERBS
DL_FN(V, struct ibv_device **, ibv_get_device_list, (int *n), (n), NULL)
DL_VFN(V, ibv_free_device_list, (struct ibv_device **l), (l))
DL_FN(V, const char *, ibv_get_device_name, (struct ibv_device *d), (d), NULL)
DL_FN(V, struct ibv_context *, ibv_open_device, (struct ibv_device *d), (d),
      NULL)
DL_FN(V, int, ibv_close_device, (struct ibv_context *c), (c), -1)
DL_FN(V, int, ibv_query_device,
      (struct ibv_context *c, struct ibv_device_attr *a), (c, a), -1)
DL_FN(V, int, ibv_query_port,
      (struct ibv_context *c, uint8_t p, struct _compat_ibv_port_attr *a),
      (c, p, a), -1)
DL_FN(V, int, ibv_query_gid,
      (struct ibv_context *c, uint8_t p, int i, union ibv_gid *g),
      (c, p, i, g), -1)
DL_FN(V, int, _ibv_query_gid_ex,
      (struct ibv_context *c, uint32_t p, uint32_t i, struct ibv_gid_entry *e,
       uint32_t fl, size_t sz), (c, p, i, e, fl, sz), -1)
DL_FN(V, int, ibv_get_async_event,
      (struct ibv_context *c, struct ibv_async_event *e), (c, e), -1)
DL_VFN(V, ibv_ack_async_event, (struct ibv_async_event *e), (e))
DL_FN(V, struct ibv_pd *, ibv_alloc_pd, (struct ibv_context *c), (c), NULL)
DL_FN(V, int, ibv_dealloc_pd, (struct ibv_pd *pd), (pd), -1)
DL_FN(V, struct ibv_mr *, ibv_reg_mr,
      (struct ibv_pd *pd, void *a, size_t n, int acc), (pd, a, n, acc), NULL)
/* what verbs.h's ibv_reg_mr inline calls when it cannot prove the access
 * flags constant (clang at -O1 does not) */
DL_FN(V, struct ibv_mr *, ibv_reg_mr_iova2,
      (struct ibv_pd *pd, void *a, size_t n, uint64_t iova, unsigned int acc),
      (pd, a, n, iova, acc), NULL)
DL_FN(V, int, ibv_dereg_mr, (struct ibv_mr *mr), (mr), -1)
DL_FN(V, struct ibv_comp_channel *, ibv_create_comp_channel,
      (struct ibv_context *c), (c), NULL)
DL_FN(V, int, ibv_destroy_comp_channel, (struct ibv_comp_channel *ch), (ch),
      -1)
DL_FN(V, struct ibv_cq *, ibv_create_cq,
      (struct ibv_context *c, int cqe, void *ctx, struct ibv_comp_channel *ch,
       int vec), (c, cqe, ctx, ch, vec), NULL)
DL_FN(V, int, ibv_destroy_cq, (struct ibv_cq *cq), (cq), -1)
DL_FN(V, int, ibv_get_cq_event,
      (struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx),
      (ch, cq, ctx), -1)
DL_VFN(V, ibv_ack_cq_events, (struct ibv_cq *cq, unsigned int n), (cq, n))
DL_FN(V, struct ibv_qp *, ibv_create_qp,
      (struct ibv_pd *pd, struct ibv_qp_init_attr *a), (pd, a), NULL)
DL_FN(V, int, ibv_modify_qp, (struct ibv_qp *qp, struct ibv_qp_attr *a, int m),
      (qp, a, m), -1)
DL_FN(V, int, ibv_destroy_qp, (struct ibv_qp *qp), (qp), -1)
DL_FN(V, const char *, ibv_wc_status_str, (enum ibv_wc_status s), (s),
      "(libibverbs not loaded)")
DL_FN(V, const char *, ibv_event_type_str, (enum ibv_event_type e), (e),
      "(libibverbs not loaded)")
DL_FN(V, const char *, ibv_port_state_str, (enum ibv_port_state s), (s),
      "(libibverbs not loaded)")
#undef V

#define R RCOLL_DL_RDMACM
DL_FN(R, struct rdma_event_channel *, rdma_create_event_channel, (void), (),
      NULL)
DL_VFN(R, rdma_destroy_event_channel, (struct rdma_event_channel *ch), (ch))
DL_FN(R, int, rdma_create_id,
      (struct rdma_event_channel *ch, struct rdma_cm_id **id, void *ctx,
       enum rdma_port_space ps), (ch, id, ctx, ps), -1)
DL_FN(R, int, rdma_destroy_id, (struct rdma_cm_id *id), (id), -1)
DL_FN(R, int, rdma_bind_addr, (struct rdma_cm_id *id, struct sockaddr *a),
      (id, a), -1)
DL_FN(R, int, rdma_resolve_addr,
      (struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
       int ms), (id, src, dst, ms), -1)
DL_FN(R, int, rdma_resolve_route, (struct rdma_cm_id *id, int ms), (id, ms), -1)
DL_FN(R, int, rdma_create_qp,
      (struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a),
      (id, pd, a), -1)
DL_VFN(R, rdma_destroy_qp, (struct rdma_cm_id *id), (id))
DL_FN(R, int, rdma_connect, (struct rdma_cm_id *id, struct rdma_conn_param *p),
      (id, p), -1)
DL_FN(R, int, rdma_listen, (struct rdma_cm_id *id, int backlog), (id, backlog),
      -1)
DL_FN(R, int, rdma_accept, (struct rdma_cm_id *id, struct rdma_conn_param *p),
      (id, p), -1)
DL_FN(R, int, rdma_reject,
      (struct rdma_cm_id *id, const void *d, uint8_t n), (id, d, n), -1)
DL_FN(R, int, rdma_disconnect, (struct rdma_cm_id *id), (id), -1)
DL_FN(R, int, rdma_get_cm_event,
      (struct rdma_event_channel *ch, struct rdma_cm_event **e), (ch, e), -1)
DL_FN(R, int, rdma_ack_cm_event, (struct rdma_cm_event *e), (e), -1)
DL_FN(R, const char *, rdma_event_str, (enum rdma_cm_event_type e), (e),
      "(librdmacm not loaded)")
DL_FN(R, __be16, rdma_get_src_port, (struct rdma_cm_id *id), (id), 0)
#undef R
#endif

#ifdef HAVE_HWLOC
#define H RCOLL_DL_HWLOC
DL_FN(H, int, hwloc_topology_init, (hwloc_topology_t *t), (t), -1)
DL_FN(H, int, hwloc_topology_load, (hwloc_topology_t t), (t), -1)
DL_VFN(H, hwloc_topology_destroy, (hwloc_topology_t t), (t))
DL_FN(H, int, hwloc_topology_set_io_types_filter,
      (hwloc_topology_t t, enum hwloc_type_filter_e f), (t, f), -1)
DL_FN(H, int, hwloc_topology_export_xmlbuffer,
      (hwloc_topology_t t, char **b, int *n, unsigned long fl), (t, b, n, fl),
      -1)
DL_VFN(H, hwloc_free_xmlbuffer, (hwloc_topology_t t, char *b), (t, b))
#undef H
#endif

#ifdef HAVE_PMIX
#define P RCOLL_DL_PMIX
#define PF PMIX_ERR_NOT_SUPPORTED
DL_FN(P, pmix_status_t, PMIx_Init,
      (pmix_proc_t *p, pmix_info_t info[], size_t n), (p, info, n), PF)
DL_FN(P, pmix_status_t, PMIx_Finalize, (const pmix_info_t info[], size_t n),
      (info, n), PF)
DL_FN(P, pmix_status_t, PMIx_Get,
      (const pmix_proc_t *p, const char key[], const pmix_info_t info[],
       size_t n, pmix_value_t **v), (p, key, info, n, v), PF)
DL_FN(P, pmix_status_t, PMIx_Put,
      (pmix_scope_t s, const char key[], pmix_value_t *v), (s, key, v), PF)
DL_FN(P, pmix_status_t, PMIx_Commit, (void), (), PF)
DL_FN(P, pmix_status_t, PMIx_Fence,
      (const pmix_proc_t procs[], size_t np, const pmix_info_t info[],
       size_t n), (procs, np, info, n), PF)
DL_FN(P, pmix_status_t, PMIx_Info_load,
      (pmix_info_t *i, const char *key, const void *d, pmix_data_type_t t),
      (i, key, d, t), PF)
DL_VFN(P, PMIx_Value_destruct, (pmix_value_t *v), (v))
DL_FN(P, const char *, PMIx_Error_string, (pmix_status_t s), (s),
      "(libpmix not loaded)")
#undef PF
#undef P
#endif
