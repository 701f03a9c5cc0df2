/* Matching: which operation an arriving message belongs to.
 *
 * Each transport gives a FIFO of messages per peer. Every message names
 * what it belongs to (rcoll_msg_hdr_t): its class and seq - a collective's
 * number, or a point-to-point message's number from that sender - and, for
 * the first message of a point-to-point send, its tag. An operation that
 * wants the next message from a peer takes it from the head of that FIFO
 * when the head is its own. When the head belongs to another operation
 * (one not posted yet, or further back in its own schedule) it is copied
 * out of its slot into this store, in arrival order, and the slot goes back
 * to the sender, so no operation can hold up another by sitting in the
 * slots. An operation looks in the store before it looks at the FIFO: what
 * was set aside from a peer came before anything still in its slots, so
 * MPI's rule holds - messages of one peer and tag are received in the
 * order they were sent.
 *
 * Messages are set aside only when some operation waits behind them, and
 * large point-to-point sends are announced first (rendezvous: the data
 * follows when the receive is posted), so the store holds small messages
 * and early collective chunks. It is bounded (RCOLL_UNEXPECTED_MAX): past
 * the bound the operation fails with a message naming the peer. */
#include "sched.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    coll_umsg_t *head, *tail;
    int held;   /* the head message in the slot is an operation's still
                   (coll_rx_hold) */
} umsg_q_t;

/* A receive not matched yet, in the list of its peer (posting order). */
typedef struct coll_pending {
    struct coll_pending *next;
    coll_sched_t *s;
} coll_pending_t;

/* What is kept per peer. */
typedef struct {
    umsg_q_t q;               /* messages set aside */
    uint64_t first_out;       /* sends whose first message left */
    coll_pending_t *pending;  /* unmatched receives */
} mpeer_t;

/* Peers come in pages of MATCH_PAGE, each allocated when something is
 * first received from or sent point to point to one of its peers: a rank
 * that talks to a few neighbours of many thousands keeps a few pages. */
#define MATCH_PAGE 64

struct coll_match {
    int nranks;
    size_t max, bytes, msgs, peak;
    mpeer_t *page[];          /* (nranks + MATCH_PAGE - 1) / MATCH_PAGE */
};

/* Peer p's state, its page allocated if need be (NULL: no memory). */
static mpeer_t *mpeer(struct coll_match *m, int p)
{
    mpeer_t **pg = &m->page[p / MATCH_PAGE];
    if (!*pg && !(*pg = calloc(MATCH_PAGE, sizeof(mpeer_t))))
        return NULL;
    return &(*pg)[p % MATCH_PAGE];
}

/* Peer p's state to read: an empty one when its page was never needed. */
static const mpeer_t *mpeer_r(const struct coll_match *m, int p)
{
    static const mpeer_t none;
    const mpeer_t *pg = m->page[p / MATCH_PAGE];
    return pg ? &pg[p % MATCH_PAGE] : &none;
}

struct coll_match *coll_match_create(int nranks, size_t max)
{
    size_t npages = ((size_t)nranks + MATCH_PAGE - 1) / MATCH_PAGE;
    struct coll_match *m = calloc(1, sizeof(*m) + npages * sizeof(mpeer_t *));
    if (!m)
        return NULL;
    m->nranks = nranks;
    m->max = max;
    return m;
}

/* Non-overtaking needs more than FIFO links: two sends to one peer race
 * for its credits, and two receives from one peer for its next message,
 * within one pass of the engine (a credit or a message can arrive between
 * the first's try and the second's). So a send's first message waits for
 * every earlier send to that peer to have sent its own (sends are
 * numbered per peer in posting order), and a receive matches only when no
 * earlier receive from that peer with its tag is still unmatched. */
int coll_p2p_send_may_start(const coll_sched_t *s, const coll_env_t *e)
{
    if (!mpeer(e->match, s->root)) {
        rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d: send to rank %d: "
                         "no memory for the matching state", e->rank,
                         s->root);
        return -1;
    }
    return mpeer_r(e->match, s->root)->first_out == s->seq;
}

void coll_p2p_send_started(const coll_sched_t *s, const coll_env_t *e)
{
    mpeer(e->match, s->root)->first_out++; /* (allocated by may_start) */
}

rcoll_status_t coll_p2p_recv_register(coll_sched_t *s, const coll_env_t *e)
{
    coll_pending_t *p = malloc(sizeof(*p)), **pp;
    mpeer_t *mp = mpeer(e->match, s->root);
    if (!p || !mp) {
        free(p);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d: recv: no "
                                "memory", e->rank);
    }
    p->s = s;
    p->next = NULL;
    for (pp = &mp->pending; *pp; pp = &(*pp)->next)
        ;
    *pp = p;
    s->match = e->match;
    return RCOLL_OK;
}

void coll_p2p_recv_unregister(coll_sched_t *s)
{
    struct coll_match *m = s->match;
    if (!m)
        return;
    mpeer_t *mp = mpeer(m, s->root); /* (registered: its page exists) */
    for (coll_pending_t **pp = &mp->pending; *pp; pp = &(*pp)->next)
        if ((*pp)->s == s) {
            coll_pending_t *p = *pp;
            *pp = p->next;
            free(p);
            break;
        }
    s->match = NULL;
}

/* 1 if no receive posted before s from its peer with its tag is
 * unmatched */
static int first_of_tag(const coll_sched_t *s, const struct coll_match *m)
{
    for (const coll_pending_t *p = mpeer_r(m, s->root)->pending; p;
         p = p->next) {
        if (p->s == s)
            return 1;
        if (p->s->tag == s->tag)
            return 0;
    }
    return 1;
}

void coll_match_destroy(struct coll_match *m)
{
    if (!m)
        return;
    for (int p = 0; p < m->nranks; p++) {
        mpeer_t *pg = m->page[p / MATCH_PAGE];
        if (!pg)
            continue;
        for (coll_umsg_t *u = pg[p % MATCH_PAGE].q.head, *n; u; u = n) {
            n = u->next;
            free(u);
        }
        for (coll_pending_t *x = pg[p % MATCH_PAGE].pending, *n; x; x = n) {
            n = x->next;
            x->s->match = NULL;
            free(x);
        }
    }
    for (int i = 0; i < (m->nranks + MATCH_PAGE - 1) / MATCH_PAGE; i++)
        free(m->page[i]);
    free(m);
}

void coll_match_stats(const struct coll_match *m, size_t *msgs,
                      size_t *bytes, size_t *peak)
{
    *msgs = m ? m->msgs : 0;
    *bytes = m ? m->bytes : 0;
    *peak = m ? m->peak : 0;
}

static int is_p2p_kind(const coll_sched_t *s)
{
    return s->kind == COLL_SEND || s->kind == COLL_RECV;
}

/* 1 if h is the next message of schedule s's receive step t. */
static int mine(const coll_sched_t *s, const coll_step_t *t,
                const rcoll_msg_hdr_t *h, const struct coll_match *m)
{
    unsigned cls = COLL_MSG_CLASS(h->kind);
    switch (s->kind) {
    case COLL_RECV:
        if (cls != COLL_MSG_P2P && cls != COLL_MSG_RTS)
            return 0;
        if (s->p2p_matched)
            return h->seq == s->seq;
        /* the first message of a send with our tag, in arrival order */
        return h->step == 0 && h->chunk == 0 &&
               h->tag == (uint32_t)s->tag && first_of_tag(s, m);
    case COLL_SEND: /* its receive is the receiver's ready-to-send */
        return cls == COLL_MSG_CTS && h->seq == s->seq;
    default:
        (void)t;
        return cls == COLL_MSG_COLL && h->seq == s->seq;
    }
}

/* Copies the head message of `peer` into the store and frees its slot. */
static rcoll_status_t set_aside(const coll_env_t *e, int peer,
                                const rcoll_msg_hdr_t *h, const void *payload)
{
    struct coll_match *m = e->match;
    size_t len = h->len;
    mpeer_t *mp = mpeer(m, peer);
    if (!mp)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d: no memory "
                                "for the matching state of rank %d",
                                e->rank, peer);
    if (m->bytes + len > m->max)
        return rcoll__set_error(
            RCOLL_ERR_NO_MEMORY,
            "rank %d: %zu bytes of messages from ranks that arrived before "
            "their operations wanted them are held already; one more of %zu "
            "bytes from rank %d would pass RCOLL_UNEXPECTED_MAX (%zu): "
            "post the matching receives or collectives sooner, or raise it",
            e->rank, m->bytes, len, peer, m->max);
    coll_umsg_t *u = malloc(sizeof(*u) + len);
    if (!u)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d: no memory "
                                "for a %zu-byte message from rank %d",
                                e->rank, len, peer);
    rcoll_status_t st = RCOLL_OK;
    if (len && payload)
        e->md->copy(u->data, payload, len);
    else if (len)
        st = e->tls[peer]->recv_copy(e->eps[peer], u->data);
    if (st != RCOLL_OK) {
        free(u);
        return st;
    }
    u->hdr = *h;
    u->next = NULL;
    e->tls[peer]->recv_release(e->eps[peer]);
    umsg_q_t *q = &mp->q;
    if (q->tail)
        q->tail->next = u;
    else
        q->head = u;
    q->tail = u;
    m->bytes += len;
    m->msgs++;
    if (m->bytes > m->peak)
        m->peak = m->bytes;
    return RCOLL_OK;
}

rcoll_status_t coll_rx_get(coll_sched_t *s, const coll_step_t *t,
                           const coll_env_t *e, int peer,
                           const rcoll_msg_hdr_t **h, const void **payload,
                           coll_umsg_t **u)
{
    mpeer_t *mp = mpeer(e->match, peer); /* (coll_rx_hold relies on it) */
    if (!mp)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "rank %d: no memory "
                                "for the matching state of rank %d",
                                e->rank, peer);
    const umsg_q_t *q = &mp->q;
    for (coll_umsg_t *x = q->head; x; x = x->next)
        if (mine(s, t, &x->hdr, e->match)) {
            *h = &x->hdr;
            *payload = x->data;
            *u = x;
            return RCOLL_OK;
        }
    if (q->held)
        return RCOLL_INPROGRESS;
    for (;;) {
        const rcoll_msg_hdr_t *hh;
        const void *pl;
        rcoll_status_t st = e->tls[peer]->recv_peek(e->eps[peer], &hh, &pl);
        if (st != RCOLL_OK)
            return st;
        if (mine(s, t, hh, e->match)) {
            *h = hh;
            *payload = pl;
            *u = NULL;
            return RCOLL_OK;
        }
        if (!is_p2p_kind(s) && COLL_MSG_CLASS(hh->kind) == COLL_MSG_COLL &&
            coll_seq_num(hh->seq) == coll_seq_num(s->seq) &&
            !(hh->seq >> COLL_SEQ_CHAN_SHIFT) != !(s->seq >> COLL_SEQ_CHAN_SHIFT))
            /* the same collective, split in channels on one side only:
             * the ranks' counts differ (the split depends on it) */
            return rcoll__set_error(
                RCOLL_ERR_MISMATCH, "rank %d: %s #%llu: rank %d sent it %s "
                "channels and this rank %s: the ranks called different "
                "operations or counts", e->rank, coll_kind_name(s->kind),
                coll_seq_num(s->seq), peer,
                hh->seq >> COLL_SEQ_CHAN_SHIFT ? "in" : "without",
                s->seq >> COLL_SEQ_CHAN_SHIFT ? "runs it in them" : "does not");
        if ((st = set_aside(e, peer, hh, pl)) != RCOLL_OK)
            return st;
    }
}

/* The engine made no progress for a while. A peer whose messages fill our
 * slots cannot send until we release one; if no operation takes them (they
 * belong to a later step of a running operation, or to one not posted
 * yet), it may be that peer's next send that the ranks we wait for wait
 * for: a cycle through the credits that no operation sees (a hierarchical
 * all-to-all's cursors did this). So everything queued from such a peer
 * is set aside, as MPI moves what arrives to its unexpected queue, and its
 * credits go back. Bounded like any setting aside: past
 * RCOLL_UNEXPECTED_MAX the messages stay, and the deadline names the wait.
 * Returns how many messages were set aside. */
int coll_match_unblock(const coll_env_t *e)
{
    struct coll_match *m = e->match;
    int n = 0;
    for (int p = 0; m && p < e->nranks; p++) {
        const rcoll_tl_ops_t *tl = e->tls[p];
        if (p == e->rank || !tl || !tl->recv_full || !e->eps[p] ||
            mpeer_r(m, p)->q.held || !tl->recv_full(e->eps[p]))
            continue;
        for (;;) {
            const rcoll_msg_hdr_t *h;
            const void *pl;
            if (tl->recv_peek(e->eps[p], &h, &pl) != RCOLL_OK ||
                m->bytes + h->len > m->max || set_aside(e, p, h, pl) !=
                RCOLL_OK)
                break;
            n++;
        }
    }
    return n;
}

void coll_rx_hold(const coll_env_t *e, int peer, int on)
{
    mpeer(e->match, peer)->q.held = on; /* (coll_rx_get made its page) */
}

void coll_rx_release(const coll_env_t *e, int peer, coll_umsg_t *u)
{
    if (!u) {
        e->tls[peer]->recv_release(e->eps[peer]);
        return;
    }
    struct coll_match *m = e->match;
    umsg_q_t *q = &mpeer(m, peer)->q; /* (u is in it: its page exists) */
    coll_umsg_t **pp = &q->head, *prev = NULL;
    while (*pp && *pp != u) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = u->next;
    if (q->tail == u)
        q->tail = prev;
    m->bytes -= u->hdr.len;
    m->msgs--;
    free(u);
}
