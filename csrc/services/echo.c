/* echo.c -- the `echo` service: every byte received is sent back, in order. */
#include "session.h"

#include <string.h>

static size_t echo_consume(session_t *s, void *state, const char *in, size_t len)
{
    (void)state;
    size_t n = len < session_out_room(s) ? len : session_out_room(s);
    char *out = n ? session_out_reserve(s, n) : NULL;
    if (out == NULL)
        return 0; /* output full (or no memory yet): retry when it drains */
    memcpy(out, in, n);
    session_out_commit(s, n);
    return n;
}

const service_t echo_service = { .name = "echo", .state_size = 0, .consume = echo_consume };
