/* The schedule executor: streams chunks through the transport. */
#include "sched.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void coll_sched_step_init(coll_step_t *st)
{
    memset(st, 0, sizeof(*st));
    st->send_peer = st->recv_peer = st->send_dep = -1;
}

rcoll_status_t coll_sched_add(coll_sched_t *s, const coll_step_t *step)
{
    if (!s->cap) { /* the first steps live inside the schedule */
        s->steps = s->steps_small;
        s->cap = COLL_SCHED_SMALL_STEPS;
    }
    if (s->nsteps == s->cap) {
        int cap = s->cap * 2;
        int inl = s->steps == s->steps_small;
        coll_step_t *n = realloc(inl ? NULL : s->steps,
                                 (size_t)cap * sizeof(*n));
        if (!n)
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                    "%s: no memory for the schedule",
                                    coll_kind_name(s->kind));
        if (inl)
            memcpy(n, s->steps_small, sizeof(s->steps_small));
        s->steps = n;
        s->cap = cap;
    }
    s->steps[s->nsteps++] = *step;
    return RCOLL_OK;
}

void coll_sched_free(coll_sched_t *s)
{
    for (int c = 0; c < s->nchan; c++)
        coll_sched_free(&s->chan[c]);
    free(s->chan);
    s->chan = NULL;
    s->nchan = 0;
    coll_p2p_recv_unregister(s);
    if (s->steps != s->steps_small)
        free(s->steps);
    if (s->recv_done != s->state_small)
        free(s->recv_done); /* ord .. pmark: in the same block */
    free(s->v);
    free(s->scratch);
    free(s->bounce);
    s->bounce = NULL;
    s->bounce_len = 0;
    s->steps = NULL;
    s->recv_done = NULL;
    s->ord = NULL;
    s->sent = NULL;
    s->spx = s->rpx = NULL;
    s->pmark = NULL;
    s->v = NULL;
    s->scratch = NULL;
}

void coll_sched_send_done(coll_sched_t *s)
{
    s->sends_inflight--;
}

/* Chunks of a transfer of `bytes`; a step that moves nothing still sends
 * one empty message when it must be seen (barrier, control messages). */
static int nchunks(const coll_sched_t *s, size_t bytes, int always)
{
    if (bytes == 0)
        return s->kind == COLL_BARRIER || always ? 1 : 0;
    return (int)((bytes + s->chunk - 1) / s->chunk);
}

static int send_nch(const coll_sched_t *s, const coll_step_t *t)
{
    return t->send_peer >= 0 ? nchunks(s, t->send_bytes, t->send_always) : 0;
}

static int recv_nch(const coll_sched_t *s, const coll_step_t *t)
{
    return t->recv_peer >= 0 ? nchunks(s, t->recv_bytes, t->recv_always) : 0;
}

static int is_p2p(const coll_sched_t *s)
{
    return s->kind == COLL_SEND || s->kind == COLL_RECV;
}

/* Operations whose transfers nothing pipelines downstream: a transport
 * may move each as one message (RCOLL_TL_WHOLE). */
static int whole_kind(coll_kind_t k)
{
    return k == COLL_SEND || k == COLL_ALLTOALL || k == COLL_ALLTOALLV ||
           k == COLL_GATHER || k == COLL_SCATTER;
}

static uint32_t sched_kind_word(const coll_sched_t *s)
{
    coll_kind_t k = s->kind == COLL_RECV ? COLL_SEND : s->kind;
    return (uint32_t)k | (uint32_t)s->dt << 8 | (uint32_t)s->op << 16;
}

/* Dense indices of the peers a schedule talks to (send or receive): an
 * open-addressing table of (peer + 1, index) pairs, kept at most half
 * full and doubled as peers come, so the state is O(steps + peers), never
 * O(ranks) (a tree's 8-byte all-reduce at 16k ranks touches ~14 peers, a
 * ring's 32k steps 2). The hash takes the product's high bits: peers that
 * differ only in high bits (r ^ 2^k) spread too. */
typedef struct {
    int *tab;         /* 2 ints a slot */
    unsigned bits;    /* 2^bits slots */
    int np;           /* peers in it */
    int small[2 * 64];
} peer_tab_t;

static size_t peer_slot(const peer_tab_t *pt, int q)
{
    size_t mask = ((size_t)1 << pt->bits) - 1;
    size_t h = (size_t)(((uint32_t)q * 2654435761u) >> (32 - pt->bits));
    while (pt->tab[2 * h] && pt->tab[2 * h] != q + 1)
        h = (h + 1) & mask;
    return h;
}

/* q's index, added if new; -1 out of memory */
static int peer_add(peer_tab_t *pt, int q)
{
    size_t h = peer_slot(pt, q);
    if (pt->tab[2 * h])
        return pt->tab[2 * h + 1];
    if (2 * (size_t)(pt->np + 1) > ((size_t)1 << pt->bits)) {
        peer_tab_t g = *pt;
        g.bits = pt->bits + 1;
        g.tab = calloc((size_t)2 << g.bits, sizeof(int));
        if (!g.tab)
            return -1;
        for (size_t i = 0; i < ((size_t)1 << pt->bits); i++)
            if (pt->tab[2 * i]) {
                size_t k = peer_slot(&g, pt->tab[2 * i] - 1);
                g.tab[2 * k] = pt->tab[2 * i];
                g.tab[2 * k + 1] = pt->tab[2 * i + 1];
            }
        if (pt->tab != pt->small)
            free(pt->tab);
        pt->tab = g.tab;
        pt->bits = g.bits;
        h = peer_slot(pt, q);
    }
    pt->tab[2 * h] = q + 1;
    pt->tab[2 * h + 1] = pt->np;
    return pt->np++;
}

static int peer_find(const peer_tab_t *pt, int q)
{
    return q < 0 ? -1 : pt->tab[2 * peer_slot(pt, q) + 1];
}

/* The execution state: chunks received per step, and each step's
 * transfer ordinals per peer (what the headers carry and are checked
 * against: the n-th transfer of an operation from A to B is the n-th that
 * B receives from A). */
static rcoll_status_t sched_state_init(coll_sched_t *s, const coll_env_t *e)
{
    int n = s->nsteps ? s->nsteps : 1, ok = 1, *cnt;
    peer_tab_t pt;
    pt.tab = pt.small;
    pt.bits = 6;
    pt.np = 0;
    memset(pt.small, 0, sizeof(pt.small));
    for (int i = 0; i < s->nsteps && ok; i++) {
        const coll_step_t *t = &s->steps[i];
        ok = (t->send_peer < 0 || peer_add(&pt, t->send_peer) >= 0) &&
             (t->recv_peer < 0 || peer_add(&pt, t->recv_peer) >= 0);
    }
    /* one block: recv_done (n), ord (2 n), sent (n), spx (n), rpx (n),
     * then per peer pmark and the send and receive counts */
    size_t len = 6 * (size_t)n + 3 * (size_t)pt.np;
    if (!ok) {
        s->recv_done = NULL;
    } else if (len <= sizeof(s->state_small) / sizeof(int)) {
        s->recv_done = s->state_small;
        memset(s->state_small, 0, sizeof(int) * len);
    } else {
        s->recv_done = calloc(len, sizeof(int));
    }
    if (!s->recv_done) {
        if (pt.tab != pt.small)
            free(pt.tab);
        s->ord = s->sent = s->spx = s->rpx = s->pmark = NULL;
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d in %s: no "
                                "memory for the schedule's state",
                                e->rank, coll_kind_name(s->kind));
    }
    s->ord = s->recv_done + n;
    s->sent = s->ord + 2 * n;
    s->spx = s->sent + n;
    s->rpx = s->spx + n;
    s->pmark = s->rpx + n;
    cnt = s->pmark + pt.np; /* per peer: sends, receives (zeroed above) */
    s->pass = 0;
    s->in_order = 0;
    s->nspeers = s->nrpeers = 0;
    for (int i = 0; i < s->nsteps; i++) {
        const coll_step_t *t = &s->steps[i];
        s->spx[i] = peer_find(&pt, t->send_peer);
        s->rpx[i] = peer_find(&pt, t->recv_peer);
        s->in_order |= t->pre_send != NULL;
        if (send_nch(s, t) > 0) {
            s->nspeers += !cnt[2 * s->spx[i]];
            s->ord[2 * i] = cnt[2 * s->spx[i]]++;
        }
        if (recv_nch(s, t) > 0) {
            s->nrpeers += !cnt[2 * s->rpx[i] + 1];
            s->ord[2 * i + 1] = cnt[2 * s->rpx[i] + 1]++;
        }
    }
    if (pt.tab != pt.small)
        free(pt.tab);
    return RCOLL_OK;
}

int coll_sched_busy(const coll_sched_t *s)
{
    int n = s->nplaced + s->sends_inflight + s->md_npending;
    for (int c = 0; c < s->nchan; c++)
        n += coll_sched_busy(&s->chan[c]);
    return n;
}

static uint32_t msg_csum(const rcoll_msg_hdr_t *h, const void *payload)
{
    rcoll_msg_hdr_t c = *h;
    c.csum = 0;
    uint32_t v = rcoll_crc32c(0, &c, sizeof(c));
    return h->len ? rcoll_crc32c(v, payload, h->len) : v;
}

/* The chunks a message of `got` bytes covers when receive step t expects
 * its chunk r_chunk (`len` bytes): 1 for a chunk, more for a single-copy
 * message that carries several (transport max_msg: it must end on a chunk
 * boundary or at the transfer's end), 0 for any other length. */
static int msg_chunks(const coll_sched_t *s, const coll_step_t *t,
                      int chunk, size_t got, size_t len)
{
    if (got == len)
        return 1;
    size_t off = (size_t)chunk * s->chunk;
    if (got < len || got > t->recv_bytes - off ||
        (got % s->chunk && off + got != t->recv_bytes))
        return 0;
    return (int)((got + s->chunk - 1) / s->chunk);
}

/* 1 if h is what receive step i of s expects as its chunk `chunk`. */
static int hdr_ok(const coll_sched_t *s, int i, int chunk,
                  const rcoll_msg_hdr_t *h, int nch)
{
    const coll_step_t *t = &s->steps[i];
    if ((h->kind & 0x00ffffffu) != sched_kind_word(s) ||
        COLL_MSG_CLASS(h->kind) != t->recv_class || h->total != s->count ||
        !nch || h->chunk != (uint32_t)chunk ||
        h->step != (uint32_t)s->ord[2 * i + 1])
        return 0;
    if (!is_p2p(s))
        return h->seq == s->seq && h->tag == (uint32_t)s->root;
    return h->tag == (uint32_t)s->tag;
}

/* Starts the execution state over after the steps were rebuilt (a
 * receive, once matched: coll_sched_t.matched). */
rcoll_status_t coll_sched_restart(coll_sched_t *s, const coll_env_t *e)
{
    if (s->recv_done != s->state_small)
        free(s->recv_done);
    s->recv_done = NULL;
    return sched_state_init(s, e);
}

/* ---- receives in place ---- */

static void place_key(const coll_sched_t *s, int i, rcoll_tl_place_t *pl)
{
    const coll_step_t *t = &s->steps[i];
    pl->seq = s->seq;
    pl->kind = sched_kind_word(s) | (uint32_t)t->recv_class << 24;
    pl->step = (uint32_t)s->ord[2 * i + 1];
    pl->tag = (uint32_t)(is_p2p(s) ? s->tag : s->root);
    pl->total = s->count;
    pl->chunk = s->chunk;
    pl->dst = t->recv_dst;
    pl->bytes = t->recv_bytes;
}

/* Posts the steps still to come that may receive in place (once the
 * messages' seq is known: a receive's, when it has matched). */
static void sched_place(coll_sched_t *s, const coll_env_t *e)
{
    for (int i = s->r_step; i < s->nsteps; i++) {
        coll_step_t *t = &s->steps[i];
        if (!t->recv_place || t->placed || t->recv_mode != RECV_COPY ||
            t->recv_peer < 0 || t->recv_bytes < COLL_PLACE_MIN ||
            !e->tls[t->recv_peer]->recv_place)
            continue;
        rcoll_tl_place_t pl;
        place_key(s, i, &pl);
        if (e->tls[t->recv_peer]->recv_place(e->eps[t->recv_peer], &pl)) {
            t->placed = 1;
            s->nplaced++;
        }
    }
}

static void step_unplace(coll_sched_t *s, const coll_env_t *e, int i)
{
    coll_step_t *t = &s->steps[i];
    if (!t->placed)
        return;
    rcoll_tl_place_t pl;
    place_key(s, i, &pl);
    e->tls[t->recv_peer]->recv_unplace(e->eps[t->recv_peer], &pl);
    t->placed = 0;
    s->nplaced--;
}

void coll_sched_unplace(coll_sched_t *s, const coll_env_t *e)
{
    for (int c = 0; c < s->nchan; c++) {
        coll_env_t ec;
        coll_chan_env(e, c, &ec);
        coll_sched_unplace(&s->chan[c], &ec);
    }
    for (int i = 0; s->nplaced > 0 && i < s->nsteps; i++)
        step_unplace(s, e, i);
}

/* ---- the memory domain's asynchronous operations (md->post) ---- */

/* A received message's copy or reduction is done: its slot (or set-aside
 * copy) goes back and its chunks count as received. */
static void md_retire(coll_sched_t *s, const coll_env_t *e, int k, int count)
{
    int peer = s->md_pend[k].peer;
    if (!s->md_pend[k].u)
        coll_rx_hold(e, peer, 0);
    coll_rx_release(e, peer, s->md_pend[k].u);
    if (count)
        s->recv_done[s->md_pend[k].step] += s->md_pend[k].nch;
    s->md_npending--;
    memmove(&s->md_pend[k], &s->md_pend[k + 1],
            (size_t)(s->md_npending - k) * sizeof(s->md_pend[0]));
}

/* Retires what has completed, in posting order. */
static void md_reap(coll_sched_t *s, const coll_env_t *e, int *moved)
{
    while (s->md_npending > 0 &&
           s->md->test(e->md_ctx, s->md_pend[0].ticket)) {
        md_retire(s, e, 0, 1);
        *moved = 1;
    }
}

/* 1 if a message of `peer` still waits for the memory domain: the next
 * one from that peer is not taken before (its chunk number would be
 * ahead of recv_done, and the transport's head slot is the held one). */
static int md_peer_busy(const coll_sched_t *s, int peer)
{
    for (int k = 0; k < s->md_npending; k++)
        if (s->md_pend[k].peer == peer)
            return 1;
    return s->md_npending == COLL_MD_PEND;
}

void coll_sched_md_drain(coll_sched_t *s, const coll_env_t *e)
{
    if (s->nchan) {
        for (int c = 0; c < s->nchan; c++)
            coll_sched_md_drain(&s->chan[c], e);
        s->md_npending = 0;
        return;
    }
    if (!s->md_npending)
        return;
    s->md->quiesce(e->md_ctx);
    while (s->md_npending > 0)
        md_retire(s, e, 0, 0);
}

/* The copy or reduction of a received message: posted to an asynchronous
 * memory domain (1: then held until it completes), else done now (0). A
 * payload in the bounce buffer, which the next message reuses, is done
 * now, after everything posted before it. */
static int recv_apply(coll_sched_t *s, const coll_env_t *e,
                      const coll_step_t *t, size_t off, const void *payload,
                      size_t len, int i, int nch, int peer, coll_umsg_t *u)
{
    size_t dts = rcoll_datatype_size(s->dt);
    coll_md_op_t op = {.dst = t->recv_dst + off, .src = payload,
                       .bytes = len, .dt = s->dt, .fn = s->reduce,
                       .nranks = e->nranks};
    if (t->recv_mode == RECV_DISCARD ||
        (t->recv_mode == RECV_COPY && (!len || payload == op.dst)))
        return 0; /* (a receive in place has it there already) */
    op.kind = t->recv_mode == RECV_COPY     ? COLL_MD_COPY
              : t->recv_mode == RECV_REDUCE ? COLL_MD_REDUCE
                                            : COLL_MD_AVG;
    if (op.kind != COLL_MD_COPY)
        op.local = t->recv_local + off;
    if (s->md->post && payload != s->bounce) {
        uint64_t tk = s->md->post(e->md_ctx, &op);
        if (tk) {
            if (!u)
                coll_rx_hold(e, peer, 1);
            s->md_pend[s->md_npending].step = i;
            s->md_pend[s->md_npending].nch = nch;
            s->md_pend[s->md_npending].peer = peer;
            s->md_pend[s->md_npending].u = u;
            s->md_pend[s->md_npending++].ticket = tk;
            return 1;
        }
    } else if (s->md->post && s->md_npending) {
        s->md->quiesce(e->md_ctx);
    }
    if (op.kind == COLL_MD_COPY)
        s->md->copy(op.dst, payload, len);
    else if (op.kind == COLL_MD_REDUCE)
        s->reduce(op.dst, op.local, payload, len / dts);
    else
        s->md->reduce_avg_final(s->dt, op.dst, op.local, payload, len / dts,
                                e->nranks);
    return 0;
}

/* Takes the next message of receive step i (its chunk recv_done[i]) if it
 * has arrived, and copies or reduces it where the step says. RCOLL_OK:
 * taken (*moved set); RCOLL_INPROGRESS: not here yet; else an error. */
static rcoll_status_t recv_chunk(coll_sched_t *s, const coll_env_t *e,
                                 int i, int *moved)
{
    rcoll_status_t st;
    coll_step_t *t = &s->steps[i];
    int peer = t->recv_peer;
    const rcoll_msg_hdr_t *h;
    const void *payload;
    coll_umsg_t *u;
    if (s->md_npending) {
        md_reap(s, e, moved);
        if (s->recv_done[i] >= recv_nch(s, t))
            return RCOLL_OK; /* its last chunk just retired */
        if (md_peer_busy(s, peer))
            return RCOLL_INPROGRESS;
    }
    st = coll_rx_get(s, t, e, peer, &h, &payload, &u);
    if (st != RCOLL_OK)
        return st == RCOLL_INPROGRESS
                   ? st
                   : coll_sched_peer_error(s, e, st, peer, "receiving from");
    if (s->matched && !s->p2p_matched) {
        if ((st = s->matched(s, e, h)) != RCOLL_OK)
            return st;
        t = &s->steps[i];
    }
    int chunk = s->recv_done[i];
    size_t off = (size_t)chunk * s->chunk;
    size_t len = t->recv_bytes ? RCOLL_MIN(s->chunk, t->recv_bytes - off)
                               : 0;
    int nch = msg_chunks(s, t, chunk, h->len, len);
    if (!hdr_ok(s, i, chunk, h, nch))
        return coll_sched_mismatch(s, e, peer, h, len);
    len = h->len;
    if (s->kind == COLL_RECV && !s->p2p_matched) {
        s->seq = h->seq; /* the rest of this message, and our CTS */
        s->p2p_matched = 1;
        coll_p2p_recv_unregister(s);
        sched_place(s, e); /* before our go-ahead leaves */
    }
    const rcoll_tl_ops_t *tl = e->tls[peer];
    int check = (h->kind & RCOLL_HDR_CSUM) != 0;
    if (!payload && len &&
        ((t->recv_mode != RECV_COPY && t->recv_mode != RECV_DISCARD) ||
         check)) {
        /* still in the sender's memory: fetch it to reduce it */
        if (s->bounce_len < len) {
            size_t want = RCOLL_MAX(len, s->chunk);
            free(s->bounce);
            if (!(s->bounce = malloc(want))) {
                s->bounce_len = 0;
                return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d in "
                                        "%s: no memory for a %zu-byte "
                                        "bounce buffer", e->rank,
                                        coll_kind_name(s->kind), want);
            }
            s->bounce_len = want;
        }
        st = tl->recv_copy(e->eps[peer], s->bounce);
        if (st != RCOLL_OK)
            return coll_sched_peer_error(s, e, st, peer, "receiving from");
        payload = s->bounce;
    }
    if (check) {
        uint32_t got = msg_csum(h, payload);
        if (got != h->csum)
            return coll_sched_corrupt(s, e, peer, h, got);
    }
    if (t->recv_mode == RECV_COPY && len && !payload) {
        /* single copy: the transport reads the sender's memory into dst */
        st = tl->recv_copy(e->eps[peer], t->recv_dst + off);
        if (st != RCOLL_OK)
            return coll_sched_peer_error(s, e, st, peer, "receiving from");
    } else if (recv_apply(s, e, t, off, payload, len, i, nch, peer, u)) {
        *moved = 1; /* counted when the memory domain is done (md_reap) */
        return RCOLL_OK;
    }
    coll_rx_release(e, peer, u);
    s->recv_done[i] += nch;
    *moved = 1;
    return RCOLL_OK;
}

/* The frontier step waits for its peer: steps further on whose receive
 * nothing else in the operation depends on (it lands where nothing else
 * reads or writes: recv_place, or is dropped) take their messages from
 * other peers as those come, each peer's in its own order. Then a message
 * for a later step does not sit in its sender's slots, where it holds the
 * credits that sender may need for another peer (a skewed all-to-all's
 * stall until coll_match_unblock). A step whose receive others depend on
 * (a reduction, a block forwarded later) keeps the steps after it from
 * the same peer waiting; point to point has one peer. */
static rcoll_status_t recv_ahead(coll_sched_t *s, const coll_env_t *e,
                                 int *moved)
{
    int pass = (int)++s->pass, marked = 1;
    s->pmark[s->rpx[s->r_step]] = pass;
    /* once every peer is marked the rest of the steps would all be passed
     * over (a ring's are all from one peer: O(1) instead of O(steps)) */
    for (int i = s->r_step + 1; i < s->nsteps && marked < s->nrpeers; i++) {
        coll_step_t *t = &s->steps[i];
        int q = t->recv_peer, nch = recv_nch(s, t);
        if (q < 0 || s->recv_done[i] >= nch || s->pmark[s->rpx[i]] == pass)
            continue;
        if (!(t->recv_mode == RECV_COPY && t->recv_place) &&
            t->recv_mode != RECV_DISCARD) {
            s->pmark[s->rpx[i]] = pass;
            marked++;
            continue;
        }
        rcoll_status_t st = RCOLL_OK;
        while (s->recv_done[i] < nch &&
               (st = recv_chunk(s, e, i, moved)) == RCOLL_OK)
            ;
        if (s->recv_done[i] < nch) {
            if (st != RCOLL_INPROGRESS)
                return st;
            s->pmark[s->rpx[i]] = pass;
            marked++;
        } else {
            step_unplace(s, e, i);
        }
    }
    return RCOLL_OK;
}

/* Receives what has arrived: the frontier step's chunks in order, then
 * what may come ahead of it (recv_ahead). */
static rcoll_status_t sched_recv(coll_sched_t *s, const coll_env_t *e,
                                 int *moved)
{
    if (s->md_npending)
        md_reap(s, e, moved);
    while (s->r_step < s->nsteps) {
        coll_step_t *t = &s->steps[s->r_step];
        if (s->recv_done[s->r_step] >= recv_nch(s, t)) {
            step_unplace(s, e, s->r_step);
            s->r_step++;
            continue;
        }
        rcoll_status_t st = recv_chunk(s, e, s->r_step, moved);
        if (st == RCOLL_INPROGRESS) {
            t = &s->steps[s->r_step];
            s->r_chunk = s->recv_done[s->r_step];
            s->waiting_peer = t->recv_peer;
            s->waiting_for = t->recv_class == COLL_MSG_CTS
                                 ? "the go-ahead for a large send from"
                                 : "data from";
            return s->r_step + 1 < s->nsteps && !is_p2p(s)
                       ? recv_ahead(s, e, moved)
                       : RCOLL_OK;
        }
        if (st != RCOLL_OK)
            return st;
    }
    s->r_chunk = 0;
    return RCOLL_OK;
}

/* 1 if chunk `chunk` of step t must wait for one of our own receives. */
static int send_blocked(const coll_sched_t *s, const coll_step_t *t,
                        int chunk)
{
    if (t->send_dep < 0)
        return 0;
    if (t->send_dep_all == 2)
        return s->r_step <= t->send_dep; /* an earlier phase arrives */
    const coll_step_t *d = &s->steps[t->send_dep];
    int need = t->send_dep_all ? recv_nch(s, d) : chunk + 1;
    return s->recv_done[t->send_dep] < need;
}

/* Sends what may go of step i, chunk after chunk: RCOLL_OK when it is all
 * sent or waits, else an error. *credits is set when it waits for the
 * transport (credits, room), not for a receive it depends on. */
static rcoll_status_t send_step(coll_sched_t *s, const coll_env_t *e, int i,
                                int *moved, int *credits)
{
    coll_step_t *t = &s->steps[i];
    int total = send_nch(s, t), p = t->send_peer;
    while (s->sent[i] < total) {
        int chunk = s->sent[i];
        if (send_blocked(s, t, chunk))
            return RCOLL_OK;
        int first = s->kind == COLL_SEND && i == 0 && chunk == 0;
        int may = first ? coll_p2p_send_may_start(s, e) : 1;
        if (may < 0)
            return RCOLL_ERR_NO_MEMORY; /* (message set) */
        if (!may) {
            s->waiting_peer = p;
            s->waiting_for = "an earlier send (in posting order) to";
            return RCOLL_OK;
        }
        if (t->pre_send && s->pre_sent <= i) {
            t->pre_send(s, e, i);
            s->pre_sent = i + 1;
        }
        size_t off = (size_t)chunk * s->chunk;
        int copies = t->send_copy || s->kind == COLL_ALLGATHER ||
                     s->kind == COLL_BROADCAST || whole_kind(s->kind);
        int flags = (copies ? RCOLL_TL_PEER_COPIES : 0) |
                    (whole_kind(s->kind) ? RCOLL_TL_WHOLE : 0);
        const rcoll_tl_ops_t *tl = e->tls[p];
        size_t len = t->send_bytes ? RCOLL_MIN(s->chunk, t->send_bytes - off)
                                   : 0;
        int nch = 1;
        if (tl->max_msg && len == s->chunk && !rcoll_config.checksum) {
            /* one message for several chunks (single copy), as far as
             * what this send waits for has arrived */
            size_t mx = tl->max_msg(e->eps[p], t->send_bytes - off, flags);
            int k = (int)RCOLL_MIN(mx / s->chunk, (size_t)(total - chunk));
            if (t->send_dep >= 0 && !t->send_dep_all)
                k = RCOLL_MIN(k, s->recv_done[t->send_dep] - chunk);
            if (k > 1) {
                nch = k;
                len = RCOLL_MIN((size_t)k * s->chunk, t->send_bytes - off);
            }
        }
        rcoll_msg_hdr_t h = {
            .seq = s->seq,
            .kind = sched_kind_word(s) | (uint32_t)t->send_class << 24,
            .step = (uint32_t)s->ord[2 * i],
            .chunk = (uint32_t)chunk,
            .len = (uint32_t)len,
            .tag = (uint32_t)(is_p2p(s) ? s->tag : s->root),
            .total = s->count};
        const char *pl = h.len ? t->send_buf + off : NULL;
        if (rcoll_config.checksum) {
            h.kind |= RCOLL_HDR_CSUM;
            h.csum = msg_csum(&h, pl);
        }
        s->sends_inflight++;
        rcoll_status_t st = tl->send(e->eps[p], &h, pl, s, flags,
                                     t->send_bytes);
        if (st == RCOLL_INPROGRESS) {
            s->sends_inflight--;
            s->waiting_peer = p;
            s->waiting_for = "credits (free receive slots) from";
            *credits = 1;
            return RCOLL_OK;
        }
        if (st != RCOLL_OK) {
            s->sends_inflight--;
            return coll_sched_peer_error(s, e, st, p, "sending to");
        }
        if (first)
            coll_p2p_send_started(s, e);
        s->sent[i] += nch;
        *moved = 1;
    }
    return RCOLL_OK;
}

/* Sends what may go. Each peer has its own cursor: the steps that send
 * to it go in step order, and a step that waits for credits holds only
 * the later steps to the same peer; the steps to other peers go on (no
 * send to one peer waits on credits from another). A step that waits for
 * a receive it depends on holds every later step: algorithms lean on the
 * step order for the dependencies of their empty steps (a halving round
 * whose block is empty depends on nothing of its own, but its successor
 * must still wait for the rounds before it). Steps marked send_free (each
 * depends on its send_dep alone) are the exception among themselves: one
 * that waits for its receive lets later send_free steps to other peers
 * go, but still holds every later step not so marked. An algorithm with
 * pre_send hooks (they pack as the steps go) sends strictly in step
 * order. */
static rcoll_status_t sched_send(coll_sched_t *s, const coll_env_t *e,
                                 int *moved)
{
    int pass = (int)++s->pass, marked = 0, held = 0;
    for (int i = s->s_step; i < s->nsteps && marked < s->nspeers; i++) {
        coll_step_t *t = &s->steps[i];
        int total = send_nch(s, t);
        if (s->sent[i] >= total)
            continue;
        if (held && !t->send_free)
            break; /* a send_free step before it waits for its receive */
        if (s->pmark[s->spx[i]] == pass)
            continue;
        int credits = 0;
        rcoll_status_t st = send_step(s, e, i, moved, &credits);
        if (st != RCOLL_OK)
            return st;
        if (s->sent[i] < total) {
            /* (passed only once all it depends on has arrived) */
            int dep = !credits || send_blocked(s, t, total - 1);
            if (s->in_order || (dep && !t->send_free))
                break;
            held |= dep;
            s->pmark[s->spx[i]] = pass;
            marked++;
        }
    }
    while (s->s_step < s->nsteps &&
           s->sent[s->s_step] >= send_nch(s, &s->steps[s->s_step]))
        s->s_step++;
    s->s_chunk = s->s_step < s->nsteps ? s->sent[s->s_step] : 0;
    return RCOLL_OK;
}

/* An operation split into channels: each part progresses on its own
 * ring; the parent shows the first unfinished part's cursors and wait
 * (for diagnostics) and its parts' memory-domain work in md_npending. */
static rcoll_status_t chan_progress(coll_sched_t *s, const coll_env_t *e,
                                    int *progressed)
{
    const coll_sched_t *first = NULL;
    s->md_npending = 0;
    for (int c = 0; c < s->nchan; c++) {
        if (!(s->chan_left & (1u << c)))
            continue;
        coll_env_t ec;
        coll_chan_env(e, c, &ec);
        rcoll_status_t st = coll_sched_progress(&s->chan[c], &ec, progressed);
        if (st == RCOLL_OK) {
            s->chan_left &= ~(1u << c);
            continue;
        }
        if (st != RCOLL_INPROGRESS)
            return st;
        s->md_npending += s->chan[c].md_npending;
        if (!first)
            first = &s->chan[c];
    }
    if (!first)
        return RCOLL_OK;
    s->nsteps = first->nsteps; /* (for diagnostics: steps stays NULL) */
    s->s_step = first->s_step;
    s->s_chunk = first->s_chunk;
    s->r_step = first->r_step;
    s->r_chunk = first->r_chunk;
    s->waiting_peer = first->waiting_peer;
    s->waiting_for = first->waiting_for;
    return RCOLL_INPROGRESS;
}

rcoll_status_t coll_sched_progress(coll_sched_t *s, const coll_env_t *e,
                                   int *progressed)
{
    rcoll_status_t st;
    if (s->area) /* (first: the inline area path sets no more, core.h) */
        return coll_area_progress(s, e, progressed);
    if (s->nchan)
        return chan_progress(s, e, progressed);
    if (!s->recv_done) {
        if ((st = sched_state_init(s, e)) != RCOLL_OK)
            return st;
        if (s->kind == COLL_RECV &&
            (st = coll_p2p_recv_register(s, e)) != RCOLL_OK)
            return st;
        if (s->kind != COLL_RECV)
            sched_place(s, e);
    }
    for (;;) {
        int moved = 0;
        /* sends first: a peer can work on what we post while we receive
         * (a single-copy receive reads for as long as a copy takes; done
         * before our own send, it would make the peer's read wait for it) */
        if ((st = sched_send(s, e, &moved)) != RCOLL_OK ||
            (st = sched_recv(s, e, &moved)) != RCOLL_OK)
            return st;
        if (!moved)
            break;
        *progressed = 1;
    }
    if (s->r_step >= s->nsteps && s->s_step >= s->nsteps) {
        if (s->sends_inflight == 0) {
            if (s->finish) {
                s->finish(s, e);
                s->finish = NULL;
            }
            return s->p2p_trunc ? coll_sched_truncated(s, e) : RCOLL_OK;
        }
        for (int i = s->nsteps - 1; i >= 0; i--)
            if (s->steps[i].send_peer >= 0) {
                s->waiting_peer = s->steps[i].send_peer;
                break;
            }
        s->waiting_for = "its sends to drain to";
    }
    return RCOLL_INPROGRESS;
}
