/* The topology reader and its decisions on the shipped hwloc XML
 * topologies (tests/topo, made by tests/topo/gen.py) and on broken input.
 * usage: test_topo TOPODIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "topo/topo.h"

static rcoll_topo_t *load(const char *dir, const char *name)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    rcoll_topo_t *t = NULL;
    rcoll_status_t st = rcoll_topo_load(path, &t, err, sizeof(err));
    CHECK(st == RCOLL_OK && t, "load %s: %d %s", path, st, err);
    return st == RCOLL_OK ? t : NULL;
}

#define P(t, g, n) rcoll_topo_gpu_nic_path(t, g, n)
#define G(t, a, b) rcoll_topo_gpu_gpu_path(t, a, b)
#define EXPECT_PATH(got, want, what, a, b)                                    \
    CHECK((got) == (want), "%s %d-%d: %s, expected %s", what, a, b,          \
          rcoll_path_name(got), rcoll_path_name(want))

static void check_nics(rcoll_topo_t *t, const int *want, const char *name)
{
    int nic_of[64];
    rcoll_topo_choose_nics(t, nic_of);
    for (int g = 0; g < rcoll_topo_ngpus(t); g++)
        CHECK(nic_of[g] == want[g], "%s: GPU %d gets NIC %d, expected %d",
              name, g, nic_of[g], want[g]);
}

static void topo_a(const char *dir)
{
    rcoll_topo_t *t = load(dir, "a.xml");
    if (!t)
        return;
    CHECK(rcoll_topo_ngpus(t) == 8 && rcoll_topo_nnics(t) == 2 &&
              rcoll_topo_npackages(t) == 2,
          "a: %d GPUs %d NICs %d packages", rcoll_topo_ngpus(t),
          rcoll_topo_nnics(t), rcoll_topo_npackages(t));
    CHECK(strcmp(rcoll_topo_nic_name(t, 0), "mlx5_0") == 0 &&
              strcmp(rcoll_topo_nic_name(t, 1), "mlx5_1") == 0,
          "a: NIC names %s %s", rcoll_topo_nic_name(t, 0),
          rcoll_topo_nic_name(t, 1));
    CHECK(strcmp(rcoll_topo_gpu_busid(t, 0), "0000:13:00.0") == 0,
          "a: GPU 0 bus id %s", rcoll_topo_gpu_busid(t, 0));
    static const rcoll_path_t nic0[8] = {
        RCOLL_PATH_PIX, RCOLL_PATH_PIX, RCOLL_PATH_PHB, RCOLL_PATH_PHB,
        RCOLL_PATH_SYS, RCOLL_PATH_SYS, RCOLL_PATH_SYS, RCOLL_PATH_SYS};
    for (int g = 0; g < 8; g++) {
        EXPECT_PATH(P(t, g, 0), nic0[g], "a: GPU-NIC", g, 0);
        /* socket 1 is socket 0 shifted by 4 */
        EXPECT_PATH(P(t, g, 1), nic0[(g + 4) % 8], "a: GPU-NIC", g, 1);
        CHECK(rcoll_topo_gpu_package(t, g) == g / 4, "a: GPU %d package %d",
              g, rcoll_topo_gpu_package(t, g));
    }
    static const int want[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    check_nics(t, want, "a");
    /* GDR at the default level (PXB): only the GPUs on the NIC's switch */
    for (int g = 0; g < 8; g++)
        CHECK(rcoll_topo_gdr(t, g, want[g], RCOLL_PATH_PXB) ==
                  (g % 4 < 2),
              "a: GDR for GPU %d", g);
    /* NVLink: full mesh inside a socket, i <-> i+4 across */
    EXPECT_PATH(G(t, 0, 1), RCOLL_PATH_NVL, "a: GPU-GPU", 0, 1);
    EXPECT_PATH(G(t, 2, 3), RCOLL_PATH_NVL, "a: GPU-GPU", 2, 3);
    EXPECT_PATH(G(t, 0, 4), RCOLL_PATH_NVL, "a: GPU-GPU", 0, 4);
    EXPECT_PATH(G(t, 0, 5), RCOLL_PATH_SYS, "a: GPU-GPU", 0, 5);
    EXPECT_PATH(G(t, 3, 3), RCOLL_PATH_LOC, "a: GPU-GPU", 3, 3);
    CHECK(rcoll_topo_nvlink_bw(t, 1, 5) == 300000 &&
              rcoll_topo_nvlink_bw(t, 1, 6) == 0,
          "a: NVLink bandwidth %llu %llu", rcoll_topo_nvlink_bw(t, 1, 5),
          rcoll_topo_nvlink_bw(t, 1, 6));
    rcoll_topo_free(t);
}

static void topo_b(const char *dir)
{
    rcoll_topo_t *t = load(dir, "b.xml");
    if (!t)
        return;
    CHECK(rcoll_topo_ngpus(t) == 8 && rcoll_topo_nnics(t) == 8,
          "b: %d GPUs %d NICs", rcoll_topo_ngpus(t), rcoll_topo_nnics(t));
    for (int g = 0; g < 8; g++) {
        EXPECT_PATH(P(t, g, g), RCOLL_PATH_PIX, "b: GPU-NIC", g, g);
        EXPECT_PATH(P(t, g, g ^ 1), RCOLL_PATH_PXB, "b: GPU-NIC", g, g ^ 1);
        EXPECT_PATH(P(t, g, g ^ 2), RCOLL_PATH_PHB, "b: GPU-NIC", g, g ^ 2);
        EXPECT_PATH(P(t, g, g ^ 4), RCOLL_PATH_SYS, "b: GPU-NIC", g, g ^ 4);
        CHECK(rcoll_topo_gdr(t, g, g, RCOLL_PATH_PXB), "b: GDR GPU %d", g);
        for (int h = 0; h < 8; h++)
            if (h != g)
                EXPECT_PATH(G(t, g, h), RCOLL_PATH_NVL, "b: GPU-GPU", g, h);
    }
    static const int want[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    check_nics(t, want, "b");
    CHECK(rcoll_topo_nvlink_bw(t, 0, 7) == 900000, "b: NVSwitch bw %llu",
          rcoll_topo_nvlink_bw(t, 0, 7));
    rcoll_topo_free(t);
}

static void topo_c(const char *dir)
{
    rcoll_topo_t *t = load(dir, "c.xml");
    if (!t)
        return;
    CHECK(rcoll_topo_ngpus(t) == 4 && rcoll_topo_nnics(t) == 1,
          "c: %d GPUs %d NICs", rcoll_topo_ngpus(t), rcoll_topo_nnics(t));
    CHECK(strcmp(rcoll_topo_nic_name(t, 0), "mlx5_0") == 0, "c: NIC %s",
          rcoll_topo_nic_name(t, 0));
    for (int g = 0; g < 4; g++) {
        rcoll_path_t want = g < 2 ? RCOLL_PATH_PHB : RCOLL_PATH_SYS;
        EXPECT_PATH(P(t, g, 0), want, "c: GPU-NIC", g, 0);
        CHECK(!rcoll_topo_gdr(t, g, 0, RCOLL_PATH_PXB), "c: GDR at PXB, %d",
              g);
        CHECK(rcoll_topo_gdr(t, g, 0, RCOLL_PATH_PHB) == (g < 2),
              "c: GDR at PHB, %d", g);
    }
    static const int want[4] = {0, 0, 0, 0};
    check_nics(t, want, "c");
    EXPECT_PATH(G(t, 0, 1), RCOLL_PATH_PHB, "c: GPU-GPU", 0, 1);
    EXPECT_PATH(G(t, 1, 2), RCOLL_PATH_SYS, "c: GPU-GPU", 1, 2);
    rcoll_topo_free(t);
}

static void topo_d(const char *dir)
{
    rcoll_topo_t *t = load(dir, "d.xml");
    if (!t)
        return;
    CHECK(rcoll_topo_ngpus(t) == 0 && rcoll_topo_nnics(t) == 2 &&
              rcoll_topo_npackages(t) == 2,
          "d: %d GPUs %d NICs", rcoll_topo_ngpus(t), rcoll_topo_nnics(t));
    for (int k = 0; k < 2; k++) {
        char want[16];
        snprintf(want, sizeof(want), "erdma_%d", k);
        CHECK(strcmp(rcoll_topo_nic_name(t, k), want) == 0 &&
                  rcoll_topo_nic_package(t, k) == k,
              "d: NIC %d is %s on package %d", k, rcoll_topo_nic_name(t, k),
              rcoll_topo_nic_package(t, k));
    }
    rcoll_topo_free(t);
}

/* The NIC of each rank of a host (rcoll_topo_rank_nic): the GPU's NIC
 * when the host has one GPU per rank, mapped by name into the caller's
 * device list, never across sockets; contiguous blocks otherwise. */
static void rank_nics(const char *dir)
{
    rcoll_topo_t *a = load(dir, "a.xml"), *d = load(dir, "d.xml");
    if (!a || !d) {
        rcoll_topo_free(a);
        rcoll_topo_free(d);
        return;
    }
    const char *how;
    const char *rev[2] = {"mlx5_1", "mlx5_0"};
    for (int i = 0; i < 8; i++) {
        int k = rcoll_topo_rank_nic(a, i, 8, rev, 2, &how);
        CHECK(k == (i < 4 ? 1 : 0) && !strcmp(how, "topology"),
              "a, 8 ranks: rank %d gets %s (%s), expected %s", i,
              k >= 0 && k < 2 ? rev[k] : "?", how, i < 4 ? "mlx5_0" : "mlx5_1");
        int nic = strcmp(rev[k], "mlx5_0") == 0 ? 0 : 1;
        CHECK(rcoll_topo_nic_package(a, nic) == rcoll_topo_gpu_package(a, i),
              "a: rank %d's NIC %d is on another socket than GPU %d", i, nic,
              i);
    }
    /* fewer ranks than GPUs: blocks of the list's order */
    static const int blk4[4] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++) {
        int k = rcoll_topo_rank_nic(a, i, 4, rev, 2, &how);
        CHECK(k == blk4[i] && !strcmp(how, "block"),
              "a, 4 ranks: rank %d gets %d (%s), expected %d (block)", i, k,
              how, blk4[i]);
    }
    /* devices the topology does not name: blocks */
    const char *er[2] = {"erdma_0", "erdma_1"};
    for (int i = 0; i < 8; i++) {
        int k = rcoll_topo_rank_nic(a, i, 8, er, 2, &how);
        CHECK(k == i / 4 && !strcmp(how, "block"),
              "a, unnamed devices: rank %d gets %d (%s)", i, k, how);
    }
    /* CPU only (d: an eRDMA NIC per socket), and no topology at all */
    for (int i = 0; i < 4; i++)
        CHECK(rcoll_topo_rank_nic(d, i, 4, er, 2, &how) == i / 2,
              "d, 4 ranks: rank %d", i);
    static const int blk3[3] = {0, 0, 1};
    for (int i = 0; i < 3; i++)
        CHECK(rcoll_topo_rank_nic(NULL, i, 3, er, 2, &how) == blk3[i],
              "no topology, 3 ranks: rank %d", i);
    const char *four[4] = {"a", "b", "c", "d"};
    for (int i = 0; i < 8; i++)
        CHECK(rcoll_topo_rank_nic(NULL, i, 8, four, 4, &how) == i / 2,
              "no topology, 8 ranks, 4 NICs: rank %d", i);
    CHECK(rcoll_topo_rank_nic(NULL, 2, 3, er, 1, &how) == 0,
          "one NIC: always it");
    rcoll_topo_free(a);
    rcoll_topo_free(d);
}

/* GPUs that tie on two NICs are spread over both */
static void ties(void)
{
    const char *x =
        "<topology><object type=\"Machine\"><object type=\"Package\">"
        "<object type=\"Bridge\" bridge_type=\"0-1\">"
        "%s</object></object></object></topology>";
    char devs[4096] = "", buf[8192];
    for (int i = 0; i < 6; i++) {
        char one[512];
        if (i < 2)
            snprintf(one, sizeof(one),
                     "<object type=\"Bridge\" bridge_type=\"1-1\">"
                     "<object type=\"PCIDev\" pci_busid=\"0000:0%d:00.0\" "
                     "pci_type=\"0200 [1ded:107f] [1ded:107f] 00\">"
                     "<object type=\"OSDev\" name=\"erdma_%d\" "
                     "osdev_type=\"3\"/></object></object>", i, i);
        else
            snprintf(one, sizeof(one),
                     "<object type='Bridge' bridge_type='1-1'>"
                     "<object type='PCIDev' pci_busid='0000:0%d:00.0' "
                     "pci_type='0302 [10de:2330] [10de:16c1] a1'/>"
                     "</object>", i);
        strcat(devs, one);
    }
    snprintf(buf, sizeof(buf), x, devs);
    rcoll_topo_t *t = NULL;
    char err[256] = "";
    CHECK(rcoll_topo_parse(buf, strlen(buf), &t, err, sizeof(err)) ==
              RCOLL_OK, "ties: %s", err);
    if (!t)
        return;
    CHECK(rcoll_topo_ngpus(t) == 4 && rcoll_topo_nnics(t) == 2,
          "ties: %d GPUs %d NICs", rcoll_topo_ngpus(t), rcoll_topo_nnics(t));
    static const int want[4] = {0, 1, 0, 1};
    check_nics(t, want, "ties (PHB to both NICs)");
    rcoll_topo_free(t);
}

static void bad_input(void)
{
    static const struct { const char *xml, *err; } cases[] = {
        {"", "no <topology>"},
        {"<object type='Machine'/>", "where <topology> was expected"},
        {"<topology>\n<object type='Machine'>\n</topology>",
         "line 3: </topology> does not close <object>"},
        {"<topology><object type='Machine'></object>", "not closed"},
        {"<topology><object type=Machine/></topology>", "not quoted"},
        {"<topology><object type='Mach", "unterminated"},
        {"<topology><!-- never closed", "unterminated comment"},
        {"<topology><object a='<'/></topology>", "'<' inside attribute"},
        {"<topology><distances2 name='NVLinkBandwidth'><indexes>1 x"
         "</indexes></distances2></topology>",
         "a number expected"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rcoll_topo_t *t = NULL;
        char err[256] = "";
        rcoll_status_t st = rcoll_topo_parse(cases[i].xml,
                                             strlen(cases[i].xml), &t, err,
                                             sizeof(err));
        CHECK(st == RCOLL_ERR_INVALID_ARGUMENT && !t &&
                  strstr(err, cases[i].err),
              "bad input %zu: status %d, message \"%s\", expected \"%s\"", i,
              st, err, cases[i].err);
    }
    /* nesting deeper than the cap is an error, not a stack overflow */
    size_t n = 100 * 32 + 64;
    char *deep = malloc(n);
    strcpy(deep, "<topology>");
    for (int i = 0; i < 100; i++)
        strcat(deep, "<object type='Group'>");
    rcoll_topo_t *t = NULL;
    char err[256] = "";
    CHECK(rcoll_topo_parse(deep, strlen(deep), &t, err, sizeof(err)) ==
                  RCOLL_ERR_INVALID_ARGUMENT &&
              strstr(err, "deeper"),
          "deep nesting: %s", err);
    free(deep);
    /* a missing file names it */
    CHECK(rcoll_topo_load("/nonexistent/topo.xml", &t, err, sizeof(err)) ==
                  RCOLL_ERR_INVALID_ARGUMENT &&
              strstr(err, "/nonexistent/topo.xml"),
          "missing file: %s", err);
    CHECK(rcoll_path_parse("pxb") == RCOLL_PATH_PXB &&
              rcoll_path_parse("SYS") == RCOLL_PATH_SYS &&
              rcoll_path_parse("far") == -1,
          "path names");
}

/* The ring order a communicator computes from its ranks' hosts. */
static void ring_case(const char *hosts, int topo, const char *want_ring,
                      int want_nh, int want_L)
{
    uint64_t id[32] = {0};
    int n = (int)strlen(hosts), ring[32], host[32], L = -1;
    for (int r = 0; r < n; r++)
        id[r] = (uint64_t)(unsigned char)hosts[r] * 0x9e3779b97f4a7c15ULL;
    int nh = rcoll_topo_ring_order(n, id, topo, ring, host, &L);
    char got[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%d",
                 i ? " " : "", ring[i]);
    CHECK(!strcmp(got, want_ring) && nh == want_nh && L == want_L,
          "ring order of %s (%s): %s, %d hosts of %d; expected %s, %d of %d",
          hosts, topo ? "topo" : "user", got, nh, L, want_ring, want_nh,
          want_L);
    /* hosts are numbered by their lowest rank */
    int seen = 0;
    for (int r = 0; r < n; r++) {
        int first = r;
        for (int q = 0; q < r; q++)
            if (hosts[q] == hosts[r]) {
                first = q;
                break;
            }
        int want = first < r ? host[first] : seen++;
        CHECK(host[r] == want, "host of rank %d in %s: %d, expected %d", r,
              hosts, host[r], want);
    }
}

/* 16,384 ranks dealt over 2,048 hosts: the topo ring groups them (host
 * h: ranks h, h + 2048, ...), in well under a second (it was n^2) */
static void ring_order_big(void)
{
    enum { N = 16384, H = 2048 };
    uint64_t *id = malloc(N * sizeof(*id));
    int *ring = malloc(N * sizeof(int)), *host = malloc(N * sizeof(int)), L;
    if (!id || !ring || !host) {
        free(id);
        free(ring);
        free(host);
        CHECK(0, "no memory");
        return;
    }
    for (int r = 0; r < N; r++)
        id[r] = (uint64_t)(H - r % H) * 0x9e3779b97f4a7c15ULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int nh = rcoll_topo_ring_order(N, id, 1, ring, host, &L);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) +
                 (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    int ok = nh == H && L == N / H;
    for (int i = 0; i < N && ok; i++)
        ok = ring[i] == (i % L) * H + i / L && host[ring[i]] == i / L;
    CHECK(ok && sec < 0.5, "16,384 ranks on 2,048 hosts: %d hosts of %d, "
          "ring %s, %.3f s", nh, L, ok ? "grouped" : "wrong", sec);
    free(id);
    free(ring);
    free(host);
}

static void ring_orders(void)
{
    ring_order_big();
    ring_case("ABABAB", 1, "0 2 4 1 3 5", 2, 3);
    ring_case("ABABAB", 0, "0 1 2 3 4 5", 2, 0); /* interleaved: no hier */
    ring_case("AABB", 0, "0 1 2 3", 2, 2);
    ring_case("AABB", 1, "0 1 2 3", 2, 2);
    ring_case("BAA", 1, "0 1 2", 2, 0);           /* 1 + 2 ranks */
    ring_case("CABACB", 1, "0 4 1 3 2 5", 3, 2);
    ring_case("ABABA", 1, "0 2 4 1 3", 2, 0);
    ring_case("A", 1, "0", 1, 1);
    ring_case("AAAA", 1, "0 1 2 3", 1, 4);
    ring_case("ABCD", 1, "0 1 2 3", 4, 1);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "tests/topo";
    topo_a(dir);
    topo_b(dir);
    topo_c(dir);
    topo_d(dir);
    rank_nics(dir);
    ties();
    bad_input();
    ring_orders();
    printf("test_topo: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
