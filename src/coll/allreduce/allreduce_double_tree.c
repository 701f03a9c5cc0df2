/* Double binary tree all-reduce (NCCL's "tree" for latency-bound sizes on
 * many ranks): two binary trees over the ring order, each reducing half of
 * the buffer up to its root and broadcasting it back down, chunk-pipelined.
 * Tree 0 numbers position p as node p + 1 of an in-order binary tree; tree
 * 1 mirrors the positions (node n - p) when n is even and shifts them by
 * one (node (p + 1) mod n + 1) when n is odd, so a position that is a leaf
 * of one tree is (nearly always) inside the other: every rank forwards
 * about one half, and each tree is ceil(log2 n) + 1 levels deep at most.
 *
 * In-order tree of nodes 1..n: node i with lowest set bit l has children
 * i - l/2 and i + l/2 (l > 1) and parent i - l or i + l, whichever is an
 * odd multiple of 2l; the root is the largest power of two <= n. Nodes
 * past n are absent: a node's parent beyond n is replaced by that
 * parent's nearest ancestor <= n, and a child beyond n by the first node
 * <= n down its left spine (the same edges seen from both ends).
 *
 * Per half: receive and reduce each child's data into recvbuf (the first
 * with sendbuf as the local operand: in place is safe), send the sum to
 * the parent chunk by chunk as the last child's chunk is reduced; the root
 * then holds the result (AVG divides at its last child) and sends it to
 * its children, every other rank receives it from its parent into recvbuf
 * and forwards it. A rank overwrites the half it sent up only with the
 * result its parent made from it, so no send's buffer is written before
 * it has been read. The steps of the two trees are interleaved by phase
 * (up receives, up sends, down receives, down sends); every send is
 * send_free (it depends on its send_dep alone), so one tree's send that
 * waits for its children does not hold the other tree's. */
#include "coll/tune.h"
#include <string.h>

static int dbt_up(int i) /* the parent of node i in the infinite tree */
{
    int l = i & -i;
    return ((i / (2 * l)) & 1) ? i - l : i + l;
}

/* Node i's parent (0: the root) and children (0: none) in the tree of
 * nodes 1..n. */
static void dbt_node(int i, int n, int *parent, int kid[2])
{
    int top = 1;
    while (top * 2 <= n)
        top *= 2;
    *parent = 0;
    if (i != top) {
        int p = dbt_up(i);
        while (p > n)
            p = dbt_up(p);
        *parent = p;
    }
    int l = i & -i;
    kid[0] = kid[1] = 0;
    if (l > 1) {
        kid[0] = i - l / 2;
        int c = i + l / 2;
        while (c > n && (c & -c) > 1)
            c -= (c & -c) / 2;
        kid[1] = c <= n ? c : 0;
    }
}

/* Tree t's node of position p, and back. */
static int dbt_id(int t, int p, int n)
{
    if (t == 0)
        return p + 1;
    return n % 2 == 0 ? n - p : (p + 1) % n + 1;
}

static int dbt_pos(int t, int id, int n)
{
    if (t == 0)
        return id - 1;
    return n % 2 == 0 ? n - id : (id - 2 + n) % n;
}

typedef struct {
    int parent;          /* rank, -1: the root */
    int kid[2], nkid;    /* ranks */
    char *acc;           /* recvbuf's half */
    const char *in;      /* sendbuf's half */
    size_t bytes;
    int last_up;         /* the last up receive's step, -1 none */
    int down;            /* the down receive's step, -1 (root) */
} dbt_half_t;

static void dbt_half(const coll_sched_t *s, const coll_env_t *e, int t,
                     dbt_half_t *h)
{
    int n = e->nranks, p = coll_ring_pos(e, e->rank), par, kid[2];
    dbt_node(dbt_id(t, p, n), n, &par, kid);
    h->parent = par ? coll_ring_rank(e, dbt_pos(t, par, n)) : -1;
    h->nkid = 0;
    for (int k = 0; k < 2; k++)
        if (kid[k])
            h->kid[h->nkid++] = coll_ring_rank(e, dbt_pos(t, kid[k], n));
    size_t dts = rcoll_datatype_size(s->dt), h0 = (s->count + 1) / 2;
    size_t off = t ? h0 * dts : 0;
    h->bytes = (t ? s->count - h0 : h0) * dts;
    h->acc = (char *)s->recvbuf + off;
    h->in = (const char *)s->sendbuf + off;
    h->last_up = h->down = -1;
}

rcoll_status_t coll_allreduce_dbtree(coll_sched_t *s, const coll_env_t *e)
{
    dbt_half_t h[2];
    coll_step_t st;
    rcoll_status_t rc;

    if (e->nranks == 1) {
        coll_copy_in(s);
        return RCOLL_OK;
    }
    for (int t = 0; t < 2; t++)
        dbt_half(s, e, t, &h[t]);
    for (int t = 0; t < 2; t++) /* up: the children's sums, reduced */
        for (int k = 0; k < h[t].nkid; k++) {
            coll_sched_step_init(&st);
            st.recv_peer = h[t].kid[k];
            st.recv_dst = h[t].acc;
            st.recv_local = k ? h[t].acc : h[t].in;
            st.recv_bytes = h[t].bytes;
            st.recv_mode = h[t].parent < 0 && k == h[t].nkid - 1 &&
                                   s->op == RCOLL_AVG
                               ? RECV_REDUCE_AVG
                               : RECV_REDUCE;
            if ((rc = coll_sched_add(s, &st)) != RCOLL_OK)
                return rc;
            h[t].last_up = s->nsteps - 1;
        }
    for (int t = 0; t < 2; t++) { /* up: our sum to the parent */
        if (h[t].parent < 0)
            continue;
        coll_sched_step_init(&st);
        st.send_peer = h[t].parent;
        st.send_buf = h[t].nkid ? h[t].acc : h[t].in;
        st.send_bytes = h[t].bytes;
        st.send_dep = h[t].last_up;
        st.send_free = 1;
        if ((rc = coll_sched_add(s, &st)) != RCOLL_OK)
            return rc;
    }
    for (int t = 0; t < 2; t++) { /* down: the result from the parent */
        if (h[t].parent < 0)
            continue;
        coll_sched_step_init(&st);
        st.recv_peer = h[t].parent;
        st.recv_dst = h[t].acc;
        st.recv_bytes = h[t].bytes;
        st.recv_mode = RECV_COPY;
        if ((rc = coll_sched_add(s, &st)) != RCOLL_OK)
            return rc;
        h[t].down = s->nsteps - 1;
    }
    for (int t = 0; t < 2; t++) /* down: the result to the children */
        for (int k = 0; k < h[t].nkid; k++) {
            coll_sched_step_init(&st);
            st.send_peer = h[t].kid[k];
            st.send_buf = h[t].acc;
            st.send_bytes = h[t].bytes;
            st.send_dep = h[t].parent < 0 ? h[t].last_up : h[t].down;
            st.send_copy = 1;
            st.send_free = 1;
            if ((rc = coll_sched_add(s, &st)) != RCOLL_OK)
                return rc;
        }
    return RCOLL_OK;
}

/* Each half goes up and down a pipeline of depth ceil(log2 n) + 1 in
 * chunks of c; a rank inside a tree takes two children's chunks per
 * stage (received and reduced going up, sent going down). The halves'
 * sends overlap (send_free), but a rank takes its receives in step order,
 * so going up the two halves' chunks pass one after the other. Across
 * hosts a host's NICs carry about two tree edges each way at once (one
 * of each tree: the ring order keeps the lower levels inside a host), so
 * a stage gets half the host's network. Against rcoll-sim (docs/sim.md)
 * it is 1.1-1.2x pessimistic at 16 MiB, so the tuner takes it only where
 * it wins clearly. */
double coll_allreduce_dbtree_cost(const coll_tune_model_t *m,
                                  const coll_env_t *e, double *c)
{
    int d = m->L + 1;
    coll_tune_model_t x = e->nhosts > 1 ? coll_tune_at(m, 2) : *m;
    *c = coll_tune_best_chunk(&x, m->S / 2, d);
    double k = coll_tune_nch(&x, m->S / 2, *c);
    if (k < 1)
        k = 1;
    double cc = m->S / 2 < *c ? m->S / 2 : *c;
    double up = 2 * (x.a + cc / x.b + cc / x.g);
    double down = 2 * (x.a + cc / x.b);
    return (d + 2 * k - 1) * up + (d + k - 1) * down;
}
