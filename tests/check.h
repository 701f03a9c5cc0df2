/* CHECK(cond, fmt, ...): counts a check, and on failure a failure with a
 * printed reason. Tests define `rank` (-1 when single-process) or use
 * CHECK_RANK. Thread-safe counters. */
#ifndef RCOLL_TEST_CHECK_H
#define RCOLL_TEST_CHECK_H

#include <stdio.h>

static int checks, failures;
#ifndef CHECK_RANK
#define CHECK_RANK -1
#endif

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        __atomic_add_fetch(&checks, 1, __ATOMIC_RELAXED);                    \
        if (!(cond)) {                                                       \
            int _f = __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);     \
            if (_f <= 50) {                                                  \
                printf("FAIL rank %d %s:%d: ", CHECK_RANK, __FILE__,         \
                       __LINE__);                                            \
                printf(__VA_ARGS__);                                         \
                printf("\n");                                                \
                fflush(stdout);                                              \
            }                                                                \
        }                                                                    \
    } while (0)

#endif
