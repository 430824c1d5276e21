/* The core's error channel: one record per thread (see pf_common.h). Thread-local rather than
 * passed down so that kernels keep plain-pointer signatures; the binding that called the core
 * reads it on the same thread right after the call returns. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/pf_common.h"

static _Thread_local pf_error last_error;

pf_status pf_fail(pf_status status, const char *arg, const char *fmt, ...)
{
    last_error.status = status;
    snprintf(last_error.arg, sizeof last_error.arg, "%s", arg ? arg : "");
    last_error.message[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(last_error.message, sizeof last_error.message, fmt, ap);
        va_end(ap);
    }
    return status;
}

const pf_error *pf_last_error(void) { return &last_error; }

void pf_clear_error(void) { memset(&last_error, 0, sizeof last_error); }
