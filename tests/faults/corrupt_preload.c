/* LD_PRELOAD shim for the corruption test: flips one random bit in the
 * data of some recv() calls, modelling corruption that got past TCP's
 * 16-bit checksum (a NIC, DMA or memory fault, an offload bug). Only
 * receives that return at least 2 KiB are touched (payload, not the
 * bootstrap's small records); one in FAULT_CORRUPT_EVERY of them
 * (default 200). The point of the test: with RCOLL_CHECKSUM=1 such a flip
 * is an error naming the sender, never a wrong result. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static ssize_t (*real_recv)(int, void *, size_t, int);
static unsigned every;
static uint64_t rng;

__attribute__((visibility("default"))) ssize_t recv(int fd, void *buf,
                                                   size_t len, int flags)
{
    if (!real_recv) {
        real_recv = (ssize_t(*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
        const char *e = getenv("FAULT_CORRUPT_EVERY");
        every = e ? (unsigned)atoi(e) : 200;
        if (!every)
            every = 200;
        rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    }
    ssize_t n = real_recv(fd, buf, len, flags);
    if (n >= 2048) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (rng % every == 0) {
            size_t bit = (size_t)((rng >> 20) % ((uint64_t)n * 8));
            ((unsigned char *)buf)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
    }
    return n;
}
