/*
 * hwloc XML reader (see topo.h; the queries and decisions on what it
 * read are topo_query.c).
 *
 * The reader is a small non-validating XML scanner: elements, attributes
 * and the text of <indexes>/<u64values>; comments, processing instructions
 * and the DOCTYPE are skipped. Objects nest as in hwloc's export: I/O
 * objects (Bridge, PCIDev, OSDev) are children of the object they hang
 * from (a Package, a NUMA node's parent, the Machine). Input comes from a
 * file the user names, but it is treated as hostile all the same: every
 * read is bounds-checked, depth and counts are capped.
 */
#include "topo/topo_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* copies a string, truncated to fit */
static void copy(char *dst, size_t len, const char *src)
{
    size_t k = strnlen(src, len - 1);
    memcpy(dst, src, k);
    dst[k] = '\0';
}

/* ---- the scanner ---- */

typedef struct {
    const char *p, *end;
    int line;
    char *err;
    size_t errlen;
    int failed;
} scan_t;

static void fail(scan_t *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    s->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (s->err && s->errlen)
        snprintf(s->err, s->errlen, "topology XML, line %d: %s", s->line,
                 msg);
}

static void adv(scan_t *s, size_t k)
{
    for (size_t i = 0; i < k && s->p < s->end; i++, s->p++)
        if (*s->p == '\n')
            s->line++;
}

/* advances past the first occurrence of `pat`; 0 if it is not there */
static int skip_past(scan_t *s, const char *pat)
{
    size_t m = strlen(pat);
    while ((size_t)(s->end - s->p) >= m) {
        if (memcmp(s->p, pat, m) == 0) {
            adv(s, m);
            return 1;
        }
        adv(s, 1);
    }
    s->p = s->end;
    return 0;
}

static void skip_ws(scan_t *s)
{
    while (s->p < s->end && isspace((unsigned char)*s->p))
        adv(s, 1);
}

static int is_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == ':' ||
           c == '.';
}

/* a name into buf (truncated to fit); 0 if none */
static int read_name(scan_t *s, char *buf, size_t len)
{
    size_t k = 0;
    while (s->p < s->end && is_name_char(*s->p)) {
        if (k + 1 < len)
            buf[k++] = *s->p;
        adv(s, 1);
    }
    buf[k] = '\0';
    return k > 0;
}

typedef struct {
    char name[32];
    char value[128];
} attr_t;

#define MAX_ATTRS 32

/* the attributes up to '>' or '/>'; *empty set for '/>' */
static int read_attrs(scan_t *s, attr_t *a, int *na, int *empty)
{
    *na = 0;
    *empty = 0;
    for (;;) {
        skip_ws(s);
        if (s->p >= s->end) {
            fail(s, "unterminated tag");
            return 0;
        }
        if (*s->p == '>') {
            adv(s, 1);
            return 1;
        }
        if (*s->p == '/') {
            adv(s, 1);
            if (s->p >= s->end || *s->p != '>') {
                fail(s, "'/' not followed by '>'");
                return 0;
            }
            adv(s, 1);
            *empty = 1;
            return 1;
        }
        attr_t tmp, *x = *na < MAX_ATTRS ? &a[*na] : &tmp;
        if (!read_name(s, x->name, sizeof(x->name))) {
            fail(s, "bad attribute (character 0x%02x)",
                 (unsigned char)*s->p);
            return 0;
        }
        skip_ws(s);
        if (s->p >= s->end || *s->p != '=') {
            fail(s, "attribute %s without '='", x->name);
            return 0;
        }
        adv(s, 1);
        skip_ws(s);
        if (s->p >= s->end || (*s->p != '"' && *s->p != '\'')) {
            fail(s, "attribute %s: value not quoted", x->name);
            return 0;
        }
        char q = *s->p;
        adv(s, 1);
        size_t k = 0;
        while (s->p < s->end && *s->p != q) {
            if (*s->p == '<') {
                fail(s, "'<' inside attribute %s", x->name);
                return 0;
            }
            if (k + 1 < sizeof(x->value))
                x->value[k++] = *s->p;
            adv(s, 1);
        }
        x->value[k] = '\0';
        if (s->p >= s->end) {
            fail(s, "unterminated value of %s", x->name);
            return 0;
        }
        adv(s, 1);
        if (*na < MAX_ATTRS)
            (*na)++;
    }
}

static const char *attr(const attr_t *a, int na, const char *name)
{
    for (int i = 0; i < na; i++)
        if (strcmp(a[i].name, name) == 0)
            return a[i].value;
    return NULL;
}

/* ---- building ---- */

static int add_node(rcoll_topo_t *t, scan_t *s, ntype_t type, int parent)
{
    if (t->nn >= TOPO_MAX_NODES) {
        fail(s, "more than %d objects", TOPO_MAX_NODES);
        return -1;
    }
    if (t->nn == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        node_t *n = realloc(t->n, (size_t)cap * sizeof(*n));
        if (!n) {
            fail(s, "out of memory");
            return -1;
        }
        t->n = n;
        t->cap = cap;
    }
    node_t *x = &t->n[t->nn];
    memset(x, 0, sizeof(*x));
    x->type = type;
    x->parent = parent;
    x->osdev_type = -1;
    return t->nn++;
}

static ntype_t type_of(const char *v)
{
    static const struct { const char *name; ntype_t type; } map[] = {
        {"Machine", N_MACHINE}, {"Package", N_PACKAGE},
        {"Socket", N_PACKAGE},  {"NUMANode", N_NUMA},
        {"Group", N_GROUP},     {"Bridge", N_BRIDGE},
        {"PCIDev", N_PCIDEV},   {"OSDev", N_OSDEV},
    };
    if (v)
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
            if (strcmp(v, map[i].name) == 0)
                return map[i].type;
    return N_OTHER;
}

static void fill_object(node_t *x, const attr_t *a, int na)
{
    const char *v;
    if ((v = attr(a, na, "gp_index")))
        x->gp = strtoull(v, NULL, 10);
    if ((v = attr(a, na, "pci_busid")))
        copy(x->busid, sizeof(x->busid), v);
    if ((v = attr(a, na, "name")))
        copy(x->name, sizeof(x->name), v);
    if ((v = attr(a, na, "subtype")))
        copy(x->subtype, sizeof(x->subtype), v);
    if ((v = attr(a, na, "osdev_type")))
        x->osdev_type = atoi(v);
    if (x->type == N_BRIDGE) {
        /* "0-1": host to PCI; "1-1": PCI to PCI (a switch port) */
        v = attr(a, na, "bridge_type");
        x->host_bridge = v ? v[0] == '0' : 0;
    }
    if (x->type == N_PCIDEV && (v = attr(a, na, "pci_type"))) {
        /* "0302 [10de:20b0] [10de:134f] a1" */
        x->pci_class = (unsigned)strtoul(v, NULL, 16) & 0xffff;
        const char *b = strchr(v, '[');
        if (b)
            x->pci_vendor = (unsigned)strtoul(b + 1, NULL, 16) & 0xffff;
    }
}

/* a distances2 block: gp indexes and an n x n matrix */
typedef struct {
    int active, is_nvlink;
    unsigned long long *idx, *val;
    size_t nidx, nval, cap_idx, cap_val;
} dist_t;

static int push_u64(unsigned long long **v, size_t *n, size_t *cap,
                    unsigned long long x)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        if (c > (size_t)TOPO_MAX_DEV * TOPO_MAX_DEV)
            return -1;
        unsigned long long *w = realloc(*v, c * sizeof(*w));
        if (!w)
            return -1;
        *v = w;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* whitespace-separated unsigned numbers up to the next '<' */
static int read_numbers(scan_t *s, unsigned long long **v, size_t *n,
                        size_t *cap)
{
    for (;;) {
        skip_ws(s);
        if (s->p >= s->end || *s->p == '<')
            return 0;
        if (!isdigit((unsigned char)*s->p)) {
            fail(s, "a number expected in a distances matrix");
            return -1;
        }
        unsigned long long x = 0;
        while (s->p < s->end && isdigit((unsigned char)*s->p)) {
            unsigned d = (unsigned)(*s->p - '0');
            x = x > (~0ull - d) / 10 ? ~0ull : x * 10 + d; /* saturate */
            adv(s, 1);
        }
        if (push_u64(v, n, cap, x) < 0) {
            fail(s, "distances matrix too large");
            return -1;
        }
    }
}

/* an OS device tells its PCI parent what it is */
static void note_osdev(rcoll_topo_t *t, int i)
{
    const node_t *o = &t->n[i];
    if (o->parent < 0 || t->n[o->parent].type != N_PCIDEV)
        return;
    node_t *x = &t->n[o->parent];
    if (strcmp(o->subtype, "CUDA") == 0 || strncmp(o->name, "cuda", 4) == 0 ||
        strncmp(o->name, "nvml", 4) == 0)
        x->cuda = 1;
    else if (o->osdev_type == 3 || strcmp(o->subtype, "OpenFabrics") == 0) {
        if (!x->rdma[0])
            copy(x->rdma, sizeof(x->rdma), o->name);
    } else if (o->osdev_type == 2 || strcmp(o->subtype, "Network") == 0) {
        if (!x->net[0])
            copy(x->net, sizeof(x->net), o->name);
    }
}

static int node_is_gpu(const rcoll_topo_t *t, int i)
{
    const node_t *x = &t->n[i];
    if (x->type != N_PCIDEV)
        return 0;
    unsigned cls = x->pci_class >> 8;
    return x->cuda ||
           (cls == 0x03 && (x->pci_vendor == 0x10de || x->pci_vendor == 0x1002));
}

/* a NIC: an RDMA device below it (hwloc's OpenFabrics OSDev, type 3), an
 * InfiniBand controller, or an Ethernet controller with a netdev */
static int node_is_nic(rcoll_topo_t *t, int i, char *name, size_t len)
{
    const node_t *x = &t->n[i];
    if (x->type != N_PCIDEV)
        return 0;
    unsigned cls = x->pci_class >> 8;
    if (!x->rdma[0] && !x->net[0] && x->pci_class != 0x0207)
        return 0;
    if (!x->rdma[0] && cls != 0x02)
        return 0;
    snprintf(name, len, "%s", x->rdma[0] ? x->rdma : x->net);
    return 1;
}

static int gpu_of_node(const rcoll_topo_t *t, int i)
{
    for (; i >= 0; i = t->n[i].parent)
        for (int g = 0; g < t->ngpu; g++)
            if (t->gpu[g] == i)
                return g;
    return -1;
}

static void apply_distances(rcoll_topo_t *t, const dist_t *d)
{
    size_t n = d->nidx;
    if (!d->is_nvlink || n == 0 || n > TOPO_MAX_DEV || d->nval != n * n ||
        !t->nvl)
        return;
    int *g = calloc(n, sizeof(*g));
    if (!g)
        return;
    for (size_t k = 0; k < n; k++) {
        g[k] = -1;
        for (int i = 0; i < t->nn; i++)
            if (t->n[i].gp && t->n[i].gp == d->idx[k]) {
                g[k] = gpu_of_node(t, i);
                break;
            }
    }
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++)
            if (g[a] >= 0 && g[b] >= 0 && g[a] != g[b])
                t->nvl[g[a] * t->ngpu + g[b]] += d->val[a * n + b];
    free(g);
}

/* The parser's place in the document. */
typedef struct {
    scan_t s;
    rcoll_topo_t *t;
    /* the open elements: their names and the object node each opened */
    char open_name[TOPO_MAX_DEPTH][32];
    int open_node[TOPO_MAX_DEPTH];
    int depth, seen_topology;
    /* distances blocks, applied once all objects are known */
    dist_t *dists;
    size_t ndist;
    dist_t *cur;
    int in_numbers; /* 1: <indexes>, 2: <u64values>/<values> */
} parse_t;

/* An end tag (after "</"): it must close the innermost open element.
 * 0 on success. */
static int parse_end_tag(parse_t *ps)
{
    scan_t *s = &ps->s;
    char name[32];
    adv(s, 1);
    read_name(s, name, sizeof(name));
    skip_ws(s);
    if (s->p >= s->end || *s->p != '>') {
        fail(s, "bad end tag </%s", name);
        return -1;
    }
    adv(s, 1);
    if (ps->depth == 0 || strcmp(ps->open_name[ps->depth - 1], name) != 0) {
        fail(s, "</%s> does not close <%s>", name,
             ps->depth ? ps->open_name[ps->depth - 1] : "(nothing)");
        return -1;
    }
    ps->depth--;
    if (strcmp(name, "indexes") == 0 || strcmp(name, "u64values") == 0 ||
        strcmp(name, "values") == 0)
        ps->in_numbers = 0;
    if (strcmp(name, "distances2") == 0)
        ps->cur = NULL;
    return 0;
}

/* What a start tag opens: an object node (its index), a distances block,
 * or the numbers of the current block. -2 on failure. */
static int parse_element(parse_t *ps, const char *name, const attr_t *a,
                         int na, int empty)
{
    scan_t *s = &ps->s;
    int parent_obj = -1;
    for (int k = ps->depth - 1; k >= 0; k--)
        if (ps->open_node[k] >= 0) {
            parent_obj = ps->open_node[k];
            break;
        }
    if (strcmp(name, "object") == 0) {
        if (ps->depth < 1) {
            fail(s, "<object> outside <topology>");
            return -2;
        }
        int me = add_node(ps->t, s, type_of(attr(a, na, "type")), parent_obj);
        if (me < 0)
            return -2;
        fill_object(&ps->t->n[me], a, na);
        if (ps->t->n[me].type == N_PACKAGE)
            ps->t->npkg++;
        return me;
    }
    if (strcmp(name, "distances2") == 0 && !empty) {
        dist_t *d = realloc(ps->dists, (ps->ndist + 1) * sizeof(*d));
        if (!d) {
            fail(s, "out of memory");
            return -2;
        }
        ps->dists = d;
        ps->cur = &ps->dists[ps->ndist++];
        memset(ps->cur, 0, sizeof(*ps->cur));
        const char *dn = attr(a, na, "name");
        ps->cur->is_nvlink = dn && strcmp(dn, "NVLinkBandwidth") == 0;
    } else if (ps->cur && !empty &&
               (strcmp(name, "indexes") == 0 ||
                strcmp(name, "u64values") == 0 || strcmp(name, "values") == 0)) {
        ps->in_numbers = name[0] == 'i' ? 1 : 2;
    }
    return -1;
}

/* A start tag (after "<"). 0 on success. */
static int parse_start_tag(parse_t *ps)
{
    scan_t *s = &ps->s;
    char name[32];
    attr_t a[MAX_ATTRS];
    int na, empty;
    if (!read_name(s, name, sizeof(name))) {
        fail(s, "bad tag");
        return -1;
    }
    if (!read_attrs(s, a, &na, &empty))
        return -1;
    if (ps->depth == 0 && strcmp(name, "topology") != 0) {
        fail(s, "<%s> where <topology> was expected", name);
        return -1;
    }
    if (ps->depth == 0)
        ps->seen_topology = 1;
    int me = parse_element(ps, name, a, na, empty);
    if (me == -2)
        return -1;
    if (!empty) {
        if (ps->depth == TOPO_MAX_DEPTH) {
            fail(s, "nesting deeper than %d", TOPO_MAX_DEPTH);
            return -1;
        }
        copy(ps->open_name[ps->depth], sizeof(ps->open_name[ps->depth]),
             name);
        ps->open_node[ps->depth] = me;
        ps->depth++;
    }
    return 0;
}

/* Once every object is read: OS devices, GPUs and NICs, the NVLink matrix
 * from the distances blocks. */
static void parse_finish(parse_t *ps)
{
    rcoll_topo_t *t = ps->t;
    for (int i = 0; i < t->nn; i++)
        if (t->n[i].type == N_OSDEV)
            note_osdev(t, i);
    for (int i = 0; i < t->nn; i++) {
        char nm[64];
        if (node_is_gpu(t, i) && t->ngpu < TOPO_MAX_DEV)
            t->gpu[t->ngpu++] = i;
        else if (node_is_nic(t, i, nm, sizeof(nm)) && t->nnic < TOPO_MAX_DEV) {
            snprintf(t->nicname[t->nnic], sizeof(t->nicname[0]), "%s", nm);
            t->nic[t->nnic++] = i;
        }
    }
    if (t->ngpu) {
        t->nvl = calloc((size_t)t->ngpu * t->ngpu, sizeof(*t->nvl));
        if (!t->nvl)
            fail(&ps->s, "out of memory");
    }
    for (size_t k = 0; k < ps->ndist; k++)
        apply_distances(t, &ps->dists[k]);
}

rcoll_status_t rcoll_topo_parse(const char *xml, size_t len,
                                rcoll_topo_t **out, char *err, size_t errlen)
{
    if (!xml || !out)
        return RCOLL_ERR_INVALID_ARGUMENT;
    parse_t *ps = calloc(1, sizeof(*ps));
    rcoll_topo_t *t = calloc(1, sizeof(*t));
    if (!ps || !t) {
        free(ps);
        free(t);
        return RCOLL_ERR_NO_MEMORY;
    }
    ps->s = (scan_t){xml, xml + len, 1, err, errlen, 0};
    ps->t = t;
    scan_t *s = &ps->s;
    while (!s->failed && s->p < s->end) {
        if (*s->p != '<') {
            dist_t *cur = ps->cur;
            if (ps->in_numbers && cur) {
                if (ps->in_numbers == 1)
                    read_numbers(s, &cur->idx, &cur->nidx, &cur->cap_idx);
                else
                    read_numbers(s, &cur->val, &cur->nval, &cur->cap_val);
                continue;
            }
            adv(s, 1); /* text we do not use */
            continue;
        }
        if (s->end - s->p >= 4 && memcmp(s->p, "<!--", 4) == 0) {
            if (!skip_past(s, "-->"))
                fail(s, "unterminated comment");
            continue;
        }
        if (s->end - s->p >= 2 && (s->p[1] == '?' || s->p[1] == '!')) {
            if (!skip_past(s, ">"))
                fail(s, "unterminated declaration");
            continue;
        }
        adv(s, 1);
        if ((s->p < s->end && *s->p == '/') ? parse_end_tag(ps) != 0
                                            : parse_start_tag(ps) != 0)
            break;
    }
    if (!s->failed && !ps->seen_topology)
        fail(s, "no <topology> element");
    if (!s->failed && ps->depth != 0)
        fail(s, "<%s> is not closed", ps->open_name[ps->depth - 1]);
    if (!s->failed)
        parse_finish(ps);
    for (size_t k = 0; k < ps->ndist; k++) {
        free(ps->dists[k].idx);
        free(ps->dists[k].val);
    }
    free(ps->dists);
    int failed = s->failed;
    free(ps);
    if (failed) {
        rcoll_topo_free(t);
        return RCOLL_ERR_INVALID_ARGUMENT;
    }
    *out = t;
    return RCOLL_OK;
}

rcoll_status_t rcoll_topo_load(const char *path, rcoll_topo_t **out,
                               char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "topology file %s: %s", path, strerror(errno));
        return RCOLL_ERR_INVALID_ARGUMENT;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= TOPO_MAX_BYTES) {
                snprintf(err, errlen, "topology file %s: larger than %u MiB",
                         path, TOPO_MAX_BYTES >> 20);
                free(buf);
                fclose(f);
                return RCOLL_ERR_INVALID_ARGUMENT;
            }
            char *b = realloc(buf, cap * 2);
            if (!b)
                break;
            buf = b;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        if (k == 0)
            break;
        n += k;
    }
    fclose(f);
    if (!buf)
        return RCOLL_ERR_NO_MEMORY;
    char e2[256] = "";
    rcoll_status_t st = rcoll_topo_parse(buf, n, out, e2, sizeof(e2));
    if (st != RCOLL_OK)
        snprintf(err, errlen, "%s: %s", path, e2);
    free(buf);
    return st;
}

void rcoll_topo_free(rcoll_topo_t *t)
{
    if (!t)
        return;
    free(t->n);
    free(t->nvl);
    free(t);
}

