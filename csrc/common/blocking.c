/* blocking.c -- see blocking.h. */
#include "blocking.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/socket.h> /* shutdown(), setsockopt(): what a lingering close needs */
#include <sys/time.h>
#include <unistd.h>

#include "common/server_main.h"
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

/* --idle-timeout: no read or write on fd may wait longer than `seconds`. */
static void set_io_timeouts(int fd, double seconds)
{
    struct timeval tv = { .tv_sec = (time_t)seconds,
                          .tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6) };
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1; /* {0, 0} would mean "no timeout" */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
        warn_errno("cannot set --idle-timeout on a connection");
}

/* A read or write failed: was it the idle timeout?  Count it if so. */
static void count_if_idle(void)
{
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        atomic_fetch_add_explicit(&server_counters.shed_idle, 1, memory_order_relaxed);
}

void serve_blocking(int fd, const service_t *svc, double idle_timeout_s)
{
    session_t *s = session_new(svc);
    if (s == NULL) {
        warn("out of memory: closing a connection");
        close(fd);
        return;
    }
    if (idle_timeout_s > 0)
        set_io_timeouts(fd, idle_timeout_s);
    for (;;) {
        size_t len;
        const char *out = session_write_buf(s, &len);
        if (len > 0) {
            ssize_t put = write_some(fd, out, len);
            if (put < 0) {
                count_if_idle(); /* EAGAIN: SO_SNDTIMEO, the client reads nothing: shed it */
                break;           /* EPIPE, ECONNRESET: the client is gone */
            }
            session_did_write(s, (size_t)put);
            continue;
        }
        if (session_done(s))
            break;
        char *in = session_read_buf(s, &len);
        if (len == 0)
            break; /* cannot happen with the output drained; never spin */
        ssize_t got = read_some(fd, in, len);
        if (got < 0) {
            count_if_idle(); /* EAGAIN: SO_RCVTIMEO, the client sends nothing: shed it */
            break;
        }
        if (got == 0)
            session_did_eof(s);
        else
            session_did_read(s, (size_t)got);
    }
    session_free(s);
    close_connection(fd);
}
