/* The registration cache (src/proto/rcache.c) and its memory monitor.
 *   unit  with a counting fake registration: a buffer used again is not
 *         registered again; one freed (free of a large block, munmap) and
 *         mapped again at the same address, or whose pages were dropped
 *         (MADV_DONTNEED), is registered again, never used through the
 *         old registration; the pinned-bytes bound evicts the least
 *         recently used; an invalidated entry is not reused. Skips (77)
 *         where no monitor can run (then nothing is cached, by design).
 *   comm  (under rcoll-run, 2 ranks; the RDMA guest runs it over ib) rank
 *         0 sends 2 MiB from a buffer, rank 1 receives into one; each
 *         round both unmap their buffer and map a new one at the same
 *         address with other contents: every round's bytes arrive exact
 *         (a stale registration would send or land the old pages); then
 *         one buffer used 4 times (cache hits), and rcoll_comm_dump
 *         shows the lanes' and the cache's counters. */
#define _GNU_SOURCE
#include "config.h"
#include "proto/rcache.h"
#include "proto/memmon.h"
#include <rcoll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int checks, failures;
#define CHECK(c, ...)                                                        \
    do {                                                                     \
        checks++;                                                            \
        if (!(c)) {                                                          \
            failures++;                                                      \
            printf("FAIL: " __VA_ARGS__);                                    \
            printf("\n");                                                    \
        }                                                                    \
    } while (0)

static int nreg, ndereg;
static void *fake_reg(void *ctx, void *addr, size_t len)
{
    (void)ctx;
    (void)addr;
    (void)len;
    nreg++;
    return malloc(1);
}
static void fake_dereg(void *ctx, void *h)
{
    (void)ctx;
    ndereg++;
    free(h);
}
static const rcoll_rcache_ops_t fake = {fake_reg, fake_dereg};

static void use(rcoll_rcache_t *rc, void *p, size_t len)
{
    void *h;
    rcoll_rcache_entry_t *e = rcoll_rcache_get(rc, p, len, &h);
    CHECK(e != NULL, "get %p", p);
    rcoll_rcache_put(rc, e);
}

static int unit(void)
{
    char why[200];
    if (!rcoll_memmon_available(why, sizeof(why))) {
        printf("SKIP: no memory monitor here (%s)\n", why);
        return 77;
    }
    size_t mb = (size_t)1 << 20;
    rcoll_rcache_t *rc = rcoll_rcache_create(&fake, NULL, 64 * mb);
    /* used again: one registration */
    char *a = malloc(4 * mb);
    memset(a, 1, 4 * mb);
    use(rc, a, 4 * mb);
    use(rc, a, 4 * mb);
    use(rc, a + mb, mb); /* inside it */
    CHECK(nreg == 1, "a buffer used three times: %d registrations", nreg);
    /* freed (glibc unmaps 4 MiB) and allocated again */
    free(a);
    char *b = malloc(4 * mb);
    memset(b, 2, 4 * mb);
    use(rc, b, 4 * mb);
    CHECK(nreg == 2 && ndereg == 1, "freed and allocated again (%s "
          "address): %d registrations, %d deregistrations",
          a == b ? "the same" : "another", nreg, ndereg);
    free(b);
    /* munmap, then mmap at the same address */
    char *m = mmap(NULL, 2 * mb, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 3, 2 * mb);
    use(rc, m, 2 * mb);
    int r0 = nreg;
    munmap(m, 2 * mb);
    char *m2 = mmap(m, 2 * mb, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(m2 == m, "mmap at the same address: %p for %p", (void *)m2,
          (void *)m);
    memset(m2, 4, 2 * mb);
    use(rc, m2, 2 * mb);
    CHECK(nreg == r0 + 1, "munmap, mmap at the same address: registered "
          "again (%d -> %d)", r0, nreg);
    /* the pages dropped */
    r0 = nreg;
    use(rc, m2, 2 * mb);
    CHECK(nreg == r0, "used again: a hit (%d -> %d)", r0, nreg);
    madvise(m2 + mb, 4096, MADV_DONTNEED);
    use(rc, m2, 2 * mb);
    CHECK(nreg == r0 + 1, "MADV_DONTNEED of one page: registered again "
          "(%d -> %d)", r0, nreg);
    /* invalidated on purpose */
    void *h;
    rcoll_rcache_entry_t *e = rcoll_rcache_get(rc, m2, 2 * mb, &h);
    rcoll_rcache_invalidate(rc, e);
    rcoll_rcache_put(rc, e);
    r0 = nreg;
    use(rc, m2, 2 * mb);
    CHECK(nreg == r0 + 1, "invalidated: registered again (%d -> %d)", r0,
          nreg);
    munmap(m2, 2 * mb);
    /* the bound: 64 MiB, three 24 MiB buffers used in turn */
    char *big[3];
    for (int i = 0; i < 3; i++) {
        big[i] = malloc(24 * mb);
        memset(big[i], 5, 24 * mb);
        use(rc, big[i], 24 * mb);
    }
    rcoll_rcache_stats_t st;
    rcoll_rcache_stats(rc, &st);
    CHECK(st.pinned <= 64 * mb + 3 * 4096 && st.evictions >= 1,
          "bound: %zu bytes pinned, %lu evicted", st.pinned, st.evictions);
    r0 = nreg;
    use(rc, big[2], 24 * mb); /* the most recent one stayed */
    CHECK(nreg == r0, "the most recently used stayed cached");
    for (int i = 0; i < 3; i++)
        free(big[i]);
    rcoll_rcache_stats(rc, &st);
    printf("rcache: %lu hits, %lu misses, %lu invalidations, %lu evictions\n",
           st.hits, st.misses, st.invalidations, st.evictions);
    rcoll_rcache_destroy(rc);
    CHECK(nreg == ndereg, "every registration deregistered: %d of %d",
          ndereg, nreg);
    printf("test_rcache unit: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}

/* Rank 0 sends b filled with `fill` to rank 1, which receives into b and
 * checks every byte. */
static void exchange(rcoll_comm_t c, int rank, char *b, size_t len, int fill)
{
    rcoll_status_t st;
    if (rank == 0) {
        memset(b, fill, len);
        st = rcoll_send(b, len, RCOLL_UINT8, 1, c, NULL);
    } else {
        memset(b, 0, len);
        st = rcoll_recv(b, len, RCOLL_UINT8, 0, c, NULL);
        size_t bad = 0;
        for (size_t i = 0; i < len; i++)
            bad += b[i] != (char)fill;
        CHECK(bad == 0, "'%c': %zu of %zu bytes are not the buffer's new "
              "contents", fill, bad, len);
    }
    CHECK(st == RCOLL_OK, "rank %d '%c': %s", rank, fill,
          rcoll_last_error());
}

static int comm(void)
{
    rcoll_comm_t c;
    int rank, n;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &n);
    size_t len = (size_t)2 << 20;
    char *at = NULL;
    for (int round = 0; round < 6 && n >= 2 && rank < 2; round++) {
        char *b = mmap(at, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS |
                           (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
        CHECK(b != MAP_FAILED && (!at || b == at),
              "rank %d round %d: mapped at %p, wanted %p", rank, round,
              (void *)b, (void *)at);
        if (b == MAP_FAILED)
            break;
        at = b;
        exchange(c, rank, b, len, 'a' + round);
        munmap(b, len);
    }
    /* one buffer sent from and received into 4 times: the cache's hits
     * (the dump below shows its counters: rcoll-info -p's lines) */
    char *b = malloc(len);
    for (int round = 0; b && round < 4 && n >= 2 && rank < 2; round++)
        exchange(c, rank, b, len, 'A' + round);
    rcoll_comm_dump(c);
    free(b);
    int f = failures, ft = 0;
    rcoll_allreduce(&f, &ft, 1, RCOLL_INT32, RCOLL_SUM, c, NULL);
    if (rank == 0)
        printf("test_rcache comm: %d ranks, %d checks on rank 0, %d failures "
               "on all ranks\n", n, checks, ft);
    rcoll_comm_destroy(c);
    return ft ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "comm"))
        return comm();
    return unit();
}
