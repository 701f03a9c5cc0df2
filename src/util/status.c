/* Status strings and the thread-local last-error message. */
#include "util.h"
#include <stdio.h>
#include <string.h>

#define RCOLL_ERRMSG_LEN 1024
static __thread char rcoll_errmsg[RCOLL_ERRMSG_LEN];

RCOLL_API const char *rcoll_status_string(rcoll_status_t status)
{
    switch (status) {
    case RCOLL_OK:                   return "success";
    case RCOLL_INPROGRESS:           return "operation in progress";
    case RCOLL_ERR_INVALID_ARGUMENT: return "invalid argument";
    case RCOLL_ERR_NOT_SUPPORTED:    return "not supported";
    case RCOLL_ERR_TRUNCATED:        return "message truncated (receive buffer too small)";
    case RCOLL_ERR_NO_MEMORY:        return "out of memory";
    case RCOLL_ERR_SYSTEM:           return "system error";
    case RCOLL_ERR_NO_DEVICE:        return "no usable device";
    case RCOLL_ERR_REMOTE:           return "remote peer failed";
    case RCOLL_ERR_MISMATCH:         return "operation mismatch between ranks";
    case RCOLL_ERR_AUTH:             return "authentication failed";
    case RCOLL_ERR_PROTOCOL:         return "protocol error";
    case RCOLL_ERR_CORRUPT:          return "data corrupted in transit (checksum)";
    case RCOLL_ERR_TIMEOUT:          return "timeout";
    case RCOLL_ERR_ABORTED:          return "communicator aborted";
    case RCOLL_ERR_INTERNAL:         return "internal error";
    }
    return "unknown status";
}

RCOLL_API const char *rcoll_last_error(void)
{
    return rcoll_errmsg;
}

rcoll_status_t rcoll__set_error(rcoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    char tmp[RCOLL_ERRMSG_LEN];
    /* format aside: callers often pass rcoll_last_error() as an argument */
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    memcpy(rcoll_errmsg, tmp, sizeof(tmp));
    rcoll_debug(RCOLL_SUBSYS_ALL, "error %d: %s", status, rcoll_errmsg);
    return status;
}

void rcoll__set_error_str(const char *msg)
{
    if (msg != rcoll_errmsg)
        snprintf(rcoll_errmsg, sizeof(rcoll_errmsg), "%s", msg);
}

void rcoll__clear_error(void)
{
    rcoll_errmsg[0] = '\0';
}
