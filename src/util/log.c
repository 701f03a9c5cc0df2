/* Logging to stderr: "host:pid:rank rcoll LEVEL file:line message". */
#include "util.h"
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

int rcoll__log_level = RCOLL_LOG_WARN;
int rcoll__log_subsys = RCOLL_SUBSYS_ALL;
__thread int rcoll__log_rank = -1; /* per thread: threads serve different communicators */

void rcoll__log(int level, const char *file, int line, const char *fmt, ...)
{
    static const char *const lvl[] = {"", "WARN", "INFO", "DEBUG", "TRACE"};
    char msg[1024];
    va_list ap;
    const char *base = strrchr(file, '/');

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d:%d rcoll %s %s:%d %s\n", rcoll_hostname(),
            (int)getpid(), rcoll__log_rank, lvl[level], base ? base + 1 : file,
            line, msg);
}
