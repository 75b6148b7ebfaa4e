/* blocking.c -- see blocking.h. */
#include "blocking.h"

#include <errno.h>
#include <unistd.h>

#include "common/util.h"

void serve_blocking(int fd, const service_t *svc)
{
    session_t *s = session_new(svc);
    if (s == NULL) {
        warn("out of memory: closing a connection");
        close(fd);
        return;
    }
    for (;;) {
        size_t len;
        const char *out = session_write_buf(s, &len);
        if (len > 0) {
            ssize_t put = write_some(fd, out, len);
            if (put < 0)
                break; /* EPIPE, ECONNRESET: the client is gone */
            session_did_write(s, (size_t)put);
            continue;
        }
        if (session_done(s))
            break;
        char *in = session_read_buf(s, &len);
        if (len == 0)
            break; /* cannot happen with the output drained; never spin */
        ssize_t got = read_some(fd, in, len);
        if (got < 0)
            break;
        if (got == 0)
            session_did_eof(s);
        else
            session_did_read(s, (size_t)got);
    }
    session_free(s);
    close(fd);
}
