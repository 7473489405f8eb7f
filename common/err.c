/* err.c - names and messages generated from ERR_LIST (see err.h). */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const err_names[] = {
#define ERR_NAME_(name, msg) "ERR_" #name,
    ERR_LIST(ERR_NAME_)
#undef ERR_NAME_
};

static const char *const err_msgs[] = {
#define ERR_MSG_(name, msg) msg,
    ERR_LIST(ERR_MSG_)
#undef ERR_MSG_
};

static int err_index(int code)
{
    if (code <= ERR__FIRST || code >= ERR__LAST)
        return -1;
    return code - ERR__FIRST - 1;
}

const char *err_name(int code)
{
    if (code == 0)
        return "ERR_OK";
    int i = err_index(code);
    return i < 0 ? "ERR_UNKNOWN" : err_names[i];
}

const char *err_msg(int code)
{
    if (code == 0)
        return "ok";
    int i = err_index(code);
    return i < 0 ? "unknown error" : err_msgs[i];
}

int err_setf(char *err, size_t err_len, int rc, const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}
