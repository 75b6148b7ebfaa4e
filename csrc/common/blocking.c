/* blocking.c -- see blocking.h. */
#include "blocking.h"

#include <errno.h>
#include <sys/socket.h> /* shutdown(), setsockopt(): what a lingering close needs */
#include <sys/time.h>
#include <unistd.h>

#include "common/util.h"

/* End the connection.  A plain close(), as seed 002's servers did: if the
 * client sent more than was read (a body cut off by an ERR, say), the kernel
 * answers the unread bytes with a RST instead of a FIN, and the client's
 * next recv() fails with ECONNRESET, maybe before it read our last reply.
 * Notebook 03 provokes it, and its exercise makes this a lingering close. */
static void close_connection(int fd)
{
    close(fd);
}

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
    close_connection(fd);
}
