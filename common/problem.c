/* problem.c - the user-facing error record (see problem.h). */
#include "common/problem.h"

#include <stdarg.h>
#include <stdio.h>

#include "common/err.h"

int problem_setf(struct problem *p, const char *code, const char *param, const char *fmt, ...)
{
    if (p) {
        p->status = 400;
        snprintf(p->code, sizeof p->code, "%s", code ? code : "");
        snprintf(p->param, sizeof p->param, "%s", param ? param : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->message, sizeof p->message, fmt, ap);
        va_end(ap);
    }
    return ERR_INVAL;
}
